"""Approvals: what a person decides before an ``approve=`` effect dispatches.

The functions the CLI (``browserworker approvals``, ``approve``, ``reject``) and a console
call; each is one store call, journaled with who decided and when (docs/approvals.md).
"""

from __future__ import annotations

import getpass

from ..errors import RunNotFound
from ..store.base import Store
from ..store.records import ApprovalRecord

__all__ = ["approvals_of_run", "approve", "list_approvals", "reject"]


def list_approvals(store: Store, *, limit: int = 100) -> list[ApprovalRecord]:
    """The approvals still waiting for a decision, oldest first. It only reads: one past its
    time is left out, and is expired (its run ends FAILED, as on a rejection with the reason
    ``expired``) by the next worker's sweep or the next decision, never by looking."""
    now = store.now()
    return [a for a in store.approvals.waiting(limit) if a.expires_at > now]


def approvals_of_run(store: Store, run_id: str) -> list[ApprovalRecord]:
    """Every approval a run asked for, decided or not, in the order asked.
    Raises :class:`~browserworker.errors.RunNotFound` for an unknown run."""
    found = store.approvals.of_run(run_id)
    if not found and store.get_run(run_id) is None:
        raise RunNotFound(f"no run {run_id!r}")
    return found


def approve(store: Store, run_id: str, step_id: str, *, who: str | None = None) -> ApprovalRecord:
    """Approve the waiting request of ``step_id``: the run dispatches it (a parked run is queued).
    Raises :class:`~browserworker.errors.RunNotFound` for an unknown run, and
    :class:`~browserworker.errors.UsageError` for an unknown step or one decided already."""
    return store.approvals.decide(run_id, step_id, "approve", who=who or _who())


def reject(
    store: Store, run_id: str, step_id: str, *, who: str | None = None, reason: str | None = None
) -> ApprovalRecord:
    """Reject the waiting request of ``step_id``: nothing is sent, the attempt ends
    FAILED_BEFORE_SEND and the run FAILED. Raises like :func:`approve`."""
    return store.approvals.decide(run_id, step_id, "reject", who=who or _who(), reason=reason)


def _who() -> str:
    try:
        return getpass.getuser()
    except Exception:  # pragma: no cover
        return "unknown"
