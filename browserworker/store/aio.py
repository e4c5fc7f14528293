"""Calling a synchronous :class:`Store` from asyncio without blocking the event loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from .base import Store

__all__ = ["AsyncStore"]

P = ParamSpec("P")
T = TypeVar("T")


class AsyncStore:
    """Runs store calls on one dedicated thread, so commits (fsyncs) never stall the page.

    ``await astore.call(store.begin_attempt, ...)``; the wrapped store stays usable directly.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="browserworker-store")

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
