"""PostgreSQL's schema: the numbered migrations of ``sql/postgres/`` and applying them.

A store's schema (``browserworker`` unless named otherwise) holds its own
``schema_migrations`` table. Migrations run on a connection of their own, in one
transaction under an advisory lock of the schema's name, so hosts that start together
migrate it once and none sees it half made.
"""

from __future__ import annotations

from typing import Any

from ...errors import StoreError
from ..connector import numbered_migrations
from ._queries import DB_NOW

__all__ = [
    "SCHEMA_VERSION",
    "exists",
    "lock_name",
    "migrate",
    "migrations",
    "missing",
    "require_schema",
    "schema_version",
]

_FOLDER = "postgres"


def migrations() -> list[tuple[int, str]]:
    """``[(version, sql)]`` from the numbered ``NNNN_*.sql`` files, in order."""
    return numbered_migrations(_FOLDER)


SCHEMA_VERSION = max(v for v, _ in migrations())


def schema_version(conn: Any) -> int:
    """The version the schema of ``conn``'s search path is at (0: none applied)."""
    row = conn.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations").fetchone()
    return int(row["v"])


def lock_name(schema: str) -> str:
    """The advisory lock (``hashtext`` of this) that migrations of ``schema`` run under; a
    restore holds it for as long as the schema is being replaced."""
    return f"browserworker:{schema}"


def exists(conn: Any, schema: str) -> bool:
    """Whether ``schema`` exists in ``conn``'s database."""
    return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def missing(location: str) -> StoreError:
    """The error of a store that is not there (read-only commands create nothing)."""
    return StoreError(
        f"no browserworker store in {location} (nothing has run here yet; use --db / --db-schema to "
        "point at one, or `browserworker migrate` to create it)"
    )


def require_schema(conn: Any, schema: str, location: str) -> None:
    """:func:`missing` unless ``schema`` exists."""
    if not exists(conn, schema):
        raise missing(location)


def migrate(conn: Any, schema: str, *, create: bool, location: str) -> None:
    """Create ``schema`` (unless ``create`` is False: then it must exist) and apply the
    migrations it lacks; :class:`StoreError` for a schema newer than this browserworker."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock_name(schema),))
        if not create:
            require_schema(conn, schema, location)
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
            "applied_at DOUBLE PRECISION NOT NULL)"
        )
        current = schema_version(conn)
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"{location} has schema version {current}, newer than this browserworker "
                f"({SCHEMA_VERSION}); upgrade browserworker"
            )
        for version, sql in migrations():
            if version > current:
                conn.execute(sql)
                conn.execute(f"INSERT INTO schema_migrations VALUES (%s, {DB_NOW})", (version,))
