"""SQLite's backup, restore, check and migration (see :mod:`browserworker.ops._backup`).

- The backup uses SQLite's backup API: all pages in one step, one read transaction, one
  snapshot while writers go on (WAL); the copy is integrity-checked and is one
  self-contained file.
- The restore takes an exclusive lock on the database (any process with it open — a worker,
  a ``run``, a metrics server — holds a shared lock in WAL mode, so the lock is refused),
  and under that lock checks the registry and the leases; it keeps the replaced database as
  ``DB.pre-restore-<time>``.
"""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

from ..errors import DatabaseInUse, StoreError, UsageError
from ..store.shared import SQLStore
from ..store.sqlite import SCHEMA_VERSION, SQLiteConnector, SQLiteStore
from ..store.sqlite import files as sqlite_files
from ..store.url import sqlite_path
from ._backup_common import BackupReport, DbCheck, RestoreReport, in_use_reasons, write_new

__all__ = ["DIALECT", "SCHEMA_VERSION", "backup", "check_db", "restore", "version_before"]

DIALECT = "sqlite"
# the schema versions that brought the runs and the workers tables
_RUNS_SINCE, _WORKERS_SINCE = 1, 2
_PG_DUMP = b"PGDMP"  # how a pg_dump --format=custom file begins


def backup(db: str, dest: Path, schema: str | None = None) -> BackupReport:
    """Copy the database at ``db`` to ``dest`` (which must not exist), online and consistently."""
    src_path = sqlite_path(db)
    if not src_path.is_file():
        raise UsageError(f"no database at {src_path}")
    started = time.monotonic()
    facts: list[sqlite_files.FileFacts] = []

    def write(tmp: Path) -> None:
        with closing(sqlite_files.open_file(src_path)) as source:
            source.backup(str(tmp))  # all pages in one step: one read transaction, one snapshot
        facts.append(sqlite_files.inspect(tmp))
        if facts[0].integrity != "ok":
            raise StoreError(f"the copy of {src_path} failed its integrity check: {facts[0].integrity}")

    write_new(dest, write)
    copy = facts[0]
    return BackupReport(
        source=str(src_path),
        dest=str(dest),
        bytes=dest.stat().st_size,
        seconds=round(time.monotonic() - started, 3),
        schema_version=copy.schema_version,
        runs=copy.runs,
        integrity=copy.integrity,
    )


def restore(src_path: Path, db: str, schema: str | None, stale_after: float) -> RestoreReport:
    """Replace the database at ``db`` with the backup ``src_path``; refuse while ``db`` is in use."""
    db_path = sqlite_path(db)
    if not src_path.is_file():
        raise UsageError(f"no backup at {src_path}")
    if db_path.exists() and src_path.resolve() == db_path.resolve():
        raise UsageError("the backup and the database are the same file")
    with open(src_path, "rb") as fh:
        if fh.read(len(_PG_DUMP)) == _PG_DUMP:
            raise UsageError(f"{src_path} is a backup of a PostgreSQL store: restore it with --db postgresql://...")
    try:
        source = sqlite_files.inspect(src_path)
    except sqlite_files.Unreadable as exc:
        raise UsageError(f"{src_path} is not a browserworker database: {exc}") from None
    if not {"runs", "attempts", "events"} <= source.tables or source.schema_version < 1:
        raise UsageError(f"{src_path} is not a browserworker database (no journal tables)")
    if source.integrity != "ok":
        raise UsageError(f"{src_path} failed its integrity check: {source.integrity}")
    if source.schema_version > SCHEMA_VERSION:
        raise UsageError(
            f"{src_path} has schema version {source.schema_version}, newer than this browserworker "
            f"({SCHEMA_VERSION}); upgrade browserworker"
        )
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
        raise DatabaseInUse(
            f"{db_path} is in use: another process has it open ({exc}); stop the workers, "
            "runs and metrics servers using it first"
        ) from None
    store = SQLiteStore(db_path)  # migrates a backup from an older browserworker
    try:
        version = store.schema_version
    finally:
        store.close()
    return RestoreReport(
        source=str(src_path),
        db=str(db_path),
        previous=None if previous is None else str(previous),
        schema_version=version,
        runs=runs,
        requeued=fence.requeued,
        flagged=fence.flagged,
        backup_last_event_at=fence.last_event_at,
    )


def _keep_previous(target: SQLiteConnector, db_path: Path, stale_after: float) -> Path:
    """Refuse (:class:`DatabaseInUse`) if the held database is in use; else copy it to
    ``DB.pre-restore-<time>`` and say where."""
    version = target.schema_version
    reasons = in_use_reasons(
        SQLStore(target), stale_after=stale_after, workers=version >= _WORKERS_SINCE, leases=version >= _RUNS_SINCE
    )
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


def check_db(db: str, schema: str | None = None) -> DbCheck:
    """Integrity, schema version and journal mode of the database at ``db`` (read-only)."""
    path = sqlite_path(db)
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
        notes.append(
            f"schema version {version} is older than this browserworker ({SCHEMA_VERSION}); "
            "opening it with any command migrates it"
        )
    if fk:
        problems.append(f"{fk} rows violate foreign keys")
    return DbCheck(str(path), integrity, version, SCHEMA_VERSION, facts.journal_mode, fk, facts.runs, problems, notes)


def version_before(db: str, schema: str | None = None) -> int | None:
    """The schema version of the database at ``db`` as it is (None: there is none)."""
    path = sqlite_path(db)
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        return sqlite_files.inspect(path).schema_version
    except sqlite_files.Unreadable as exc:
        raise UsageError(f"{path} is not a browserworker database: {exc}") from None
