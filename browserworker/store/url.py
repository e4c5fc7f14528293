"""Opening a store from a path or a URL: the one place that knows which class serves which."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UsageError
from .base import Store

__all__ = ["DEFAULT_DB", "ENV_DB", "open_store"]

ENV_DB = "BROWSERWORKER_DB"
DEFAULT_DB = "browserworker.db"


def open_store(target: str | os.PathLike[str] | None = None, *, create: bool = True) -> Store:
    """Open the store at ``target``: a file path (SQLite) or a URL; None means
    ``$BROWSERWORKER_DB``, else ``browserworker.db`` in the working directory.

    ``create=False`` refuses to create a missing database (read-only commands).
    Raises :class:`~browserworker.errors.StoreError` if it cannot be opened and
    :class:`~browserworker.errors.UsageError` for a URL of a kind this version does not serve.
    """
    if target is None:
        target = os.environ.get(ENV_DB) or DEFAULT_DB
    text = os.fspath(target)
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme not in ("sqlite", "file"):
            raise UsageError(f"--db {text!r}: no store for {scheme}:// URLs in this version "
                             "(give a file path for SQLite)")
        text = text.split("://", 1)[1]
    from .sqlite import SQLiteStore

    return SQLiteStore(Path(text), create=create)
