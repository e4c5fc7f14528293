"""What every shared manager of the store stands on, and the rule its fences follow.

The managers (:mod:`.runs`, :mod:`.journal`, :mod:`.fleet`, :mod:`.review`, :mod:`.ops`)
hold the store's logic once, over named queries and a
:class:`~browserworker.store.connector.Connector`; they contain no dialect code.

**Fences.** A write that changes a run or its journal on behalf of a lease holder names
the epoch it holds, and must never commit after a claim that made the epoch N+1 (a claim,
reclaim, release or restore bumps ``runs.lease_epoch``). Each fenced write is therefore
*one statement* whose fence is evaluated atomically with the write, so the rule holds
whether or not the dialect serialises writers:

- writes of the ``runs`` row itself (``heartbeat``, ``start_run``, ``end_run``,
  ``set_run_state``, ``clear_reconcile``, ``release_run``, ``requeue_*``, the claims) carry
  ``lease_epoch = :epoch`` (or the state they require) in their own ``WHERE``: the row the
  statement changes is the row it checks, which every database locks and re-checks as one
  step (PostgreSQL re-evaluates the ``WHERE`` of an ``UPDATE`` on the row's latest version);
- writes of other tables conditioned on the run (``insert_attempt``, ``mark_dispatched``,
  ``finish_attempt``, ``resolve_attempt``) read the ``runs`` row in a sub-select ending in
  ``{share_run}``: a dialect whose writers are not serialised locks the row there
  (``FOR SHARE``), so the claim's update of that row waits for this transaction to end, or
  this statement waits for the claim and then reads the new epoch (and writes nothing);
- the rest of a fenced call's writes (its event row, the outbox row) come after its fenced
  statement, in the same transaction, under that lock;
- a read of a row that the same call then writes (``lock_run``, ``get_queue``) ends in
  ``{lock_row}`` (``FOR UPDATE``), and a claim's read of the next queued run ends in
  ``{skip_locked}`` (``FOR UPDATE SKIP LOCKED``), so concurrent claimers take different runs.

SQLite runs every write transaction in ``BEGIN IMMEDIATE``, so all three fragments are empty
there: no extra statement and no extra clause on its hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._canonical import canonical_json
from ..errors import LeaseLost
from .connector import Connector, Tx
from .records import Owner

__all__ = ["Manager", "lease_params", "read_only"]

F = TypeVar("F", bound=Callable[..., Any])


def lease_params(owner: Owner, now: float, ttl: float, *, start: bool = False) -> dict[str, Any]:
    """The named parameters of the lease a claim writes: who holds it, from when, for how long,
    and whether a run leased for the first time is started in the claim (``claim_next``'s start)."""
    return {
        "owner": owner.worker,
        "host": owner.host,
        "pid": owner.pid,
        "pid_start": owner.pid_start,
        "now": now,
        "ttl": ttl,
        "start": int(start),
    }


def read_only(method: F) -> F:
    """Mark a store method that only reads. :class:`~browserworker.store.aio.AsyncStore`
    runs such calls outside a batch's write transaction when they lead the batch."""
    method.read_only = True  # type: ignore[attr-defined]
    return method


class Manager:
    """A part of the store's logic over one connector (see the module docstring)."""

    def __init__(self, connector: Connector) -> None:
        self.c = connector

    def _event(
        self,
        tx: Tx,
        run_id: str,
        kind: str,
        *,
        now: float,
        step_id: str | None = None,
        attempt_no: int | None = None,
        worker: str | None = None,
        epoch: int | None = None,
        from_state: str | None = None,
        to_state: str | None = None,
        decision: str | None = None,
        detail: Any = None,
    ) -> None:
        """Journal one event row in ``tx`` (by position: every transition writes one, several
        per run, and binding eleven names costs more than the insert's index writes)."""
        tx.insert_values(
            "insert_event",
            (
                now,
                run_id,
                step_id,
                attempt_no,
                worker,
                epoch,
                kind,
                # plain str: the driver adapts a str subclass (a state) the slow way
                None if from_state is None else str(from_state),
                None if to_state is None else str(to_state),
                decision,
                None if detail is None else canonical_json(detail),
            ),
        )

    def _lease_lost(self, run_id: str, epoch: int, margin: float, what: str) -> LeaseLost:
        """Why a fenced write of ``run_id`` under ``epoch`` changed nothing."""
        run = self.c.read_one("run_lease", {"id": run_id})
        if run is None:
            return LeaseLost(f"{what}: run {run_id} does not exist")
        if run["lease_epoch"] != epoch:
            return LeaseLost(
                f"{what}: run {run_id} is now at lease epoch {run['lease_epoch']} (owner {run['owner']}), not {epoch}"
            )
        left = (run["lease_expires_at"] or 0) - self.c.now()
        return LeaseLost(f"{what}: lease of run {run_id} has {left:.1f}s left, less than the {margin:.1f}s margin")
