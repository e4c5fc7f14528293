"""Does a finished run's journal account for every decision? (for chaos tests)

``audit(store, run_id, effect)`` returns the problems found in one run's events and attempts
(empty: it accounts). For a run that ended SUCCEEDED:

- it begins with ``run_created`` and its last ``run_state`` event is to SUCCEEDED;
- each lease was claimed with a higher epoch than the last, and, after the first claim, only
  once the run was handed back or its lease reclaimed (``lease_released``/``lease_expired``);
  every such hand-back or reclaim is followed by a claim;
- each attempt of the effect has its ``intent`` event, and its ``attempt_state`` events walk from
  INTENT to its final state; none is left INTENT or UNKNOWN, none FAILED;
- each ``dispatched`` event came from the holder of the lease at the time (its epoch is the
  latest claim's), and every dispatched attempt has one (or was reconciled as dispatched);
- an attempt a lost lease left undecided is decided afterwards by reconciliation (recovery,
  the outbox or the verifier), never by a blind replay;
- exactly one attempt of the effect SUCCEEDED.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from browserworker.states import AttemptState
from browserworker.store.base import Store
from browserworker.store.records import AttemptRecord, EventRecord

__all__ = ["RECONCILED_BY", "audit", "summary"]

RECONCILED_BY = frozenset({"recovery:no_dispatch", "recovery:dispatched", "outbox", "verifier"})
_ENDED = {AttemptState.SUCCEEDED, AttemptState.FAILED_BEFORE_SEND, AttemptState.NOT_DONE}
_TAKEN_BACK = ("lease_released", "lease_expired")


def _lifecycle(events: Sequence[EventRecord]) -> list[str]:
    problems = []
    if not events or events[0].kind != "run_created":
        problems.append("does not begin with run_created")
    states = [e.to_state for e in events if e.kind == "run_state"]
    if not states or states[-1] != "SUCCEEDED":
        problems.append(f"last run_state is {states[-1:]}, not SUCCEEDED")
    return problems


def _claims(events: Sequence[EventRecord]) -> list[str]:
    problems, last_epoch, free = [], -1, True
    for e in events:
        if e.kind in _TAKEN_BACK:
            free = True
        elif e.kind == "lease_claimed":
            epoch = e.lease_epoch if e.lease_epoch is not None else -1
            if epoch <= last_epoch:
                problems.append(f"claim #{e.id} at epoch {epoch} after epoch {last_epoch}")
            if not free:
                problems.append(f"claim #{e.id} while the lease was held (no release or expiry before it)")
            last_epoch, free = epoch, False
    if free:
        problems.append("handed back or reclaimed, and never claimed again")
    return problems


def _dispatches(events: Sequence[EventRecord]) -> list[str]:
    problems, holder = [], None
    for e in events:
        if e.kind == "lease_claimed":
            holder = e.lease_epoch
        elif e.kind == "dispatched" and e.lease_epoch != holder:
            problems.append(
                f"dispatch #{e.id} of {e.step_id}#{e.attempt_no} at epoch {e.lease_epoch}, "
                f"while epoch {holder} held the lease"
            )
    return problems


def _attempt(events: Sequence[EventRecord], attempt: AttemptRecord) -> list[str]:
    mine = [e for e in events if e.step_id == attempt.step_id and e.attempt_no == attempt.attempt_no]
    name = f"{attempt.step_id}#{attempt.attempt_no}"
    problems = []
    if not any(e.kind == "intent" for e in mine):
        problems.append(f"{name} has no intent event")
    walk = [(e.from_state, e.to_state) for e in mine if e.kind == "attempt_state"]
    state = "INTENT"
    for before, after in walk:
        if before != state:
            problems.append(f"{name} went {before}->{after} while {state}")
        state = after or state
    if state != attempt.state or attempt.state not in _ENDED:
        problems.append(f"{name} ended {attempt.state} (events say {state})")
    if (
        attempt.dispatched_at is not None
        and not any(e.kind == "dispatched" for e in mine)
        and not any(e.decision == "recovery:dispatched" for e in mine)
    ):
        problems.append(f"{name} was dispatched without a dispatched event")
    return problems


def _reconciled(events: Sequence[EventRecord], attempt: AttemptRecord) -> list[str]:
    """An attempt still open when its run's lease was lost is decided by reconciliation."""
    mine = [e for e in events if e.step_id == attempt.step_id and e.attempt_no == attempt.attempt_no]
    decided = next((e for e in mine if e.kind == "attempt_state" and e.from_state == "INTENT"), None)
    opened = next((e for e in mine if e.kind == "intent"), None)
    if decided is None or opened is None:
        return []
    lost = [e for e in events if e.kind == "lease_expired" and opened.id < e.id < decided.id]
    if lost and decided.decision not in RECONCILED_BY:
        return [
            f"{attempt.step_id}#{attempt.attempt_no}: open when the lease was lost (event #{lost[0].id}), "
            f"then decided by {decided.decision!r}, not by reconciliation"
        ]
    return []


def audit(store: Store, run_id: str, effect: str) -> list[str]:
    """The problems of a SUCCEEDED run's journal (see the module docstring); ``effect``: its effect step."""
    events = store.events(run_id)
    attempts = [a for a in store.attempts(run_id) if a.step_id == effect]
    problems = _lifecycle(events) + _claims(events) + _dispatches(events)
    for attempt in attempts:
        problems += _attempt(events, attempt) + _reconciled(events, attempt)
    succeeded = sum(1 for a in attempts if a.state == AttemptState.SUCCEEDED)
    if succeeded != 1:
        problems.append(f"{succeeded} SUCCEEDED attempts of {effect}, not 1")
    return [f"{run_id}: {p}" for p in problems]


def summary(store: Store, run_ids: Sequence[str]) -> dict[str, Any]:
    """Counts over many runs' journals: lease expiries, reconciliation decisions, attempts."""
    counts: dict[str, Any] = {"lease_expired": 0, "reconciled": {}, "attempts": 0}
    for run_id in run_ids:
        for e in store.events(run_id):
            if e.kind == "lease_expired":
                counts["lease_expired"] += 1
            if e.kind == "attempt_state" and e.decision in RECONCILED_BY:
                counts["reconciled"][e.decision] = counts["reconciled"].get(e.decision, 0) + 1
            if e.kind == "intent":
                counts["attempts"] += 1
    return counts
