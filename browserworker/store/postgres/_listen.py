"""PostgreSQL's wake-ups: ``LISTEN browserworker_queued`` on a connection of its own.

Every commit that makes a run QUEUED (enqueue, release, a requeue after a lost lease or a
review) notifies ``browserworker_queued`` with ``'<schema>:<queue>'`` (a trigger, in the
schema's migrations). A :class:`Listener` hears them on a thread of its own and wakes the
worker's loop. When its connection is lost it wakes the worker once (something may have been
missed: the worker claims, or polls meanwhile) and reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ...logs import get_logger

__all__ = ["CHANNEL", "Listener"]

CHANNEL = "browserworker_queued"
_BACKOFF_FIRST, _BACKOFF_MAX = 0.1, 5.0

log = get_logger("browserworker.store")


class Listener:
    """:class:`~browserworker.store.wakeups.Wakeups` from PostgreSQL notifications."""

    def __init__(self, connect: Callable[[], Any], schema: str, queues: Sequence[str]) -> None:
        self._connect = connect
        self._payloads = {f"{schema}:{queue}" for queue in queues}
        self._lock = threading.Lock()
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._pending = False
        self._closing = threading.Event()
        self.connected = threading.Event()
        self.heard = 0  # notifications of our queues (for tests and benchmarks)
        self.listens = 0  # connections that started listening (1, plus one per reconnect)
        self._thread = threading.Thread(target=self._serve, name="browserworker-listen", daemon=True)
        self._thread.start()

    def next(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._pending:
                self._pending = False
                future.set_result(None)
            else:  # (the waits that ended without a wake-up are cancelled: drop them)
                self._waiting = [(lp, f) for lp, f in self._waiting if not f.done()]
                self._waiting.append((loop, future))
        return future

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=5)

    def _wake(self) -> None:
        with self._lock:
            waiting = [(loop, f) for loop, f in self._waiting if not f.done()]
            self._waiting = []
            if not waiting:  # nobody waits now: the next wait ends at once
                self._pending = True
        for loop, future in waiting:
            try:
                loop.call_soon_threadsafe(_settle, future)
            except RuntimeError:  # that loop is closed
                pass

    def _serve(self) -> None:
        pause = _BACKOFF_FIRST
        while not self._closing.is_set():
            try:
                conn = self._connect()
            except Exception as exc:  # noqa: BLE001 - a StoreError: the database is unreachable
                log.warning("cannot listen for wake-ups; polling meanwhile", error=str(exc), retry_in=pause)
                self._closing.wait(pause)
                pause = min(pause * 2, _BACKOFF_MAX)
                continue
            try:
                self._listen(conn)
                pause = _BACKOFF_FIRST
            except Exception as exc:  # noqa: BLE001 - the connection broke
                log.warning("lost the wake-up connection; polling meanwhile", error=str(exc))
            finally:
                self.connected.clear()
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass
            self._wake()  # something may have been missed while the connection was down

    def _listen(self, conn: Any) -> None:
        conn.execute(f"LISTEN {CHANNEL}")
        self.listens += 1
        self.connected.set()
        self._wake()  # runs may have been queued before this LISTEN took effect
        while not self._closing.is_set():
            for note in conn.notifies(timeout=1.0):
                if note.payload in self._payloads:
                    self.heard += 1
                    self._wake()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
