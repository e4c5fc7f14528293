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
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .canonical import canonical_json
from .errors import StoreError, UsageError
from .leases import process_is_gone
from .metrics import DEFAULT_STALE_AFTER
from .store.sqlite import SCHEMA_VERSION, SQLiteStore

__all__ = ["BackupReport", "DatabaseInUse", "DbCheck", "RestoreReport", "backup", "check_db", "in_use_reasons",
           "restore"]

Q = SQLiteStore.queries


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


def _connect(path: Path, *, timeout: float = 5.0, readonly: bool = False) -> sqlite3.Connection:
    try:
        if readonly:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout,
                                   isolation_level=None)
        else:
            conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open database {path}: {exc}") from exc
    conn.row_factory = sqlite3.Row
    return conn


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _run_counts(conn: sqlite3.Connection) -> dict[str, int]:
    if "runs" not in _tables(conn):
        return {}
    return {r["state"]: r["n"] for r in conn.execute("SELECT state, COUNT(*) AS n FROM runs GROUP BY state "
                                                      "ORDER BY state")}


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
        with closing(_connect(src_path)) as src, closing(_connect(tmp)) as copy:
            try:
                src.backup(copy)  # all pages in one step: one read transaction, one snapshot
            except sqlite3.Error as exc:
                raise StoreError(f"backup of {src_path} failed: {exc}") from exc
            copy.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
            integrity = str(copy.execute("PRAGMA integrity_check").fetchone()[0])
            if integrity != "ok":
                raise StoreError(f"the copy of {src_path} failed its integrity check: {integrity}")
            version = int(copy.execute("PRAGMA user_version").fetchone()[0])
            runs = _run_counts(copy)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest_path)
        _fsync_dir(dest_path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return BackupReport(source=str(src_path), dest=str(dest_path), bytes=dest_path.stat().st_size,
                        seconds=round(time.monotonic() - started, 3), schema_version=version, runs=runs,
                        integrity=integrity)


def in_use_reasons(conn: sqlite3.Connection, *, now: float | None = None,
                   stale_after: float = DEFAULT_STALE_AFTER, host: str | None = None) -> list[str]:
    """Why the database behind ``conn`` may be in use, per its worker registry and leases."""
    now = time.time() if now is None else now
    host = host or socket.gethostname()
    tables = _tables(conn)
    reasons = []
    if "workers" in tables:
        for w in conn.execute(Q["ops_live_workers"], {"since": now - stale_after}):
            if w["host"] == host and process_is_gone(w["pid"]):
                continue
            reasons.append(f"worker {w['id']} (pid {w['pid']} on {w['host']}) heartbeated "
                           f"{now - w['last_heartbeat']:.0f}s ago")
    if "runs" in tables:
        for r in conn.execute(Q["ops_live_leases"], {"now": now}):
            if r["owner_host"] == host and r["owner_pid"] is not None and \
                    process_is_gone(r["owner_pid"], r["owner_pid_start"]):
                continue
            reasons.append(f"run {r['id']} is leased by {r['owner']} (pid {r['owner_pid']} on {r['owner_host']}) "
                           f"for {r['lease_expires_at'] - now:.0f}s more")
    return reasons


@contextmanager
def _exclusive(path: Path) -> Iterator[sqlite3.Connection]:
    """Hold an exclusive lock on ``path`` (created if missing), or raise :class:`DatabaseInUse`."""
    conn = _connect(path, timeout=1.0)
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        try:
            conn.execute("BEGIN EXCLUSIVE")  # the lock stays with us until the connection closes
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise DatabaseInUse(f"{path} is in use: another process has it open ({exc}); stop the workers, "
                                "runs and metrics servers using it first") from None
        yield conn
    finally:
        conn.close()


def restore(src: str | os.PathLike[str], db: str | os.PathLike[str], *,
            stale_after: float = DEFAULT_STALE_AFTER) -> RestoreReport:
    """Replace the database at ``db`` with the backup ``src``; refuse while ``db`` is in use."""
    src_path, db_path = Path(src), Path(db)
    if not src_path.is_file():
        raise UsageError(f"no backup at {src_path}")
    if db_path.exists() and src_path.resolve() == db_path.resolve():
        raise UsageError("the backup and the database are the same file")
    with closing(_connect(src_path, readonly=True)) as source:
        try:
            integrity = str(source.execute("PRAGMA integrity_check").fetchone()[0])
            version = int(source.execute("PRAGMA user_version").fetchone()[0])
            tables = _tables(source)
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"{src_path} is not a browserworker database: {exc}") from None
        if not {"runs", "attempts", "events"} <= tables or version < 1:
            raise UsageError(f"{src_path} is not a browserworker database (no journal tables)")
        if integrity != "ok":
            raise UsageError(f"{src_path} failed its integrity check: {integrity}")
        if version > SCHEMA_VERSION:
            raise UsageError(f"{src_path} has schema version {version}, newer than this browserworker "
                             f"({SCHEMA_VERSION}); upgrade browserworker")
        existed = db_path.exists() and db_path.stat().st_size > 0
        db_path.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive(db_path) as target:
            previous = None
            if existed:
                reasons = in_use_reasons(target, stale_after=stale_after)
                if reasons:
                    raise DatabaseInUse(f"{db_path} is in use: " + "; ".join(reasons))
                stamp = time.strftime("%Y%m%d-%H%M%S")
                previous = db_path.with_name(f"{db_path.name}.pre-restore-{stamp}")
                n = 1
                while previous.exists():
                    n += 1
                    previous = db_path.with_name(f"{db_path.name}.pre-restore-{stamp}-{n}")
                with closing(_connect(previous)) as keep:
                    target.backup(keep)
                    keep.execute("PRAGMA journal_mode = DELETE")
            try:
                source.backup(target)
            except sqlite3.Error as exc:
                raise StoreError(f"restore into {db_path} failed: {exc}") from exc
            target.execute("PRAGMA journal_mode = WAL")
            requeued, flagged, last_event = _fence(target)
            target.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            runs = _run_counts(target)
    store = SQLiteStore(db_path)  # migrates a backup from an older browserworker
    try:
        schema = store.schema_version
    finally:
        store.close()
    return RestoreReport(source=str(src_path), db=str(db_path), previous=None if previous is None else str(previous),
                         schema_version=schema, runs=runs, requeued=requeued, flagged=flagged,
                         backup_last_event_at=last_event)


