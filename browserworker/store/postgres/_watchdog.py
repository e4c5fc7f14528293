"""A deadline for PostgreSQL calls whose server never answers.

A partition ends a blocked call by itself: the TCP user timeout (``tcp_user_timeout``, see
``_NETWORK`` in :mod:`~browserworker.store.postgres._store`) gives up on data nobody acknowledges. A
peer that acknowledges but never answers does not: a stalled server, or a proxy or relay that
holds the link open and forwards nothing. libpq has no client-side timeout for a query, so such a
call would block the store's thread (every call of the worker) for as long as the stall lasts.

:class:`Watchdog` tracks the connections in use and, once one has been in use past its deadline,
shuts its socket down (both ways): the blocked call then fails as if the server had closed the
connection (a :class:`~browserworker.errors.StoreError`), and the pool replaces it. The deadline
is longer than the server's ``statement_timeout``, so a call the server is working on is never cut.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...logs import get_logger

__all__ = ["Watchdog"]

log = get_logger("browserworker.store")


class Watchdog:
    """Severs a connection in use for longer than ``seconds``; one thread, started on first use."""

    def __init__(self, seconds: float, *, name: str = "browserworker-watchdog") -> None:
        self.seconds = seconds
        self.severed = 0  # connections cut (for tests)
        self._name = name
        self._lock = threading.Lock()
        self._in_use: dict[int, tuple[float, Any]] = {}  # id(conn) -> (deadline, conn)
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watch(self, conn: Any) -> Iterator[None]:
        """``conn`` is in use inside the block: severed if the block lasts past the deadline."""
        key = id(conn)
        with self._lock:
            self._in_use[key] = (time.monotonic() + self.seconds, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._in_use.pop(key, None)

    def close(self) -> None:
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _serve(self) -> None:
        while not self._closing.wait(min(1.0, self.seconds / 4)):
            now = time.monotonic()
            with self._lock:  # severed under the lock: a call that ends meanwhile waits to hand it back
                for key, (deadline, conn) in list(self._in_use.items()):
                    if now >= deadline:
                        del self._in_use[key]
                        self._sever(conn)

    def _sever(self, conn: Any) -> None:
        """Shut the connection's socket down (not close its descriptor: libpq still owns that)."""
        try:
            sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
        except Exception:  # noqa: BLE001 - closed meanwhile: nothing to cut
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
            self.severed += 1
            log.warning(
                "a database call went unanswered past its deadline: its connection was cut", deadline=self.seconds
            )
        except OSError:
            pass
        finally:
            sock.close()
