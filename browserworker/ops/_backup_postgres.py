"""PostgreSQL's backup, restore, check and migration (see :mod:`browserworker.ops._backup`).

- The backup is ``pg_dump --format=custom --schema=S`` from a snapshot this process exports
  (``pg_export_snapshot``): the runs it reports are the dump's. The dump is read back
  (``pg_restore --list``) before it is renamed into place.
- The restore holds the schema's migration lock throughout (a worker starting meanwhile
  waits), refuses while any session of the store is connected (every browserworker process
  names its sessions ``browserworker:<schema>``) or the registry or leases say it is in use,
  renames the current schema to ``<schema>_before_restore_<time>``, loads the backup with
  ``pg_restore`` in one transaction (it recreates the schema), migrates it and fences it
  (:meth:`~browserworker.store.ops.OpsManager.fence_restored`) before the lock is released, so
  no worker ever sees it unfenced. If anything fails after the rename, what was loaded is
  dropped and the previous schema renamed back.
- The check reads the schema as it is: no migration.
"""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path
from typing import Any

from ..errors import DatabaseInUse, StoreError, UsageError
from ..store.postgres import (
    MAINTENANCE,
    SCHEMA_VERSION,
    NotADump,
    PostgresStore,
    SchemaFacts,
    connect,
    conninfo,
    drop,
    dump,
    exists,
    facts,
    holding,
    index_problems,
    load,
    migrate,
    read_dump,
    redact_url,
    rename,
    rule_problems,
    schema_name,
    set_aside,
    snapshot,
    store_sessions,
)
from ..store.records import RestoreFence
from ..store.url import postgres_url
from ._backup_common import BackupReport, DbCheck, RestoreReport, in_use_reasons, write_new

__all__ = ["DIALECT", "SCHEMA_VERSION", "backup", "check_db", "restore", "version_before"]

DIALECT = "postgresql"
_JOURNAL = frozenset({"runs", "attempts", "events"})


def _target(db: str, schema: str | None) -> tuple[str, str, str]:
    """The URL, the schema and the location (for messages, no password) of ``db``."""
    url, name = postgres_url(db), schema_name(schema)
    return url, name, f"{redact_url(url)} (schema {name})"


def _present(found: SchemaFacts, location: str) -> SchemaFacts:
    if not found.exists:
        raise UsageError(f"no browserworker store in {location}")
    return found


def backup(db: str, dest: Path, schema: str | None = None) -> BackupReport:
    """``pg_dump`` of the store's schema to ``dest`` (a new file), from one snapshot."""
    url, name, location = _target(db, schema)
    started = time.monotonic()
    seen: list[SchemaFacts] = []

    def write(tmp: Path) -> None:
        with closing(connect(url, name)) as conn, snapshot(conn) as snap:
            seen.append(_present(facts(conn, name), location))
            dump(conninfo(url, name, application=MAINTENANCE), name, str(tmp), snapshot_id=snap)
        try:
            copy = read_dump(tmp)
        except NotADump as exc:
            raise StoreError(f"the backup of {location} does not read back: {exc}") from None
        if copy.schema != name or not _JOURNAL <= copy.tables:
            raise StoreError(f"the backup of {location} does not hold the store's journal tables")

    write_new(dest, write)
    return BackupReport(
        source=location,
        dest=str(dest),
        bytes=dest.stat().st_size,
        seconds=round(time.monotonic() - started, 3),
        schema_version=seen[0].schema_version,
        runs=seen[0].runs,
        integrity="ok",
    )


def check_db(db: str, schema: str | None = None) -> DbCheck:
    """The schema version, the consistency rules and (with ``amcheck``) the indexes of the
    store, read-only."""
    url, name, location = _target(db, schema)
    notes: list[str] = []
    with closing(connect(url, name)) as conn:
        found = _present(facts(conn, name), location)
        problems = _version_problems(found, notes)
        broken = _rules(conn) if _JOURNAL <= found.tables else []
        corrupt, unchecked = index_problems(conn, name)
        if unchecked:
            notes.append(f"indexes not checked: {unchecked}")
    broken += corrupt
    return DbCheck(
        location,
        "; ".join(broken) or "ok",
        found.schema_version,
        SCHEMA_VERSION,
        "n/a",
        0,
        found.runs,
        broken + problems,
        notes,
        dialect=DIALECT,
    )


