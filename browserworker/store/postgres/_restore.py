"""PostgreSQL's side of a restore: what a backup file holds (``pg_restore --list``), who is
connected to a store, the schema's lock, setting the current schema aside (``ALTER SCHEMA
... RENAME``) and loading a backup (``pg_restore``, in one transaction).

A backup (``pg_dump --format=custom --schema=S``) recreates schema ``S`` itself, so a
restore sets the current ``S`` aside under a new name first, and puts it back if the load
fails: the store's previous state is never dropped.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import StoreError
from ._check import tool
from ._conninfo import application_name
from ._schema import exists, lock_name

__all__ = ["DumpFacts", "NotADump", "drop", "holding", "load", "read_dump", "rename", "set_aside", "store_sessions"]

_ENTRY = re.compile(r"^\d+; \d+ \d+ (SCHEMA|TABLE DATA|TABLE) (\S+) (\S+) ")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_CLOSING = 2.0  # seconds a session that is closing (its client just disconnected) may take to go


class NotADump(StoreError):
    """The file is not a custom-format ``pg_dump`` (``pg_restore`` cannot read it)."""


@dataclass(frozen=True)
class DumpFacts:
    """What a backup file holds: the schema it recreates, that schema's tables, and its
    version (the highest row of its ``schema_migrations``)."""

    schema: str | None
    tables: frozenset[str]
    schema_version: int


def _pg_restore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("pg_restore", "restore of a PostgreSQL store"), *args], capture_output=True, text=True)


def read_dump(path: str | Path) -> DumpFacts:
    """:class:`DumpFacts` of the backup at ``path``; :class:`NotADump` if it is not one."""
    with open(path, "rb") as fh:
        head = fh.read(len(_SQLITE_MAGIC))
    if head == _SQLITE_MAGIC:
        raise NotADump("it is a SQLite database (restore it with --db PATH)")
    listed = _pg_restore("--list", str(path))
    if listed.returncode != 0:
        raise NotADump(listed.stderr.strip().removeprefix("pg_restore: error: "))
    schemas, tables = [], set()
    for line in listed.stdout.splitlines():
        match = _ENTRY.match(line)
        if match and match.group(1) == "SCHEMA":
            schemas.append(match.group(3))
        elif match and match.group(1) == "TABLE":
            tables.add(match.group(3))
    version = 0
    if "schema_migrations" in tables:
        data = _pg_restore("--data-only", "--table=schema_migrations", "--file=-", str(path))
        rows = [ln.split("\t", 1)[0] for ln in data.stdout.splitlines() if re.match(r"^\d+\t", ln)]
        version = max((int(v) for v in rows), default=0)
    return DumpFacts(schemas[0] if len(schemas) == 1 else None, frozenset(tables), version)


def store_sessions(conn: Any, schema: str) -> list[str]:
    """The other sessions of the store in ``schema`` connected to ``conn``'s database (a
    worker, a ``run``, a metrics server: their ``application_name``). A session whose
    client just disconnected is given a moment to go."""
    deadline = time.monotonic() + _CLOSING
    while True:
        rows = conn.execute(
            "SELECT pid, client_addr, backend_start FROM pg_stat_activity WHERE datname = "
            "current_database() AND application_name = %s AND pid <> pg_backend_pid() ORDER BY pid",
            (application_name(schema),),
        ).fetchall()
        if not rows or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return [
        f"session {r['pid']} from {r['client_addr'] or 'a local socket'} (connected "
        f"{r['backend_start']:%Y-%m-%d %H:%M:%S})"
        for r in rows
    ]


@contextmanager
def holding(conn: Any, schema: str) -> Iterator[None]:
    """Hold the lock that migrations of ``schema`` take, on ``conn``, for the block: a store
    being opened meanwhile waits for the block's end (``conn`` itself may migrate: the lock is
    its own)."""
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock_name(schema),))
    try:
        yield
    finally:
        if not conn.closed and not conn.broken:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock_name(schema),))


def set_aside(conn: Any, schema: str, stamp: str) -> str:
    """Rename ``schema`` to ``<schema>_before_restore_<stamp>`` (a free name); the new name."""
    base = f"{schema[:29]}_before_restore_{stamp}"
    name, n = base, 1
    while exists(conn, name):
        n += 1
        name = f"{base}_{n}"
    rename(conn, schema, name)
    return name


def rename(conn: Any, old: str, new: str) -> None:
    conn.execute(f"ALTER SCHEMA {old} RENAME TO {new}")


def drop(conn: Any, schema: str) -> None:
    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def load(dsn: str, path: str | Path) -> None:
    """``pg_restore`` the backup at ``path`` into ``dsn``'s database, in one transaction (a
    failure leaves nothing of it); StoreError with what pg_restore said."""
    done = _pg_restore(f"--dbname={dsn}", "--single-transaction", "--exit-on-error", str(path))
    if done.returncode != 0:
        raise StoreError(f"pg_restore failed: {done.stderr.strip()}")
