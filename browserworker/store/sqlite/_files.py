"""The SQLite dialect's whole-file operations, for :mod:`browserworker.ops._backup`: opening a
database file as it is (no migration), looking at one, holding one exclusively, and
copying one into another with SQLite's online backup API.

These work on files that may be old, damaged or not browserworker databases at all, so
they never migrate anything; :class:`FileFacts` says what a file is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import StoreError
from ._store import SQLiteConnector

__all__ = [
    "FileFacts",
    "Locked",
    "Unreadable",
    "checkpoint",
    "exclusive",
    "facts_of",
    "inspect",
    "open_file",
    "replace",
]


class Unreadable(StoreError):
    """The file is not a SQLite database, or cannot be read."""


class Locked(StoreError):
    """Another process has the database open: it cannot be held exclusively."""


@dataclass(frozen=True)
class FileFacts:
    """What a database file is: its integrity, schema version, journal mode and tables."""

    integrity: str
    schema_version: int
    journal_mode: str
    foreign_key_errors: int
    tables: frozenset[str]
    runs: dict[str, int] = field(default_factory=dict)  # runs by state


def _connect(path: Path, *, timeout: float = 5.0, readonly: bool = False) -> sqlite3.Connection:
    try:
        if readonly:
            conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        else:
            conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open database {path}: {exc}") from exc
    return conn


def open_file(path: str | Path, *, readonly: bool = False) -> SQLiteConnector:
    """A connector over the file at ``path`` as it is: no PRAGMAs, no migrations."""
    return SQLiteConnector.over(_connect(Path(path), readonly=readonly), path)


def _facts(conn: sqlite3.Connection) -> FileFacts:
    tables = frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    runs = (
        {}
        if "runs" not in tables
        else {r[0]: r[1] for r in conn.execute("SELECT state, COUNT(*) FROM runs GROUP BY state ORDER BY state")}
    )
    return FileFacts(
        integrity="; ".join(str(r[0]) for r in conn.execute("PRAGMA integrity_check")),
        schema_version=int(conn.execute("PRAGMA user_version").fetchone()[0]),
        journal_mode=str(conn.execute("PRAGMA journal_mode").fetchone()[0]),
        foreign_key_errors=len(conn.execute("PRAGMA foreign_key_check").fetchall()),
        tables=tables,
        runs=runs,
    )


def inspect(path: str | Path) -> FileFacts:
    """Look at the database file at ``path`` (read-only if it can be; a WAL database without
    its ``-shm`` is opened read-write); :class:`Unreadable` if it is not a database."""
    path = Path(path)
    try:
        try:
            conn = _connect(path, readonly=True)
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except (sqlite3.OperationalError, StoreError):  # e.g. WAL without its -shm on a read-only open
            conn = _connect(path)
        with closing(conn):
            return _facts(conn)
    except (sqlite3.DatabaseError, StoreError) as exc:
        raise Unreadable(str(exc)) from None


def facts_of(connector: SQLiteConnector) -> FileFacts:
    """:func:`inspect` of a database already open (e.g. held by :func:`exclusive`)."""
    with connector.lock:
        return _facts(connector.conn)


@contextmanager
def exclusive(path: str | Path) -> Iterator[SQLiteConnector]:
    """Hold an exclusive lock on ``path`` (created if missing) while in the block; a connector
    over the locked file (nothing else can open it meanwhile). :class:`Locked` if another
    process has it open (in WAL mode every open connection holds a shared lock)."""
    conn = _connect(Path(path), timeout=1.0)
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        try:
            conn.execute("BEGIN EXCLUSIVE")  # the lock stays with us until the connection closes
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise Locked(str(exc)) from None
        yield SQLiteConnector.over(conn, path)
    finally:
        conn.close()


def replace(target: SQLiteConnector, source: str | Path) -> None:
    """Overwrite the database of ``target`` with the file ``source`` (the backup API), then
    switch it to WAL."""
    with closing(_connect(Path(source), readonly=True)) as src, target.lock:
        try:
            src.backup(target.conn)
        except sqlite3.Error as exc:
            raise StoreError(f"restore into {target.path} failed: {exc}") from exc
        target.conn.execute("PRAGMA journal_mode = WAL")


def checkpoint(connector: SQLiteConnector) -> None:
    """Fold the WAL into the database file and truncate it."""
    with connector.lock:
        connector.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
