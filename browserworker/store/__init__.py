"""The durable control plane: runs, the journal of attempts, the outbox and events."""

from .base import SQLStore, Store
from .records import AttemptRecord, EventRecord, NewRun, OutboxRecord, Owner, RunRecord
from .sqlite import SCHEMA_VERSION, SQLiteStore
from .url import DEFAULT_DB, ENV_DB, open_store

__all__ = [
    "DEFAULT_DB",
    "ENV_DB",
    "SCHEMA_VERSION",
    "AttemptRecord",
    "EventRecord",
    "NewRun",
    "OutboxRecord",
    "Owner",
    "RunRecord",
    "SQLStore",
    "SQLiteStore",
    "Store",
    "open_store",
]
