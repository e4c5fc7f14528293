"""Naming a PostgreSQL store and reaching its server: the schema, the connection string and
its network settings, a password kept out of messages, and what a failed connection means."""

from __future__ import annotations

import os
import re

from ...errors import StoreError, StoreUnavailable, UsageError

__all__ = [
    "DEFAULT_POOL",
    "DEFAULT_SCHEMA",
    "ENV_POOL",
    "ENV_SCHEMA",
    "application_name",
    "connect_failed",
    "conninfo",
    "pool_size",
    "redact_url",
    "schema_name",
]

ENV_SCHEMA = "BROWSERWORKER_DB_SCHEMA"  # the store's schema
DEFAULT_SCHEMA = "browserworker"
ENV_POOL = "BROWSERWORKER_DB_POOL"
DEFAULT_POOL = 4

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# libpq settings a URL may override: a partition or a dead server ends a call in seconds
_NETWORK = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}


def schema_name(schema: str | None) -> str:
    """The store's schema: ``schema``, else ``$BROWSERWORKER_DB_SCHEMA``, else ``browserworker``;
    :class:`UsageError` unless it is a plain lower-case identifier."""
    name = schema or os.environ.get(ENV_SCHEMA) or DEFAULT_SCHEMA
    if not _SCHEMA_NAME.match(name):
        raise UsageError(
            f"--db-schema {name!r}: a schema name is lower-case letters, digits and _ "
            "(not starting with a digit, at most 63)"
        )
    return name


def pool_size() -> int:
    raw = os.environ.get(ENV_POOL, "").strip()
    if not raw:
        return DEFAULT_POOL
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise UsageError(f"{ENV_POOL}={raw!r}: expected a number of connections between 1 and 100")
    return int(raw)


def redact_url(url: str) -> str:
    """``url`` without its password (for messages and ``location``)."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def application_name(schema: str) -> str:
    """The ``application_name`` of the store's sessions: how a restore sees who is connected."""
    return f"browserworker:{schema}"


def conninfo(url: str, schema: str, *, application: str | None = None) -> str:
    """libpq's connection string for ``url``: the network settings above, and the sessions
    named ``application`` (default :func:`application_name`), unless the URL says otherwise."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise UsageError(f"--db {redact_url(url)!r}: not a PostgreSQL URL: {exc}") from exc
    extra = {k: v for k, v in _NETWORK.items() if k not in given}
    if "application_name" not in given:
        extra["application_name"] = application or application_name(schema)
    return make_conninfo(url, **extra)


# SQLSTATE classes of a server that is there but cannot serve now: 08 connection exception,
# 53 insufficient resources (too many connections), 57 operator intervention (shutting down,
# starting up). libpq gives a failed connection no SQLSTATE: its message tells a server that
# answered no (``FATAL:``) from one that was not there, and which answers pass.
_PASSING = ("08", "53", "57")
_PASSING_FATAL = (
    "starting up",
    "shutting down",
    "recovery mode",
    "not yet accepting connections",
    "too many clients",
    "connection slots",
    "terminating connection",
)


def connect_failed(location: str, exc: Exception) -> StoreError:
    """The error for a connection to ``location`` that failed with ``exc``: a server that cannot
    be reached now is :class:`StoreUnavailable` (it passes: wait, or exit 5); one that answered
    no (a wrong password, no such database) is a plain :class:`StoreError`."""
    text = str(exc).strip()
    message = f"cannot connect to {location}: {text}"
    state = getattr(exc, "sqlstate", None)
    if state is not None:
        passing = state[:2] in _PASSING
    else:
        passing = "FATAL:" not in text or any(phrase in text for phrase in _PASSING_FATAL)
    return StoreUnavailable(message) if passing else StoreError(message)
