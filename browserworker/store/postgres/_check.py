"""PostgreSQL maintenance: looking at one store's schema as it is (no migration), its integrity
check, and its backup (``pg_dump`` of the schema, from one snapshot).

These work on schemas that may be missing, old or broken, so they never migrate anything;
:class:`SchemaFacts` says what a schema is.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any

from ...errors import StoreError
from ._conninfo import connect_failed, conninfo, redact_url, schema_name
from ._schema import exists

__all__ = [
    "SchemaFacts",
    "amcheck_schema",
    "connect",
    "dump",
    "facts",
    "index_problems",
    "integrity_problems",
    "rule_problems",
    "schema_exists",
    "snapshot",
    "tool",
]

MAINTENANCE = "browserworker-maintenance"  # the application_name of these sessions (not the store's)

# what must hold in any consistent store (each query returns the rows that break it)
_RULES = {
    "runs LEASED or RUNNING without an owner or a lease expiry": "SELECT id FROM runs WHERE state IN ('LEASED', 'RUNNING') AND (owner IS NULL OR lease_expires_at IS NULL)",
    "runs in an unknown state": "SELECT id FROM runs WHERE state NOT IN ('QUEUED', 'LEASED', 'RUNNING', 'SUCCEEDED', 'FAILED', "
    "'CANCELLED', 'NEEDS_REVIEW')",
    "attempts dispatched before their intent": "SELECT id FROM attempts WHERE dispatched_at < intent_at - 1",
    "outbox rows of another run than their attempt's": "SELECT o.id FROM outbox o JOIN attempts a ON a.id = o.attempt_id WHERE a.run_id <> o.run_id",
}
_BTREES = (
    "SELECT c.oid::regclass::text AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am am ON am.oid = c.relam "
    "WHERE n.nspname = %s AND am.amname = 'btree'"
)


@dataclass(frozen=True)
class SchemaFacts:
    """What a store's schema is: there or not, its version, its tables, and its runs by state."""

    exists: bool
    schema_version: int = 0
    tables: frozenset[str] = frozenset()
    runs: dict[str, int] = field(default_factory=dict)


def connect(url: str, schema: str | None = None) -> Any:
    """A connection of its own to ``url``'s database (autocommit, rows by name, the search
    path on the store's schema), for maintenance: no statement or idle timeouts."""
    import psycopg
    from psycopg.rows import dict_row

    name = schema_name(schema)
    try:
        conn = psycopg.connect(conninfo(url, name, application=MAINTENANCE), autocommit=True, row_factory=dict_row)
    except psycopg.Error as exc:
        raise connect_failed(redact_url(url), exc) from exc
    conn.execute(f"SET search_path TO {name}")
    return conn


def schema_exists(url: str, schema: str | None = None) -> bool:
    """Whether the store's schema exists in ``url``'s database."""
    with closing(connect(url, schema)) as conn:
        return exists(conn, schema_name(schema))


def facts(conn: Any, schema: str) -> SchemaFacts:
    """:class:`SchemaFacts` of ``schema`` (the connection's search path) as it is now."""
    if not exists(conn, schema):
        return SchemaFacts(False)
    tables = {
        r["tablename"]
        for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
    }
    version = 0
    if "schema_migrations" in tables:
        version = int(conn.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations").fetchone()["v"])
    runs = (
        {}
        if "runs" not in tables
        else {
            r["state"]: int(r["n"])
            for r in conn.execute("SELECT state, COUNT(*) AS n FROM runs GROUP BY state ORDER BY state").fetchall()
        }
    )
    return SchemaFacts(True, version, frozenset(tables), runs)


def rule_problems(conn: Any) -> list[str]:
    """What breaks the consistency rules above (in the store's schema: the search path)."""
    problems: list[str] = []
    for what, sql in _RULES.items():
        rows = conn.execute(sql + " LIMIT 5").fetchall()
        if rows:
            problems.append(f"{what}: {', '.join(str(r['id']) for r in rows)}")
    return problems


def index_problems(conn: Any, schema: str) -> tuple[list[str], str | None]:
    """The B-tree indexes of ``schema`` that ``amcheck`` finds corrupt, and why they were not
    (all) checked (None: they were)."""
    import psycopg

    where = amcheck_schema(conn)
    if where is None:
        return [], "the amcheck extension is not installed in this database (CREATE EXTENSION amcheck)"
    problems: list[str] = []
    for row in conn.execute(_BTREES, (schema,)).fetchall():
        try:
            conn.execute(f"SELECT {where}.bt_index_check(%s::regclass)", (row["name"],))
        except psycopg.Error as exc:
            message = str(exc).strip().splitlines()[0]
            if not (exc.sqlstate or "").startswith("XX"):  # not corruption (XX001, XX002): e.g. no permission
                return problems, f"amcheck could not check them: {message}"
            problems.append(f"index {row['name']}: {message}")
    return problems, None


def amcheck_schema(conn: Any) -> str | None:
    """The schema the ``amcheck`` extension is installed in (its functions are called by that
    name: the search path is the store's), or None."""
    row = conn.execute(
        "SELECT quote_ident(n.nspname) AS nsp FROM pg_extension e JOIN pg_namespace n ON n.oid = "
        "e.extnamespace WHERE e.extname = 'amcheck'"
    ).fetchone()
    return None if row is None else str(row["nsp"])


def integrity_problems(conn: Any, schema: str, expected_version: int) -> list[str]:
    """What is wrong with the store's schema in ``conn``'s database: its version,
    :func:`rule_problems` and :func:`index_problems`."""
    problems = []
    version = conn.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations").fetchone()["v"]
    if version != expected_version:
        problems.append(f"schema version {version}, expected {expected_version}")
    return problems + rule_problems(conn) + index_problems(conn, schema)[0]


@contextmanager
def snapshot(conn: Any) -> Iterator[str]:
    """A read-only transaction on ``conn`` for the block, and its exported snapshot's id: what
    ``conn`` reads in the block and a ``pg_dump --snapshot`` of it see the same instant."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield str(conn.execute("SELECT pg_export_snapshot() AS id").fetchone()["id"])


def tool(name: str, why: str) -> str:
    """The path of PostgreSQL's client tool ``name``; StoreError if it is not on PATH."""
    found = shutil.which(name)
    if found is None:
        raise StoreError(f"{why} needs {name} (PostgreSQL's client tools) on PATH")
    return found


def dump(dsn: str, schema: str, dest: str, *, snapshot_id: str | None = None) -> None:
    """``pg_dump`` of the store's schema into ``dest`` (custom format: ``pg_restore`` reads it).
    One snapshot of the whole schema (``snapshot_id``: that exported snapshot), taken while
    workers go on writing."""
    args = [
        tool("pg_dump", "backup of a PostgreSQL store"),
        "--format=custom",
        f"--schema={schema}",
        f"--file={dest}",
        f"--dbname={dsn}",
    ]
    if snapshot_id:
        args.append(f"--snapshot={snapshot_id}")
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise StoreError(f"pg_dump failed: {done.stderr.strip()}")
