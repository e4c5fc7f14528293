"""The SQLite store: WAL, ``synchronous=FULL``, a busy timeout, versioned migrations.

One host, one file. The store's clock is this process's clock. Connections are opened
with ``isolation_level=None`` and every write runs in ``BEGIN IMMEDIATE`` so that a
fenced check and its write are one atomic step across processes.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .base import GroupSpoiled, SQLStore, load_queries

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

_SQL_PACKAGE = "browserworker.store.sql"


def _migrations() -> list[tuple[int, str]]:
    """``[(version, sql)]`` from the numbered ``NNNN_*.sql`` files, in order."""
    found = []
    for entry in resources.files(_SQL_PACKAGE).iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), entry.read_text()))
    return sorted(found)


SCHEMA_VERSION = max(v for v, _ in _migrations())

# Python 3.11's sqlite3 binds a None parameter by looking for an adapter and, finding none,
# raising and discarding an AttributeError (~0.4 µs each; a run binds dozens). An identity
# adapter for None is found at once. Added only if nobody registered one; it changes nothing.
sqlite3.adapters.setdefault((type(None), sqlite3.PrepareProtocol), lambda value: value)

ENV_BUSY_TIMEOUT = "BROWSERWORKER_BUSY_TIMEOUT"
DEFAULT_BUSY_TIMEOUT = 5.0

# _begin's pauses between tries for the write lock: 0.1 ms while another process's group
# commits are the likely holder (each takes a few ms), then backing off to 2 ms
_FAST_POLL, _FAST_FOR, _SLOW_POLL = 0.0001, 0.05, 0.002


def _busy_timeout() -> float:
    """Seconds a write waits for another process's lock: ``BROWSERWORKER_BUSY_TIMEOUT``, else 5."""
    raw = os.environ.get(ENV_BUSY_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_BUSY_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise StoreError(f"{ENV_BUSY_TIMEOUT}={raw!r}: expected a number of seconds between 0 and 3600")
    return value


class SQLiteStore(SQLStore):
    """A :class:`~browserworker.store.base.Store` in one SQLite file.

    ``SQLiteStore(path)`` creates the file and applies migrations; ``create=False``
    refuses to create a missing database (for read-only commands such as ``show``).
    """

    queries = load_queries(_SQL_PACKAGE, "queries.sql")

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float | None = None, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreError(f"no database at {self.path} (nothing has run here yet; use --db to point at one)")
        busy_timeout = _busy_timeout() if busy_timeout is None else busy_timeout
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._grouped = False
        self._isolated = True
        self._group_lost: BaseException | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        self.conn = conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":  # pragma: no cover - e.g. a read-only medium
                raise StoreError(f"{self.path}: could not switch to WAL (journal_mode is {mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot open database {self.path}: {exc}") from exc

    @property
    def db(self) -> Any:
        """The same connection as a ``sqlite_utils.Database`` (tables, schema, ad-hoc queries).

        Imported on first use: it is for tooling, not for the hot path.
        """
        import sqlite_utils

        return sqlite_utils.Database(self.conn)

    # -- dialect hooks ------------------------------------------------------------

    def now(self) -> float:
        return time.time()

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    @contextmanager
    def group(self, *, isolate: bool = True) -> Iterator[None]:
        """One transaction (one fsync) around many store calls: group commit.

        With ``isolate`` (the default), each call's own transaction becomes a savepoint, so a
        call that fails rolls back only itself. Without it the calls share the transaction
        bare (two statements fewer per call), and the first call whose transaction block
        fails spoils the group: later calls raise at once and the group rolls everything
        back and raises :class:`GroupSpoiled` — the caller runs the batch again isolated.
        Nothing is durable, so nobody may act on a result, until the group commits:
        :class:`~browserworker.store.aio.AsyncStore` hands results out only then.
        If SQLite rolls the whole transaction back (it may, on a full disk or an I/O error),
        the rest of the group's calls fail at once and the group raises :class:`StoreError`.
        """
        with self._lock:
            self._begin()
            self._grouped, self._isolated, self._group_lost = True, isolate, None
            try:
                yield
            except BaseException:
                self._grouped = False
                self._rollback()
                raise
            self._grouped = False
            if self._group_lost is not None:
                self._rollback()
                if isinstance(self._group_lost, GroupSpoiled):
                    raise self._group_lost
                raise StoreError(f"{self.path}: the batch's transaction was rolled back: {self._group_lost}")
            self._commit()

    def _begin(self) -> None:
        """``BEGIN IMMEDIATE``, waiting up to the busy timeout for another writer's lock.

        SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25… ms between tries, which
        misses the short gaps between another process's back-to-back group commits (it can
        sleep through many of them, and the lock sits idle while it does). This tries every
        0.1 ms for the first 50 ms, the span of a few group commits, then backs off to 2 ms.
        """
        conn = self.conn
        start = time.monotonic()
        deadline, fast_until, pause = start + self.busy_timeout, start + _FAST_FOR, _FAST_POLL
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    now = time.monotonic()
                    left = deadline - now
                    if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or left <= 0:
                        raise StoreError(f"{self.path}: cannot start a write transaction: {exc}") from exc
                time.sleep(min(pause, left))
                if now >= fast_until:
                    pause = min(pause * 2, _SLOW_POLL)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")

    def _commit(self) -> None:
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise StoreError(f"{self.path}: commit failed: {exc}") from exc

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def _transaction(self) -> _Transaction:
        return _Transaction(self)

    def _read(self, query: str, params: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        with self._lock:
            try:
                return list(self.conn.execute(query, params).fetchall())
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: read failed: {exc}") from exc

    # -- schema ---------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {current}, newer than this browserworker "
                             f"({SCHEMA_VERSION}); upgrade browserworker")
        if current == SCHEMA_VERSION:
            return
        with self._lock:
            # under the write lock, so two processes opening a new database migrate it once
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                current = int(self.conn.execute("PRAGMA user_version").fetchone()[0])
                for version, sql in _migrations():
                    if version <= current:
                        continue
                    for statement in _split_statements(sql):
                        self.conn.execute(statement)
                    self.conn.execute(f"PRAGMA user_version = {version}")
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    def integrity_check(self) -> str:
        with self._lock:
            return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])


