"""The durable control plane: runs, the journal of attempts, the outbox and events."""

from .base import SQLStore, Store
from .records import AttemptRecord, EventRecord, NewRun, OutboxRecord, Owner, RunRecord
from .sqlite import SCHEMA_VERSION, SQLiteStore

__all__ = [
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
]
