"""The SQLite store: one file, WAL, group commit (``_store``); whole-file operations (``_files``)."""

from . import _files as files
from ._store import SCHEMA_VERSION, SQLiteConnector, SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "SQLiteConnector",
    "SQLiteStore",
    "files",
]
