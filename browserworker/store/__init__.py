"""The durable control plane: runs, the journal of attempts, the outbox and events.

Open one with :func:`open_store` (a path or a URL). The layout: :mod:`.base` (the
:class:`Store` protocol, the one list of the flat methods), :mod:`.records` (every record the
store takes or returns), :mod:`.connector` (what a dialect provides), :mod:`.shared` (the
store: the managers :mod:`.runs`, :mod:`.journal`, :mod:`.fleet`, :mod:`.review`, :mod:`.ops`,
... over a connector, each flat method bound to its manager's), :mod:`.sqlite` and
:mod:`.postgres` (the dialects), :mod:`.aio` (asyncio and group commit), :mod:`.wakeups`
(waking idle workers), :mod:`.testing` (helpers for tests of any store).
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from .base import Store
    from .connector import Connector
    from .postgres import PostgresStore
    from .records import AttemptRecord, EventRecord, NewRun, OutboxRecord, Owner, RunRecord
    from .shared import SQLStore
    from .sqlite import SCHEMA_VERSION, SQLiteConnector, SQLiteStore
    from .url import DEFAULT_DB, ENV_DB, open_store

__getattr__, __dir__ = face(__name__)

__all__ = [
    "DEFAULT_DB",
    "ENV_DB",
    "SCHEMA_VERSION",
    "AttemptRecord",
    "Connector",
    "EventRecord",
    "NewRun",
    "OutboxRecord",
    "Owner",
    "PostgresStore",
    "RunRecord",
    "SQLStore",
    "SQLiteConnector",
    "SQLiteStore",
    "Store",
    "open_store",
]
