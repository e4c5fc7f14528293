"""Backup, restore and integrity checks of the SQLite journal.

- :func:`backup` takes a consistent online copy with SQLite's backup API while workers
  keep writing: the copy is one read transaction's snapshot (WAL lets writers go on), so
  runs, journal, outbox and events agree with each other. It is written beside the
  destination, checked, and renamed into place; it is a single self-contained file.
- :func:`restore` replaces a database with a backup, and refuses while the database is in
  use: it takes an exclusive lock (any process with the database open — a worker, a
  ``run``, a metrics server — holds a shared lock in WAL mode, so the lock is refused), and
  under that lock it checks the worker registry (a worker that heartbeated recently and is
  not provably dead, e.g. on another host) and the leases (an unexpired lease whose owner
  is not provably dead). It keeps the replaced database as ``DB.pre-restore-<time>``.
- A restored database is older than the world: work done after the backup was taken is
  not in its journal. So the restore hands every leased run back to the queue (its owner
  is gone; the lease epoch is bumped to fence it off), flags every unfinished run for
  reconciliation and records a ``restored`` event on it. The executor then treats each
  effect of such a run that has no post-restore decision as possibly dispatched: verifier
  (after the settle time), idempotent replay, or a person — never a blind replay.
- :func:`check_db` reports integrity and the schema version.
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import StoreError, UsageError
from .leases import gone_here
from .metrics import DEFAULT_STALE_AFTER
from .store import sqlite_files
from .store.base import Store
from .store.shared import SQLStore
from .store.sqlite import SCHEMA_VERSION, SQLiteConnector, SQLiteStore

__all__ = ["BackupReport", "DatabaseInUse", "DbCheck", "RestoreReport", "backup", "check_db", "in_use_reasons",
           "restore"]

# the schema versions that brought the runs and the workers tables
_RUNS_SINCE, _WORKERS_SINCE = 1, 2


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
    previous: str | None          # where the replaced database was kept
    schema_version: int
    runs: dict[str, int]
    requeued: list[str]           # leased runs handed back to the queue
    flagged: int                  # unfinished runs that will be reconciled before any dispatch
    backup_last_event_at: float | None

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

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup(db: str | os.PathLike[str], dest: str | os.PathLike[str]) -> BackupReport:
    """Copy the database at ``db`` to ``dest`` (which must not exist), online and consistently."""
    src_path, dest_path = Path(db), Path(dest)
    if not src_path.is_file():
        raise UsageError(f"no database at {src_path}")
    if dest_path.exists():
        raise UsageError(f"{dest_path} exists; choose a new file (a backup never overwrites)")
    if not dest_path.parent.is_dir():
        raise UsageError(f"{dest_path.parent} is not a directory")
    tmp = dest_path.with_name(f".{dest_path.name}.{os.getpid()}.partial")
    started = time.monotonic()
    try:
        with closing(sqlite_files.open_file(src_path)) as source:
            source.backup(str(tmp))  # all pages in one step: one read transaction, one snapshot
        copy = sqlite_files.inspect(tmp)
        if copy.integrity != "ok":
            raise StoreError(f"the copy of {src_path} failed its integrity check: {copy.integrity}")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest_path)
        _fsync_dir(dest_path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return BackupReport(source=str(src_path), dest=str(dest_path), bytes=dest_path.stat().st_size,
                        seconds=round(time.monotonic() - started, 3), schema_version=copy.schema_version,
                        runs=copy.runs, integrity=copy.integrity)


def in_use_reasons(store: Store, *, now: float | None = None, stale_after: float = DEFAULT_STALE_AFTER,
                   host: str | None = None) -> list[str]:
    """Why the database behind ``store`` may be in use, per its worker registry and leases."""
    now = time.time() if now is None else now
    host = host or socket.gethostname()
    version = store.schema_version
    reasons = []
    for w in store.live_workers(now - stale_after) if version >= _WORKERS_SINCE else []:
        if w.host == host and gone_here(w.host, w.pid, w.pid_start):
            continue
        reasons.append(f"worker {w.id} (pid {w.pid} on {w.host}) heartbeated {now - w.last_heartbeat:.0f}s ago")
    for r in store.live_leases(now) if version >= _RUNS_SINCE else []:
        if r.owner_host == host and gone_here(r.owner_host, r.owner_pid, r.owner_pid_start):
            continue
        reasons.append(f"run {r.id} is leased by {r.owner} (pid {r.owner_pid} on {r.owner_host}) "
                       f"for {r.lease_expires_at - now:.0f}s more")
    return reasons


def restore(src: str | os.PathLike[str], db: str | os.PathLike[str], *,
            stale_after: float = DEFAULT_STALE_AFTER) -> RestoreReport:
    """Replace the database at ``db`` with the backup ``src``; refuse while ``db`` is in use."""
    src_path, db_path = Path(src), Path(db)
    if not src_path.is_file():
        raise UsageError(f"no backup at {src_path}")
    if db_path.exists() and src_path.resolve() == db_path.resolve():
        raise UsageError("the backup and the database are the same file")
    try:
        source = sqlite_files.inspect(src_path)
    except sqlite_files.Unreadable as exc:
        raise UsageError(f"{src_path} is not a browserworker database: {exc}") from None
    if not {"runs", "attempts", "events"} <= source.tables or source.schema_version < 1:
        raise UsageError(f"{src_path} is not a browserworker database (no journal tables)")
    if source.integrity != "ok":
        raise UsageError(f"{src_path} failed its integrity check: {source.integrity}")
    if source.schema_version > SCHEMA_VERSION:
        raise UsageError(f"{src_path} has schema version {source.schema_version}, newer than this browserworker "
                         f"({SCHEMA_VERSION}); upgrade browserworker")
    existed = db_path.exists() and db_path.stat().st_size > 0
    db_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with sqlite_files.exclusive(db_path) as target:
            previous = _keep_previous(target, db_path, stale_after) if existed else None
            sqlite_files.replace(target, src_path)
            # the reconciliation rules (module docstring), on the restored journal as it is
            fence = SQLStore(target).fence_restored(stop_workers=source.schema_version >= _WORKERS_SINCE)
            sqlite_files.checkpoint(target)
            runs = sqlite_files.facts_of(target).runs
    except sqlite_files.Locked as exc:
        raise DatabaseInUse(f"{db_path} is in use: another process has it open ({exc}); stop the workers, "
                            "runs and metrics servers using it first") from None
    store = SQLiteStore(db_path)  # migrates a backup from an older browserworker
    try:
        schema = store.schema_version
    finally:
        store.close()
    return RestoreReport(source=str(src_path), db=str(db_path), previous=None if previous is None else str(previous),
                         schema_version=schema, runs=runs, requeued=fence.requeued, flagged=fence.flagged,
                         backup_last_event_at=fence.last_event_at)


def _keep_previous(target: SQLiteConnector, db_path: Path, stale_after: float) -> Path:
    """Refuse (:class:`DatabaseInUse`) if the held database is in use; else copy it to
    ``DB.pre-restore-<time>`` and say where."""
    reasons = in_use_reasons(SQLStore(target), stale_after=stale_after)
    if reasons:
        raise DatabaseInUse(f"{db_path} is in use: " + "; ".join(reasons))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    previous = db_path.with_name(f"{db_path.name}.pre-restore-{stamp}")
    n = 1
    while previous.exists():
        n += 1
        previous = db_path.with_name(f"{db_path.name}.pre-restore-{stamp}-{n}")
    target.backup(str(previous))
    return previous


def check_db(db: str | os.PathLike[str]) -> DbCheck:
    """Integrity, schema version and journal mode of the database at ``db`` (read-only)."""
    path = Path(db)
    if not path.is_file():
        raise UsageError(f"no database at {path}")
    try:
        facts = sqlite_files.inspect(path)
    except sqlite_files.Unreadable as exc:
        return DbCheck(str(path), f"unreadable: {exc}", 0, SCHEMA_VERSION, "?", 0, {}, [f"unreadable: {exc}"])
    integrity, version, fk, tables = facts.integrity, facts.schema_version, facts.foreign_key_errors, facts.tables
    problems, notes = [], []
    if integrity != "ok":
        problems.append(f"integrity check failed: {integrity}")
    if not {"runs", "attempts", "events"} <= tables:
        problems.append("not a browserworker database (no journal tables)")
    if version > SCHEMA_VERSION:
        problems.append(f"schema version {version} is newer than this browserworker ({SCHEMA_VERSION})")
    elif version < SCHEMA_VERSION:
        notes.append(f"schema version {version} is older than this browserworker ({SCHEMA_VERSION}); "
                        "opening it with any command migrates it")
    if fk:
        problems.append(f"{fk} rows violate foreign keys")
    return DbCheck(str(path), integrity, version, SCHEMA_VERSION, facts.journal_mode, fk, facts.runs, problems, notes)
