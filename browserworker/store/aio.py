"""Calling a synchronous :class:`Store` from asyncio, with group commit.

All calls go to one dedicated thread. When several are waiting (concurrent runs in one
worker), the thread runs them together in one transaction — each in its own savepoint —
and commits once: one fsync for the whole batch instead of one per call. A caller gets
its result only after that commit, so nothing is acted on before it is durable.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, ParamSpec, TypeVar

from ..errors import StoreError
from .base import Store

__all__ = ["AsyncStore"]

P = ParamSpec("P")
T = TypeVar("T")

_STOP = object()


class AsyncStore:
    """``await astore.call(store.begin_attempt, ...)``; the wrapped store stays usable directly.

    ``max_batch`` caps how many calls share one commit (1 turns group commit off).
    """

    def __init__(self, store: Store, *, max_batch: int = 64) -> None:
        self.store = store
        self.max_batch = max_batch if hasattr(store, "group") else 1
        self.commits = 0  # transactions committed by this thread (for benchmarks)
        self.calls = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="browserworker-store", daemon=True)
        self._thread.start()

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        future: Future[T] = Future()
        self._queue.put((functools.partial(fn, *args, **kwargs), future))
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    self._run(batch)
                    return
                batch.append(nxt)
            self._run(batch)

    def _run(self, batch: list[tuple[Callable[[], Any], Future[Any]]]) -> None:
        # a call whose caller was cancelled while it waited is skipped (as ThreadPoolExecutor
        # does); the others can no longer be cancelled, so setting their result cannot fail
        batch = [(fn, future) for fn, future in batch if future.set_running_or_notify_cancel()]
        if not batch:
            return
        self.calls += len(batch)
        if len(batch) == 1:
            fn, future = batch[0]
            self.commits += 1
            _settle(future, fn)
            return
        outcomes: list[tuple[bool, Any]] = []
        try:
            with self.store.group():  # type: ignore[attr-defined]
                for fn, _ in batch:
                    try:
                        outcomes.append((True, fn()))
                    except BaseException as exc:  # the call's own failure: its savepoint rolled back
                        outcomes.append((False, exc))
        except StoreError as exc:  # the group could not start or commit: nothing of it is durable
            for _, future in batch:
                future.set_exception(StoreError(str(exc)))
            return
        self.commits += 1
        for (ok, value), (_, future) in zip(outcomes, batch, strict=True):
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


def _settle(future: Future[Any], fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except BaseException as exc:
        future.set_exception(exc)
