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
from pathlib import Path
from types import ModuleType

from ..errors import DatabaseInUse
from ..store.url import is_postgres, open_store
from ._backup_common import BackupReport, DbCheck, MigrateReport, RestoreReport, in_use_reasons
from ._metrics import DEFAULT_STALE_AFTER

__all__ = [
    "BackupReport",
    "DatabaseInUse",
    "DbCheck",
    "MigrateReport",
    "RestoreReport",
    "backup",
    "check_db",
    "in_use_reasons",
    "migrate",
    "restore",
]

Target = str | os.PathLike[str]


def _dialect(db: str) -> ModuleType:
    """The maintenance module of the dialect that serves ``db`` (the one dispatch)."""
    if is_postgres(db):
        from . import _backup_postgres

        return _backup_postgres
    from . import _backup_sqlite

    return _backup_sqlite


def backup(db: Target, dest: Target, *, schema: str | None = None) -> BackupReport:
    """Copy the store at ``db`` (in ``schema``: PostgreSQL) to ``dest``, which must not exist,
    online and consistently."""
    report: BackupReport = _dialect(os.fspath(db)).backup(os.fspath(db), Path(dest), schema)
    return report


def restore(
    src: Target, db: Target, *, schema: str | None = None, stale_after: float = DEFAULT_STALE_AFTER
) -> RestoreReport:
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
    return MigrateReport(
        store=location,
        dialect=dialect.DIALECT,
        before=before or 0,
        after=after,
        supported=dialect.SCHEMA_VERSION,
        created=before is None,
    )
