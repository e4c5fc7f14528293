"""The SQLite dialect: :class:`SQLiteConnector` and :class:`SQLiteStore`, the shared store over it.

One host, one file: WAL, ``synchronous=FULL``, a busy timeout, versioned migrations
(``PRAGMA user_version``). The store's clock is this process's clock. Connections are
opened with ``isolation_level=None`` and every write runs in ``BEGIN IMMEDIATE``: writers
are serialised, so each fence (see :mod:`~browserworker.store.manager`) holds for the whole
transaction without any row lock (this dialect's fragments are empty). Ids come from
``cursor.lastrowid``: no write says ``RETURNING`` (see the top of ``sql/queries.sql``).
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from ... import _faults as faults
from ...errors import GroupSpoiled, StoreError
from ..connector import SQL_PACKAGE, Row, compile_queries, load_queries, numbered_migrations, shared_queries
from ..shared import SQLStore
from ..wakeups import NoWakeups

__all__ = ["SCHEMA_VERSION", "SQLiteConnector", "SQLiteStore"]

_MIGRATIONS = "sqlite"  # the numbered NNNN_*.sql files of this dialect, under sql/<dialect>/


def _migrations() -> list[tuple[int, str]]:
    return numbered_migrations(_MIGRATIONS)


SCHEMA_VERSION = max(v for v, _ in _migrations())

#: the fences' hooks (see :mod:`~browserworker.store.connector`): no row locks, since
#: ``BEGIN IMMEDIATE`` serialises every writer; leases are judged by the call's clock (one host)
FRAGMENTS = {"share_run": "", "lock_row": "", "skip_locked": "", "clock": ":now"}
#: this dialect's queries: the shared ones, SQLite's overrides (sql/sqlite.sql) over them
QUERIES = compile_queries(shared_queries(), load_queries(SQL_PACKAGE, "sqlite.sql"), FRAGMENTS)

# Python 3.11's sqlite3 binds a None parameter by looking for an adapter and, finding none,
# raising and discarding an AttributeError (~0.4 µs each; a run binds dozens). An identity
# adapter for None is found at once. Added only if nobody registered one; it changes nothing.
sqlite3.adapters.setdefault((type(None), sqlite3.PrepareProtocol), lambda value: value)

ENV_BUSY_TIMEOUT = "BROWSERWORKER_BUSY_TIMEOUT"
DEFAULT_BUSY_TIMEOUT = 5.0

# _begin's pauses between tries for the write lock: 0.1 ms while another process's group
# commits are the likely holder (each takes a few ms), then backing off to 2 ms
_FAST_POLL, _FAST_FOR, _SLOW_POLL = 0.0001, 0.05, 0.002

_PARAM = re.compile(r"'(?:[^']|'')*'|:(\w+)")


def positional(sql: str) -> str:
    """``sql`` with each ``:name`` as ``?N``, numbered in the order the names first appear
    (string literals left alone): bound from a sequence, not a mapping."""
    order: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group(0)
        return f"?{order.setdefault(name, len(order) + 1)}"

    return _PARAM.sub(number, sql)


def unopenable(path: Path, error: BaseException | None = None) -> str | None:
    """Why the database file ``path`` cannot be opened, in a user's words.

    Without ``error`` (before opening): a directory, or a missing directory (not created: a
    typo in ``--db`` should not leave a new directory behind); None if neither. With
    ``error`` (what SQLite said when opening failed): the cause found (the file or its
    directory not writable, or immutable), else SQLite's own message."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        return f"it is a directory (give a file path inside it, e.g. {path / 'browserworker.db'})"
    if not parent.exists():
        return f"its directory {parent} does not exist (create it first)"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if error is None:
        return None
    if not os.access(parent, os.W_OK | os.X_OK):
        return (
            f"{error}: its directory {parent} is not writable by this user, or is immutable (SQLite "
            "creates the file and its -wal and -shm files there)"
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        return f"{error}: the file is not writable by this user, or is immutable (see lsattr)"
    return str(error)


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


class SQLiteConnector:
    """A :class:`~browserworker.store.connector.Connector` for one SQLite file.

    ``SQLiteConnector(path)`` creates the file and applies migrations; ``create=False``
    refuses to create a missing database. :meth:`over` wraps a connection someone else
    opened (no PRAGMAs, no migrations: the maintenance commands).
    """

    dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float | None = None, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreError(f"no database at {self.path} (nothing has run here yet; use --db to point at one)")
        self.busy_timeout = _busy_timeout() if busy_timeout is None else busy_timeout
        refused = unopenable(self.path)
        if refused:
            raise StoreError(f"cannot open database {self.path}: {refused}")
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open database {self.path}: {unopenable(self.path, exc)}") from exc
        self._setup(conn)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            mode = self._to_wal(conn)
            if str(mode).lower() != "wal":  # pragma: no cover - e.g. a read-only medium
                raise StoreError(f"{self.path}: could not switch to WAL (journal_mode is {mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot open database {self.path}: {unopenable(self.path, exc)}") from exc

    def _to_wal(self, conn: sqlite3.Connection) -> str:
        """Switch the file to WAL; its journal mode after. A new file that other processes open
        at the same moment answers "database is locked" at once, without the busy timeout (its
        switch needs the file alone, and SQLite will not wait on a lock another switch may hold
        while waiting on its own): tried again until the busy timeout has passed."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.005)

    @classmethod
    def over(cls, conn: sqlite3.Connection, path: str | os.PathLike[str]) -> SQLiteConnector:
        """A connector over an open connection (``isolation_level=None``), as it is."""
        self = cls.__new__(cls)
        self.path = Path(path)
        self.busy_timeout = _busy_timeout()
        self._setup(conn)
        return self

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.row_factory = sqlite3.Row
        self.conn = conn
        #: the connector's one lock: held by a transaction, a group, or a whole-file operation (_files.py)
        self.lock = threading.RLock()
        faults.guard(self.lock)  # a fault's stop waits until no transaction of this connector is open
        self._grouped = False
        self._isolated = True
        self._group_lost: BaseException | None = None
        self._tx = _Tx(conn)

    @property
    def location(self) -> str:
        return str(self.path)

    @property
    def session_key_file(self) -> Path:
        """Where the key sealing saved login sessions is kept when no environment variable
        gives one: a file beside the database (:mod:`browserworker.runtime._login_sessions`)."""
        return self.path.with_name(self.path.name + ".session-key")

    def now(self) -> float:
        return time.time()

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def group(self, *, isolate: bool = True) -> Iterator[None]:
        """One transaction (one fsync) around many store calls: group commit.

        With ``isolate``, each call's transaction is a savepoint; without, the calls share
        the transaction bare and the first failing call spoils the group (:class:`GroupSpoiled`).
        If SQLite rolls the whole transaction back (it may, on a full disk or an I/O error),
        the rest of the group's calls fail at once and the group raises :class:`StoreError`.
        """
        with self.lock:
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

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    # -- reads --------------------------------------------------------------------

    def read(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        with self.lock:
            try:
                return list(self.conn.execute(QUERIES[query], params).fetchall())
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: read failed: {exc}") from exc

    def read_one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        with self.lock:
            try:
                row: Row | None = self.conn.execute(QUERIES[query], params).fetchone()
                return row
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: read failed: {exc}") from exc

    def read_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        return [self.read_one(query, p) for p in params]

    # -- schema, integrity, backup ------------------------------------------------

    @property
    def schema_version(self) -> int:
        with self.lock:
            return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {current}, newer than this browserworker "
                f"({SCHEMA_VERSION}); upgrade browserworker"
            )
        if current == SCHEMA_VERSION:
            return
        with self.lock:
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
        with self.lock:
            return "; ".join(str(r[0]) for r in self.conn.execute("PRAGMA integrity_check"))

    def backup(self, dest: str) -> None:
        """SQLite's online backup API, all pages in one step (one read transaction: one
        snapshot, while WAL lets writers go on), into a self-contained file (journal_mode DELETE)."""
        with self.lock:
            try:
                with closing(sqlite3.connect(dest, isolation_level=None)) as copy:
                    self.conn.backup(copy)
                    copy.execute("PRAGMA journal_mode = DELETE")
            except sqlite3.Error as exc:
                raise StoreError(f"backup of {self.path} failed: {exc}") from exc

    def wakeups(self, queues: Sequence[str]) -> NoWakeups:
        """None: a SQLite store's workers poll (one file, no server to notify them)."""
        return NoWakeups()


