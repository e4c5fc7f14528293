"""Helpers for tests of any store: move times into the past instead of sleeping.

Each goes through the store's connector and a named query of ``sql/testing.sql``, so a
test written with them runs against every store implementation.
"""

from __future__ import annotations

from typing import Any

from .base import Store
from .shared import SQLStore

__all__ = [
    "RUN_TIMES",
    "backdate",
    "backdate_approvals",
    "backdate_attempts",
    "backdate_console_sessions",
    "backdate_events",
    "backdate_limit",
    "backdate_worker",
    "forget_lease",
]

#: the time columns of a run that :func:`backdate` moves
RUN_TIMES = ("lease_expires_at", "not_before", "created_at", "started_at", "finished_at")


def _write(store: Store, query: str, **params: Any) -> int:
    if not isinstance(store, SQLStore):
        raise TypeError(f"{type(store).__name__} is not a store over a connector")
    with store.connector.transaction() as tx:
        return tx.execute(query, params)


def backdate(store: Store, run_id: str, seconds: float, *, column: str = "lease_expires_at") -> None:
    """Move ``column`` of run ``run_id`` (its lease expiry, by default) ``seconds`` into the past."""
    if column not in RUN_TIMES:
        raise ValueError(f"backdate: {column!r} is not one of {RUN_TIMES}")
    if _write(store, "testing_backdate_run", id=run_id, column=column, seconds=seconds) != 1:
        raise KeyError(run_id)


def backdate_attempts(store: Store, seconds: float, *, id: int | None = None, state: str | None = None) -> int:
    """Move ``finished_at`` of the attempts with ``id`` and/or in ``state`` into the past; how many."""
    return _write(store, "testing_backdate_attempts", id=id, state=state, seconds=seconds)


def backdate_approvals(store: Store, run_id: str, seconds: float) -> int:
    """Move the expiry of run ``run_id``'s approvals ``seconds`` into the past; how many."""
    return _write(store, "testing_backdate_approvals", run_id=run_id, seconds=seconds)


def backdate_console_sessions(store: Store, seconds: float) -> int:
    """Move the expiry of every console session ``seconds`` into the past; how many."""
    return _write(store, "testing_backdate_console_sessions", seconds=seconds)


def backdate_events(store: Store, run_id: str, kind: str, seconds: float) -> int:
    """Move the time of run ``run_id``'s events of ``kind`` into the past; how many."""
    return _write(store, "testing_backdate_events", run_id=run_id, kind=kind, seconds=seconds)


def backdate_limit(store: Store, key: str, seconds: float) -> None:
    """Move limit key ``key``'s pause end and its rate bucket's last refill ``seconds`` into the past."""
    if _write(store, "testing_backdate_limit", key=key, seconds=seconds) != 1:
        raise KeyError(key)


def backdate_worker(store: Store, worker_id: str, seconds: float) -> None:
    """Move a registered worker's last heartbeat ``seconds`` into the past."""
    if _write(store, "testing_backdate_worker", id=worker_id, seconds=seconds) != 1:
        raise KeyError(worker_id)


def forget_lease(store: Store, run_id: str) -> None:
    """Put a run back in the queue with no trace of its lease (no event, the same epoch), as
    a database edited by hand would have it."""
    if _write(store, "testing_forget_lease", id=run_id) != 1:
        raise KeyError(run_id)