def _fence(conn: sqlite3.Connection) -> tuple[list[str], int, float | None]:
    """Make a freshly restored journal safe to resume (see the module docstring)."""
    now = time.time()
    last = conn.execute(Q["ops_last_event"]).fetchone()
    last_event = None if last is None else float(last["at"])
    requeued = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        unfinished = list(conn.execute(Q["ops_unfinished_runs"]))
        for run in unfinished:
            moved = conn.execute(Q["ops_restore_requeue"], {"id": run["id"], "now": now}).rowcount == 1
            if not moved:
                conn.execute(Q["ops_restore_flag"], {"id": run["id"], "now": now})
            else:
                requeued.append(run["id"])
            conn.execute(Q["insert_event"], (  # at, run_id, step_id, attempt_no, worker, epoch, kind, ...
                now, run["id"], None, None, None, run["lease_epoch"] + 1 if moved else run["lease_epoch"],
                "restored", run["state"], "QUEUED" if moved else run["state"], "restored_from_backup",
                canonical_json({"previous_owner": run["owner"], "backup_last_event_at": last_event,
                                "restored_at": now})))
        if "workers" in _tables(conn):
            conn.execute(Q["ops_restore_stop_workers"], {"now": now})
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return requeued, len(unfinished), last_event


def check_db(db: str | os.PathLike[str]) -> DbCheck:
    """Integrity, schema version and journal mode of the database at ``db`` (read-only)."""
    path = Path(db)
    if not path.is_file():
        raise UsageError(f"no database at {path}")
    try:
        try:
            conn = _connect(path, readonly=True)
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except (sqlite3.OperationalError, StoreError):  # e.g. WAL without its -shm on a read-only open
            conn = _connect(path)
        with closing(conn):
            integrity = "; ".join(str(r[0]) for r in conn.execute("PRAGMA integrity_check"))
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
            fk = len(conn.execute("PRAGMA foreign_key_check").fetchall())
            runs = _run_counts(conn)
            tables = _tables(conn)
    except (sqlite3.DatabaseError, StoreError) as exc:
        return DbCheck(str(path), f"unreadable: {exc}", 0, SCHEMA_VERSION, "?", 0, {}, [f"unreadable: {exc}"])
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
    return DbCheck(str(path), integrity, version, SCHEMA_VERSION, mode, fk, runs, problems, notes)
