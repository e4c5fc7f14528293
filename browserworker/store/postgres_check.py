"""PostgreSQL maintenance: the integrity check and the backup (``pg_dump``) of one store's schema."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from ..errors import StoreError

__all__ = ["dump", "integrity_problems"]

# what must hold in any consistent store (each query returns the rows that break it)
_RULES = {
    "runs LEASED or RUNNING without an owner or a lease expiry":
        "SELECT id FROM runs WHERE state IN ('LEASED', 'RUNNING') AND (owner IS NULL OR lease_expires_at IS NULL)",
    "runs in an unknown state":
        "SELECT id FROM runs WHERE state NOT IN ('QUEUED', 'LEASED', 'RUNNING', 'SUCCEEDED', 'FAILED', "
        "'CANCELLED', 'NEEDS_REVIEW')",
    "attempts dispatched before their intent":
        "SELECT id FROM attempts WHERE dispatched_at < intent_at - 1",
    "outbox rows of another run than their attempt's":
        "SELECT o.id FROM outbox o JOIN attempts a ON a.id = o.attempt_id WHERE a.run_id <> o.run_id",
}


def integrity_problems(conn: Any, schema: str, expected_version: int) -> list[str]:
    """What is wrong with the store's schema in ``conn``'s database: its version, the rules
    above, and (where the ``amcheck`` extension is installed) the B-tree indexes."""
    problems = []
    version = conn.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations").fetchone()["v"]
    if version != expected_version:
        problems.append(f"schema version {version}, expected {expected_version}")
    for what, sql in _RULES.items():
        rows = conn.execute(sql + " LIMIT 5").fetchall()
        if rows:
            problems.append(f"{what}: {', '.join(str(r['id']) for r in rows)}")
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'").fetchone():
        for row in conn.execute("SELECT c.oid::regclass::text AS name FROM pg_index i JOIN pg_class c ON c.oid = "
                                "i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am am ON "
                                "am.oid = c.relam WHERE n.nspname = %s AND am.amname = 'btree'", (schema,)).fetchall():
            try:
                conn.execute("SELECT bt_index_check(%s::regclass)", (row["name"],))
            except Exception as exc:  # noqa: BLE001 - amcheck reports corruption as an error
                problems.append(f"index {row['name']}: {str(exc).strip()}")
    return problems


def dump(conninfo: str, schema: str, dest: str) -> None:
    """``pg_dump`` of the store's schema into ``dest`` (custom format: ``pg_restore`` reads it).
    One snapshot of the whole schema, taken while workers go on writing."""
    tool = shutil.which("pg_dump")
    if tool is None:
        raise StoreError("backup of a PostgreSQL store needs pg_dump (PostgreSQL's client tools) on PATH")
    done = subprocess.run([tool, "--format=custom", f"--schema={schema}", f"--file={dest}", f"--dbname={conninfo}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise StoreError(f"pg_dump failed: {done.stderr.strip()}")
