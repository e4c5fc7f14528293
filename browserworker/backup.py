"""Backup, restore, integrity checks and migrations of a store, on either dialect.

- :func:`backup` takes a consistent online copy while workers keep writing: one snapshot,
  so runs, journal, outbox and events agree with each other. SQLite: the backup API into a
  single file; PostgreSQL: ``pg_dump --format=custom`` of the store's schema.
- :func:`restore` replaces the store with a backup, and refuses while the store is in use:
  something has it open (SQLite: its lock; PostgreSQL: a session of the store), the worker
  registry shows a worker that heartbeated recently and is not provably dead (e.g. on
  another host), or a lease is unexpired and its owner not provably dead
  (:func:`in_use_reasons`). The replaced store is kept (SQLite: ``DB.pre-restore-<time>``;
  PostgreSQL: the schema renamed ``<schema>_before_restore_<time>``).
- A restored store is older than the world: work done after the backup was taken is not in
  its journal. So the restore hands every leased run back to the queue (its owner is gone;
  the lease epoch is bumped to fence it off), flags every unfinished run for reconciliation
  and records a ``restored`` event on it. The executor then treats each effect of such a
  run that has no post-restore decision as possibly dispatched: verifier (after the settle
  time), idempotent replay, or a person — never a blind replay.
- :func:`check_db` reports integrity and the schema version, read-only.
- :func:`migrate` creates the store if needed and applies the migrations it lacks.

The work of each dialect is in :mod:`.backup_sqlite` and :mod:`.backup_postgres`;
:func:`_dialect` is the one place that picks it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import UsageError
from .leases import gone_here
from .metrics import DEFAULT_STALE_AFTER
from .store.base import Store
from .store.url import is_postgres, open_store

__all__ = ["BackupReport", "DatabaseInUse", "DbCheck", "MigrateReport", "RestoreReport", "backup", "check_db",
           "in_use_reasons", "migrate", "restore"]

Target = str | os.PathLike[str]


class DatabaseInUse(UsageError):
    """Restore refused: something is (or may be) using the database."""


@dataclass(frozen=True)
class BackupReport:
    source: str
    dest: str
    bytes: int
    seconds: float
    schema_version: int
    runs: dict[str, int]
    integrity: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RestoreReport:
    source: str
    db: str
    previous: str | None          # where the replaced store was kept (a file; a schema)
    schema_version: int
    runs: dict[str, int]
    requeued: list[str]           # leased runs handed back to the queue
    flagged: int                  # unfinished runs that will be reconciled before any dispatch
    backup_last_event_at: float | None
    dialect: str = "sqlite"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DbCheck:
    path: str
    integrity: str
    schema_version: int
    supported_version: int
    journal_mode: str
    foreign_key_errors: int
    runs: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dialect: str = "sqlite"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class MigrateReport:
    store: str
    dialect: str
    before: int                   # the schema version found (0: there was no store)
    after: int
    supported: int                # this browserworker's version for the dialect
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dialect(db: str) -> ModuleType:
    """The maintenance module of the dialect that serves ``db`` (the one dispatch)."""
    if is_postgres(db):
        from . import backup_postgres as module
    else:
        from . import backup_sqlite as module
    return module


def backup(db: Target, dest: Target, *, schema: str | None = None) -> BackupReport:
    """Copy the store at ``db`` (in ``schema``: PostgreSQL) to ``dest``, which must not exist,
    online and consistently."""
    report: BackupReport = _dialect(os.fspath(db)).backup(os.fspath(db), Path(dest), schema)
    return report


def restore(src: Target, db: Target, *, schema: str | None = None,
            stale_after: float = DEFAULT_STALE_AFTER) -> RestoreReport:
    """Replace the store at ``db`` (in ``schema``: PostgreSQL) with the backup ``src``; refuse
    while the store is in use."""
    report: RestoreReport = _dialect(os.fspath(db)).restore(Path(src), os.fspath(db), schema, stale_after)
    return report


def check_db(db: Target, *, schema: str | None = None) -> DbCheck:
    """Integrity and schema version of the store at ``db`` (read-only: nothing is migrated)."""
    report: DbCheck = _dialect(os.fspath(db)).check_db(os.fspath(db), schema)
    return report


def migrate(db: Target, *, schema: str | None = None) -> MigrateReport:
    """Create the store at ``db`` (in ``schema``: PostgreSQL) if it is not there, and apply the
    migrations it lacks; safe to run again (and from many hosts at once)."""
    dialect = _dialect(os.fspath(db))
    before: int | None = dialect.version_before(os.fspath(db), schema)
    store = open_store(db, schema=schema)
    try:
        after, location = store.schema_version, store.location
    finally:
        store.close()
    return MigrateReport(store=location, dialect=dialect.DIALECT, before=before or 0, after=after,
                         supported=dialect.SCHEMA_VERSION, created=before is None)


def in_use_reasons(store: Store, *, now: float | None = None, stale_after: float = DEFAULT_STALE_AFTER,
                   host: str | None = None, workers: bool = True, leases: bool = True) -> list[str]:
    """Why the database behind ``store`` may be in use, per its worker registry (``workers``)
    and its leases (``leases``: False for a store too old to have the table)."""
    now = time.time() if now is None else now
    host = host or socket.gethostname()
    reasons = []
    for w in store.live_workers(now - stale_after) if workers else []:
        if w.host == host and gone_here(w.host, w.pid, w.pid_start):
            continue
        reasons.append(f"worker {w.id} (pid {w.pid} on {w.host}) heartbeated {now - w.last_heartbeat:.0f}s ago")
    for r in store.live_leases(now) if leases else []:
        if r.owner_host == host and gone_here(r.owner_host, r.owner_pid, r.owner_pid_start):
            continue
        reasons.append(f"run {r.id} is leased by {r.owner} (pid {r.owner_pid} on {r.owner_host}) "
                       f"for {r.lease_expires_at - now:.0f}s more")
    return reasons


def write_new(dest: Path, write: Callable[[Path], None]) -> None:
    """Write a new file ``dest`` (refused if it exists) by ``write(partial)`` into a partial
    file beside it, fsynced and renamed into place: ``dest`` is whole or absent."""
    if dest.exists():
        raise UsageError(f"{dest} exists; choose a new file (a backup never overwrites)")
    if not dest.parent.is_dir():
        raise UsageError(f"{dest.parent} is not a directory")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
        _fsync_dir(dest.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
