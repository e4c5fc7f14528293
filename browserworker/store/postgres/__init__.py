"""The PostgreSQL store: the connector and its pool (``_store``), its queries and transactions
(``_queries``), migrations (``_schema``), a deadline for unanswered calls (``_watchdog``),
``LISTEN`` wake-ups (``_listen``), checks and ``pg_dump`` (``_check``), restore (``_restore``).

A SQLite store loads none of it: ``from browserworker.store.postgres import DEFAULT_SCHEMA``
loads ``_conninfo`` alone.
"""

from typing import TYPE_CHECKING

from ..._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._check import (
        MAINTENANCE,
        SchemaFacts,
        connect,
        dump,
        facts,
        index_problems,
        rule_problems,
        schema_exists,
        snapshot,
    )
    from ._conninfo import DEFAULT_SCHEMA, ENV_SCHEMA, connect_failed, conninfo, redact_url, schema_name
    from ._restore import NotADump, drop, holding, load, read_dump, rename, set_aside, store_sessions
    from ._schema import SCHEMA_VERSION, exists, migrate
    from ._store import PostgresStore

__getattr__, __dir__ = face(__name__)

__all__ = [
    "DEFAULT_SCHEMA",
    "ENV_SCHEMA",
    "MAINTENANCE",
    "SCHEMA_VERSION",
    "NotADump",
    "PostgresStore",
    "SchemaFacts",
    "connect",
    "connect_failed",
    "conninfo",
    "drop",
    "dump",
    "exists",
    "facts",
    "holding",
    "index_problems",
    "load",
    "migrate",
    "read_dump",
    "redact_url",
    "rename",
    "rule_problems",
    "schema_exists",
    "schema_name",
    "set_aside",
    "snapshot",
    "store_sessions",
]