class _Tx:
    """The write side of a SQLite transaction: named queries on the connector's connection."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, query: str, params: Mapping[str, Any]) -> int:
        return self._conn.execute(QUERIES[query], params).rowcount

    def insert(self, query: str, params: Mapping[str, Any]) -> int | None:
        cursor = self._conn.execute(QUERIES[query], params)
        return cursor.lastrowid if cursor.rowcount == 1 else None

    def insert_values(self, query: str, values: Sequence[Any]) -> None:
        self._conn.execute(POSITIONAL[query], values)

    def one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        row: Row | None = self._conn.execute(QUERIES[query], params).fetchone()
        return row

    def rows(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        return list(self._conn.execute(QUERIES[query], params).fetchall())

    # in-process statements: a batch's runs of one query cost no round trip, so they loop

    def execute_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[int]:
        return [self.execute(query, p) for p in params]

    def insert_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[int | None]:
        return [self.insert(query, p) for p in params]

    def insert_numbered_each(
        self, query: str, params: Sequence[Mapping[str, Any]], number: str, column: str
    ) -> list[tuple[int, Any] | None]:
        out: list[tuple[int, Any] | None] = []
        for p in params:
            n = self.one(number, p)["n"]  # type: ignore[index]
            new_id = self.insert(query, {**p, column: n})
            out.append(None if new_id is None else (new_id, n))
        return out

    def one_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        return [self.one(query, p) for p in params]

    def changed_each(
        self, query: str, params: Sequence[Mapping[str, Any]], read: str, *, key: str = "id"
    ) -> list[Row | None]:
        # an update, then a read of its row if it changed one (no RETURNING: see sql/queries.sql)
        return [self.one(read, {"id": p[key]}) if self.execute(query, p) == 1 else None for p in params]


class _PositionalQueries(dict[str, str]):
    """The queries in positional form, made on first use of each."""

    def __missing__(self, name: str) -> str:
        sql = self[name] = positional(QUERIES[name])
        return sql


POSITIONAL = _PositionalQueries()


class _Transaction:
    """``with connector.transaction() as tx``: one store call's writes, atomically.

    Alone: ``BEGIN IMMEDIATE`` … ``COMMIT``. Inside :meth:`SQLiteConnector.group`: a
    savepoint, so a failing call rolls back only itself. Every SQLite failure becomes a
    :class:`StoreError`. (A class, not a generator: this runs for every write.)
    """

    __slots__ = ("_c", "_grouped")

    def __init__(self, connector: SQLiteConnector) -> None:
        self._c = connector
        self._grouped = False

    def __enter__(self) -> _Tx:
        c = self._c
        c.lock.acquire()
        try:
            self._grouped = c._grouped
            if not self._grouped:
                c._begin()
            elif c._group_lost is not None:
                raise StoreError(f"{c.path}: the batch's transaction was rolled back: {c._group_lost}")
            elif c._isolated:
                c.conn.execute("SAVEPOINT bw_call")
            elif not c.conn.in_transaction:  # SQLite dropped the group's transaction: never autocommit
                raise StoreError(f"{c.path}: the batch's transaction was rolled back")
        except sqlite3.Error as exc:
            c.lock.release()
            raise StoreError(f"{c.path}: write failed: {exc}") from exc
        except BaseException:
            c.lock.release()
            raise
        return c._tx

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        c = self._c
        conn = c.conn
        try:
            if not self._grouped:
                if exc is None:
                    c._commit()
                    return
                c._rollback()
            elif not c._isolated:  # a bare call in a group: its failure spoils the whole group
                if exc is not None:
                    c._group_lost = GroupSpoiled(f"{c.path}: a call of the batch failed: {exc!r}")
                return
            elif exc is None:
                conn.execute("RELEASE bw_call")
                return
            elif conn.in_transaction:
                conn.execute("ROLLBACK TO bw_call")
                conn.execute("RELEASE bw_call")
            else:  # SQLite rolled back the group's whole transaction (disk full, I/O error)
                c._group_lost = exc
        except sqlite3.Error as failure:
            if self._grouped:
                c._group_lost = failure
            raise StoreError(f"{c.path}: write failed: {failure}") from failure
        finally:
            c.lock.release()
        if isinstance(exc, sqlite3.Error):  # e.g. disk full, read-only file: a store failure, not a bug
            raise StoreError(f"{c.path}: write failed: {exc}") from exc


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


class SQLiteStore(SQLStore):
    """The shared store over a :class:`SQLiteConnector`: ``SQLiteStore(path)``.

    ``create=False`` refuses to create a missing database (read-only commands such as ``show``).
    """

    connector: SQLiteConnector

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float | None = None, create: bool = True) -> None:
        super().__init__(SQLiteConnector(path, busy_timeout=busy_timeout, create=create))
        self.path = self.connector.path

    @property
    def busy_timeout(self) -> float:
        """Seconds a write waits for another process's write lock."""
        return self.connector.busy_timeout
