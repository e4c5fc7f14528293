"""Opening a store from a path or a URL: the one place that knows which class serves which."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import StoreUnavailable, UsageError
from .base import Store
from .postgres import DEFAULT_SCHEMA, ENV_SCHEMA

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_SCHEMA",
    "ENV_DB",
    "ENV_SCHEMA",
    "is_postgres",
    "open_store",
    "postgres_url",
    "sqlite_path",
    "store_exists",
]

ENV_DB = "BROWSERWORKER_DB"
DEFAULT_DB = "browserworker.db"

_SQLITE = ("sqlite", "file")
_POSTGRES = ("postgres", "postgresql", "postgresql+psycopg")


def sqlite_path(target: str) -> Path:
    """The file a SQLite target names: a plain path, ``sqlite:///relative``,
    ``sqlite:////abs`` or ``file:///abs``; :class:`UsageError` for any other URL."""
    if "://" not in target:
        return Path(target)
    scheme, rest = target.split("://", 1)
    scheme = scheme.lower()
    if scheme not in _SQLITE:
        raise UsageError(
            f"--db {target!r}: no store for {scheme}:// URLs (give a SQLite file path, a "
            "sqlite:/// URL or a postgresql:// URL)"
        )
    if scheme == "file":  # file:///abs/path (an RFC 8089 URL: the path is absolute)
        rest = rest.partition("?")[0]
        return Path(rest if rest.startswith("/") else "/" + rest.partition("/")[2])
    # sqlite:///path is relative to the working directory, sqlite:////path absolute (as SQLAlchemy)
    path = rest.partition("?")[0]
    if not path.startswith("/"):
        raise UsageError(f"--db {target!r}: a sqlite URL is sqlite:///path (three slashes, then the file)")
    path = path[1:]
    if not path:
        raise UsageError(f"--db {target!r}: the URL names no file")
    return Path(path)


def is_postgres(target: str) -> bool:
    """Whether ``target`` is a PostgreSQL URL (``postgresql://``, ``postgres://``)."""
    return "://" in target and target.split("://", 1)[0].lower() in _POSTGRES


def postgres_url(target: str) -> str:
    """The URL libpq reads for a PostgreSQL ``target`` (``postgresql+psycopg://`` as SQLAlchemy
    writes it, read as ``postgresql://``)."""
    return target.replace("postgresql+psycopg://", "postgresql://", 1)


def open_store(
    target: str | os.PathLike[str] | None = None, *, create: bool = True, schema: str | None = None
) -> Store:
    """Open the store at ``target``: a file path or ``sqlite:///path`` (SQLite), or a
    ``postgresql://user@host:port/dbname`` URL (PostgreSQL, in ``schema``: else
    ``$BROWSERWORKER_DB_SCHEMA``, else ``browserworker``); None means ``$BROWSERWORKER_DB``,
    else ``browserworker.db`` in the working directory.

    ``create=False`` refuses to create a missing database (or schema: read-only commands).
    Raises :class:`~browserworker.errors.StoreError` if it cannot be opened and
    :class:`~browserworker.errors.UsageError` for a URL of a kind this version does not serve.
    """
    if target is None:
        target = os.environ.get(ENV_DB) or DEFAULT_DB
    target = os.fspath(target)
    if is_postgres(target):
        from .postgres import PostgresStore

        return PostgresStore(postgres_url(target), schema=schema, create=create)
    path = sqlite_path(target)
    from .sqlite import SQLiteStore

    return SQLiteStore(path, create=create)


def open_store_waiting(
    target: str | os.PathLike[str] | None = None,
    *,
    wait: float,
    create: bool = True,
    schema: str | None = None,
    on_wait: Callable[[StoreUnavailable, float], None] | None = None,
) -> Store:
    """:func:`open_store`, tried again while its server is unavailable (down, restarting, out of
    connections), for up to ``wait`` seconds from the first failed try (however long that try
    took: a slow first try still waits), with a backoff from 0.5 s to 5 s between tries.
    ``on_wait(error, seconds_left)`` hears each failed try. Any other failure is raised at
    once; the last :class:`~browserworker.errors.StoreUnavailable` when ``wait`` runs out."""
    deadline: float | None = None
    pause = 0.5
    while True:
        try:
            return open_store(target, create=create, schema=schema)
        except StoreUnavailable as exc:
            if deadline is None:
                deadline = time.monotonic() + wait
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            if on_wait is not None:
                on_wait(exc, left)
            time.sleep(min(pause, left))
            pause = min(pause * 2, 5.0)


def store_exists(target: str | os.PathLike[str], *, schema: str | None = None) -> bool:
    """Whether there is a store at ``target`` already (a SQLite file; a PostgreSQL schema, in
    ``schema`` as :func:`open_store` names it); looks, creates nothing."""
    target = os.fspath(target)
    if is_postgres(target):
        from .postgres import schema_exists

        return schema_exists(postgres_url(target), schema)
    return sqlite_path(target).exists()
