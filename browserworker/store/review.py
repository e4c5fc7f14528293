"""What people do to runs: cancel one, and decide the UNKNOWN step of a run waiting for review."""

from __future__ import annotations

from typing import Any

from .._canonical import canonical_json
from ..errors import RunNotFound, UsageError
from ..states import AttemptState, RunState
from .connector import Connector, Row, Tx
from .manager import Manager, read_only
from .records import RunRecord
from .runs import RunManager

__all__ = ["ReviewManager"]

_DECIDED = {"done": AttemptState.SUCCEEDED, "not_done": AttemptState.NOT_DONE, "failed": AttemptState.FAILED}


def _by(who: str | None) -> dict[str, Any] | None:
    return None if who is None else {"who": who}


class ReviewManager(Manager):
    """Cancels and human decisions (unfenced by epoch: conditioned on the run's state)."""

    def __init__(self, connector: Connector, runs: RunManager) -> None:
        super().__init__(connector)
        self.runs = runs

    def cancel(self, run_id: str, *, who: str | None = None) -> str:
        """Cancel a run: queued or waiting for review or approval → CANCELLED now ('cancelled');
        leased or running → asked to stop at its next step boundary ('requested'); else its state.
        ``who`` (a person) is journaled with the event."""
        now = self.c.now()
        with self.c.transaction() as tx:
            before = tx.one("lock_run", {"id": run_id})
            if before is None:
                raise RunNotFound(f"no run {run_id!r}")
            if tx.execute("cancel_queued", {"id": run_id, "now": now}) == 1:
                self._event(
                    tx,
                    run_id,
                    "run_state",
                    now=now,
                    worker=who,
                    from_state=before["state"],
                    to_state=RunState.CANCELLED,
                    decision="cancelled",
                    detail=_by(who),
                )
                return "cancelled"
            if tx.execute("request_cancel", {"id": run_id, "now": now}) == 1:
                self._event(
                    tx, run_id, "cancel_requested", now=now, worker=who, decision="cancel_requested", detail=_by(who)
                )
                return "requested"
        return str(before["state"])

    def requeue(self, run_id: str, *, who: str) -> RunRecord:
        """Put a FAILED or CANCELLED run back in its queue, as it is (same id, journal and request
        keys: what SUCCEEDED is skipped); ``who`` is journaled. :class:`UsageError` in any other state."""
        now = self.c.now()
        with self.c.transaction() as tx:
            before = tx.one("lock_run", {"id": run_id})
            if before is None:
                raise RunNotFound(f"no run {run_id!r}")
            if tx.execute("requeue_ended", {"id": run_id, "now": now}) != 1:
                raise UsageError(f"run {run_id} is {before['state']}: only FAILED or CANCELLED runs are requeued")
            self._event(
                tx,
                run_id,
                "run_state",
                now=now,
                worker=who,
                from_state=before["state"],
                to_state=RunState.QUEUED,
                decision="requeued",
                detail=_by(who),
            )
        requeued = self.runs.get_run(run_id)
        assert requeued is not None
        return requeued

    def resolve(self, run_id: str, step_id: str, decision: str, *, result: Any = None, who: str) -> RunRecord:
        """A person's decision on an UNKNOWN step of a NEEDS_REVIEW run.

        ``done`` → SUCCEEDED (skipped on re-run), ``not_done`` → NOT_DONE (replayed with the
        same key), ``failed`` → FAILED and the run ends FAILED. The run is re-queued unless failed.
        """
        if decision not in _DECIDED:
            raise UsageError(f"unknown decision {decision!r}")
        now = self.c.now()
        with self.c.transaction() as tx:
            run = tx.one("lock_run", {"id": run_id})
            if run is None:
                raise RunNotFound(f"no run {run_id!r}")
            if run["state"] != RunState.NEEDS_REVIEW:
                raise UsageError(f"run {run_id} is {run['state']}, not NEEDS_REVIEW")
            latest = tx.one("latest_attempt", {"run_id": run_id, "step_id": step_id})
            state = _DECIDED[decision]
            evidence = {
                "who": who,
                "decision": decision,
                "at": now,
                "before": None
                if latest is None
                else {"state": latest["state"], "error": latest["error"], "evidence": latest["evidence"]},
            }
            if latest is not None and latest["state"] in (AttemptState.UNKNOWN, AttemptState.INTENT):
                self._resolve_attempt(tx, latest, state, decision, result=result, evidence=evidence, who=who, now=now)
            elif decision != "failed":
                raise UsageError(f"step {step_id!r} of run {run_id} has no UNKNOWN attempt to resolve")
            if decision == "failed":
                tx.execute("fail_reviewed", {"id": run_id, "error": f"resolved as failed by {who}", "now": now})
                to = RunState.FAILED
            else:
                tx.execute("requeue_reviewed", {"id": run_id, "now": now})
                to = RunState.QUEUED
            self._event(
                tx,
                run_id,
                "run_state",
                now=now,
                worker=who,
                from_state=RunState.NEEDS_REVIEW,
                to_state=to,
                decision=f"resolved:{decision}",
                detail=evidence,
            )
        resolved = self.runs.get_run(run_id)
        assert resolved is not None
        return resolved

    def _resolve_attempt(
        self,
        tx: Tx,
        latest: Row,
        state: AttemptState,
        decision: str,
        *,
        result: Any,
        evidence: dict[str, Any],
        who: str,
        now: float,
    ) -> None:
        """Journal a person's decision on the step's attempt in doubt, ``latest``."""
        tx.execute(
            "resolve_attempt",
            {
                "attempt_id": latest["id"],
                "state": str(state),
                "now": now,
                "result_json": None if result is None else canonical_json(result),
                "decided_by": f"human:{who}",
                "evidence": canonical_json(evidence),
            },
        )
        self._event(
            tx,
            latest["run_id"],
            "attempt_state",
            now=now,
            step_id=latest["step_id"],
            attempt_no=latest["attempt_no"],
            worker=who,
            from_state=latest["state"],
            to_state=state,
            decision=f"human:{decision}",
            detail=evidence,
        )

    @read_only
    def runs_needing_review(self, limit: int = 100) -> list[RunRecord]:
        return [RunRecord.from_row(r) for r in self.c.read("runs_needing_review", {"limit": limit})]
