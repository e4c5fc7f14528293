"""Calling a synchronous :class:`Store` from asyncio, with group commit.

All calls go to one dedicated thread. When several are waiting (concurrent runs in one
worker), the thread runs them together in one transaction and commits once: one fsync for
the whole batch instead of one per call. A caller gets its result only after that commit,
so nothing is acted on before it is durable.

Reads (store methods marked :func:`~browserworker.store.manager.read_only`) that lead a
batch run before it, each on its own, outside the write transaction; the rest of the batch,
reads included, runs inside it in order.

A batch first runs bare, with no savepoint per call (the common case: every call succeeds),
and with the calls of one hot method together, as one call of its many form
(:mod:`~browserworker.store.coalesce`: 64 intents, one pipeline of 64 statements on
PostgreSQL instead of 64 round trips). If one fails, that try is rolled back whole and the
batch runs again with each call alone, in its own savepoint, so a failing call rolls back
only itself. A call may therefore run twice (the first time undone): store calls must have
no effect outside the database.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from ..errors import GroupSpoiled, StoreError
from .base import Store
from .coalesce import Entry, plan

__all__ = ["AsyncStore"]

P = ParamSpec("P")
T = TypeVar("T")

_STOP = object()

# (function, args, kwargs, the caller's loop, the caller's future)
_Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class AsyncStore:
    """``await astore.call(store.begin_attempt, ...)``; the wrapped store stays usable directly.

    ``max_batch`` caps how many calls share one commit (1 turns group commit off). The
    results of a batch reach their callers' event loop in one wake-up, not one per call
    (two when reads lead it: theirs come first).
    """

    def __init__(self, store: Store, *, max_batch: int = 256) -> None:
        self.store = store
        self.max_batch = max_batch
        self.commits = 0  # transactions committed by this thread (for benchmarks)
        self.calls = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="browserworker-store", daemon=True)
        self._thread.start()

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((fn, args, kwargs, loop, future))
        return await future

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

    def _run(self, batch: list[_Call]) -> None:
        # a call whose caller was cancelled while it waited is skipped (as ThreadPoolExecutor
        # does); one cancelled after this check still runs, and its result is dropped
        batch = [call for call in batch if not call[4].cancelled()]
        # the reads that lead the batch run first, outside its write transaction: they need
        # no write lock (another process may hold it, while WAL lets them read), and their
        # callers get their results at once instead of after the batch's commit
        lead = 0
        while lead < len(batch) and getattr(batch[lead][0], "read_only", False) is True:
            lead += 1
        if lead:
            reads, batch = batch[:lead], batch[lead:]
            self.calls += lead
            _deliver_all(reads, self._reads(reads))
        if not batch:
            return
        self.calls += len(batch)
        if len(batch) == 1:
            outcomes = [_outcome(batch[0])]
            self.commits += 1
        else:
            # first bare (no savepoint per call), with a method's calls together (coalesce);
            # if any call fails, nothing of that try is durable and the batch runs again with
            # each call alone, in its own savepoint
            try:
                outcomes = self._group(batch, isolate=False)
            except _Spoiled:
                outcomes = self._group(batch, isolate=True)
        _deliver_all(batch, outcomes)

    def _reads(self, reads: list[_Call]) -> list[tuple[bool, Any]]:
        """Leading reads, a method's calls together; a failed one of many is asked again alone."""
        outcomes: list[tuple[bool, Any]] = [(False, None)] * len(reads)
        for entry in plan([call[:3] for call in reads]):
            if entry.many is not None and len(entry.calls) > 1:
                assert entry.items is not None
                try:
                    results = entry.many(entry.items)
                except Exception:
                    pass
                else:
                    for at, result in zip(entry.calls, results, strict=True):
                        outcomes[at] = (True, result)
                    continue
            for at in entry.calls:
                outcomes[at] = _outcome(reads[at])
        return outcomes

    def _group(self, batch: list[_Call], *, isolate: bool) -> list[tuple[bool, Any]]:
        """Run ``batch`` in one transaction; :class:`_Spoiled` (all rolled back) if a bare try's call failed."""
        outcomes: list[tuple[bool, Any]] = [(False, None)] * len(batch)
        try:
            with self.store.group(isolate=isolate):
                if isolate:
                    for at, call in enumerate(batch):
                        outcomes[at] = _outcome(call)
                else:
                    for entry in plan([call[:3] for call in batch]):
                        self._bare(batch, entry, outcomes)
        except GroupSpoiled as exc:
            raise _Spoiled from exc
        except StoreError as exc:  # the group could not start or commit: nothing of it is durable
            return [(False, StoreError(str(exc))) for _ in batch]
        self.commits += 1
        return outcomes

    @staticmethod
    def _bare(batch: list[_Call], entry: Entry, outcomes: list[tuple[bool, Any]]) -> None:
        """One entry of a bare group: :class:`_Spoiled` if any of its calls failed."""
        if entry.many is None or len(entry.calls) == 1:
            outcome = _outcome(batch[entry.calls[0]])
            if not outcome[0]:
                raise _Spoiled
            outcomes[entry.calls[0]] = outcome
            return
        assert entry.items is not None
        try:
            results = entry.many(entry.items)
        except Exception as exc:
            raise _Spoiled from exc
        for at, result in zip(entry.calls, results, strict=True):
            outcomes[at] = (True, result)


class _Spoiled(Exception):
    """A bare group's call failed: roll the group back and run it again isolated."""


def _outcome(call: _Call) -> tuple[bool, Any]:
    """Run one call: ``(True, result)`` or ``(False, exception)``."""
    fn, args, kwargs, _, _ = call
    try:
        return True, fn(*args, **kwargs)
    except BaseException as exc:
        return False, exc


def _deliver_all(batch: list[_Call], outcomes: list[tuple[bool, Any]]) -> None:
    """Hand results to their loops, one ``call_soon_threadsafe`` (one wake-up) per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for (_, _, _, loop, future), (ok, value) in zip(batch, outcomes, strict=True):
        by_loop.setdefault(loop, []).append((future, ok, value))
    for loop, results in by_loop.items():
        try:
            loop.call_soon_threadsafe(_deliver, results)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
            pass


def _deliver(results: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in results:
        if future.done():  # cancelled meanwhile
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