class _Transaction:
    """``with store._transaction() as conn``: one store call's writes, atomically.

    Alone: ``BEGIN IMMEDIATE`` … ``COMMIT``. Inside :meth:`SQLiteStore.group`: a savepoint,
    so a failing call rolls back only itself. Every SQLite failure becomes a
    :class:`StoreError`. (A class, not a generator: this runs for every write.)
    """

    __slots__ = ("_store", "_grouped")

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._grouped = False

    def __enter__(self) -> sqlite3.Connection:
        store = self._store
        store._lock.acquire()
        try:
            self._grouped = store._grouped
            if not self._grouped:
                store._begin()
            elif store._group_lost is not None:
                raise StoreError(f"{store.path}: the batch's transaction was rolled back: {store._group_lost}")
            elif store._isolated:
                store.conn.execute("SAVEPOINT bw_call")
            elif not store.conn.in_transaction:  # SQLite dropped the group's transaction: never autocommit
                raise StoreError(f"{store.path}: the batch's transaction was rolled back")
        except sqlite3.Error as exc:
            store._lock.release()
            raise StoreError(f"{store.path}: write failed: {exc}") from exc
        except BaseException:
            store._lock.release()
            raise
        return store.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        store = self._store
        conn = store.conn
        try:
            if not self._grouped:
                if exc is None:
                    store._commit()
                    return
                store._rollback()
            elif not store._isolated:  # a bare call in a group: its failure spoils the whole group
                if exc is not None:
                    store._group_lost = GroupSpoiled(f"{store.path}: a call of the batch failed: {exc!r}")
                return
            elif exc is None:
                conn.execute("RELEASE bw_call")
                return
            elif conn.in_transaction:
                conn.execute("ROLLBACK TO bw_call")
                conn.execute("RELEASE bw_call")
            else:  # SQLite rolled back the group's whole transaction (disk full, I/O error)
                store._group_lost = exc
        except sqlite3.Error as failure:
            if self._grouped:
                store._group_lost = failure
            raise StoreError(f"{store.path}: write failed: {failure}") from failure
        finally:
            store._lock.release()
        if isinstance(exc, sqlite3.Error):  # e.g. disk full, read-only file: a store failure, not a bug
            raise StoreError(f"{store.path}: write failed: {exc}") from exc


def _split_statements(sql: str) -> list[str]:
    """Split a migration script into statements (executescript would commit implicitly)."""
    statements, buf = [], []
    for line in sql.splitlines():
        if line.strip().startswith("--"):
            continue
        buf.append(line)
        candidate = "\n".join(buf).strip()
        if candidate.endswith(";") and sqlite3.complete_statement(candidate):
            statements.append(candidate)
            buf = []
    rest = "\n".join(buf).strip()
    if rest:
        statements.append(rest)
    return statements