def _version_problems(found: SchemaFacts, notes: list[str]) -> list[str]:
    """What is wrong with the schema's tables or version (a version this browserworker
    migrates is a note)."""
    if not _JOURNAL <= found.tables:
        return ["not a browserworker store (no journal tables)"]
    if found.schema_version > SCHEMA_VERSION:
        return [f"schema version {found.schema_version} is newer than this browserworker ({SCHEMA_VERSION})"]
    if found.schema_version < SCHEMA_VERSION:
        notes.append(
            f"schema version {found.schema_version} is older than this browserworker ({SCHEMA_VERSION}); "
            "opening it with any command (or `browserworker migrate`) migrates it"
        )
    return []


def _rules(conn: Any) -> list[str]:
    import psycopg

    try:
        return rule_problems(conn)
    except psycopg.Error as exc:
        return [f"the consistency check failed: {str(exc).strip()}"]


def version_before(db: str, schema: str | None = None) -> int | None:
    """The schema version of the store as it is (None: there is no schema yet)."""
    url, name, _ = _target(db, schema)
    with closing(connect(url, name)) as conn:
        found = facts(conn, name)
    return found.schema_version if found.exists else None


def restore(src: Path, db: str, schema: str | None, stale_after: float) -> RestoreReport:
    """Replace the store's schema with the backup ``src``; refuse while the store is in use."""
    url, name, location = _target(db, schema)
    _check_backup(src, name)
    with closing(connect(url, name)) as conn, holding(conn, name):
        previous = _set_aside(conn, url, name, location, stale_after) if exists(conn, name) else None
        try:
            load(conninfo(url, name, application=MAINTENANCE), src)
            migrate(conn, name, create=False, location=location)  # a backup of an older browserworker
            fence = _fence(url, name)
            found = facts(conn, name)
        except BaseException:
            _put_back(conn, name, previous)
            raise
    return RestoreReport(
        source=str(src),
        db=location,
        previous=previous,
        schema_version=found.schema_version,
        runs=found.runs,
        requeued=fence.requeued,
        flagged=fence.flagged,
        backup_last_event_at=fence.last_event_at,
        dialect=DIALECT,
    )


def _check_backup(src: Path, schema: str) -> None:
    """Refuse (:class:`UsageError`) what is not a backup of a browserworker store's ``schema``
    that this browserworker can read."""
    if not src.is_file():
        raise UsageError(f"no backup at {src}")
    try:
        dumped = read_dump(src)
    except NotADump as exc:
        raise UsageError(f"{src} is not a backup of a PostgreSQL store (pg_dump --format=custom): {exc}") from None
    if dumped.schema is None or not _JOURNAL <= dumped.tables or dumped.schema_version < 1:
        raise UsageError(f"{src} is not a backup of a browserworker store (no journal tables)")
    if dumped.schema != schema:
        raise UsageError(
            f"{src} is a backup of the schema {dumped.schema} (pg_restore recreates the schema it was "
            f"taken from): restore it with --db-schema {dumped.schema}"
        )
    if dumped.schema_version > SCHEMA_VERSION:
        raise UsageError(
            f"{src} has schema version {dumped.schema_version}, newer than this browserworker "
            f"({SCHEMA_VERSION}); upgrade browserworker"
        )


def _set_aside(conn: Any, url: str, schema: str, location: str, stale_after: float) -> str:
    """Refuse (:class:`DatabaseInUse`) if the store is in use; else rename its schema aside
    and say to what."""
    sessions = store_sessions(conn, schema)
    if sessions:
        raise DatabaseInUse(
            f"{location} is in use: {len(sessions)} sessions of the store are connected "
            f"({'; '.join(sessions)}); stop the workers, runs and metrics servers using it first"
        )
    store = PostgresStore(url, schema=schema, migrating=False)
    try:
        reasons = in_use_reasons(store, now=store.now(), stale_after=stale_after)
    finally:
        store.close()
    if reasons:
        raise DatabaseInUse(f"{location} is in use: " + "; ".join(reasons))
    return set_aside(conn, schema, time.strftime("%Y%m%d_%H%M%S"))


def _fence(url: str, schema: str) -> RestoreFence:
    """The reconciliation rules on the restored journal (see :mod:`browserworker.ops._backup`)."""
    store = PostgresStore(url, schema=schema, migrating=False)
    try:
        return store.fence_restored(stop_workers=True)
    finally:
        store.close()


def _put_back(conn: Any, schema: str, previous: str | None) -> None:
    """Drop what was loaded of the backup (the file still holds it) and rename the previous
    schema back."""
    try:
        drop(conn, schema)
        if previous is not None:
            rename(conn, previous, schema)
    except Exception as exc:
        kept = (
            f"the previous store is kept as the schema {previous}: rename it back with ALTER SCHEMA {previous} "
            f"RENAME TO {schema}"
            if previous
            else "no store was there before"
        )
        raise StoreError(f"the restore failed, and so did undoing it ({exc}); {kept}") from exc
