"""Approvals: a request an effect would send, held for a person's yes or no.

The lease holder asks (fenced by its epoch) and parks its run (AWAITING_APPROVAL, the epoch
bumped); a person decides (unfenced: conditioned on the approval being PENDING, once only);
an approval past its ``expires_at`` ends like a rejection with the reason ``expired``.
"""

from __future__ import annotations

from typing import Any

from .._canonical import canonical_json
from ..errors import RunNotFound, UsageError
from ..states import RunState
from .connector import Connector, Row, Tx
from .manager import Manager, read_only
from .records import ApprovalRecord, RunRecord
from .runs import RunManager

__all__ = ["APPROVAL_STATES", "ApprovalManager"]

APPROVAL_STATES = ("PENDING", "APPROVED", "REJECTED", "EXPIRED", "SUPERSEDED")
_LIVE_RUN = (RunState.LEASED, RunState.RUNNING)


class ApprovalManager(Manager):
    """Asking, parking, deciding and expiring approvals (see the module docstring)."""

    def __init__(self, connector: Connector, runs: RunManager) -> None:
        super().__init__(connector)
        self.runs = runs

    # -- the lease holder ---------------------------------------------------------------

    @read_only
    def current(self, run_id: str, step_id: str) -> ApprovalRecord | None:
        """The step's latest approval that is not superseded (None: none asked)."""
        row = self.c.read_one("latest_approval", {"run_id": run_id, "step_id": step_id})
        return None if row is None else ApprovalRecord.from_row(row)

    @read_only
    def get(self, approval_id: int) -> ApprovalRecord | None:
        row = self.c.read_one("get_approval", {"id": approval_id})
        return None if row is None else ApprovalRecord.from_row(row)

    @read_only
    def of_run(self, run_id: str) -> list[ApprovalRecord]:
        return [ApprovalRecord.from_row(r) for r in self.c.read("approvals_of_run", {"run_id": run_id})]

    def request(
        self,
        run_id: str,
        epoch: int,
        step_id: str,
        attempt_no: int,
        request_key: str,
        fingerprint: str,
        summary: dict[str, Any],
        *,
        screenshot: str | None,
        ttl: float,
        worker: str | None = None,
    ) -> ApprovalRecord:
        """Ask for a decision on the request with ``fingerprint`` (fenced by ``epoch``).

        The step's live approval for the same fingerprint is returned as it is (a worker that
        restarts asks once); one for another fingerprint is SUPERSEDED and a new one asked."""
        now = self.c.now()
        with self.c.transaction() as tx:
            self._fence(tx, run_id, epoch, "approval request")
            live = tx.one("latest_approval", {"run_id": run_id, "step_id": step_id})
            if live is not None and live["fingerprint"] == fingerprint and live["state"] in ("PENDING", "APPROVED"):
                return ApprovalRecord.from_row(live)
            if live is not None and live["state"] in ("PENDING", "APPROVED"):
                self._supersede(tx, live, fingerprint, epoch=epoch, attempt_no=attempt_no, worker=worker, now=now)
            new_id = tx.insert(
                "insert_approval",
                {
                    "run_id": run_id,
                    "step_id": step_id,
                    "attempt_no": attempt_no,
                    "request_key": request_key,
                    "fingerprint": fingerprint,
                    "summary_json": canonical_json(summary),
                    "screenshot": screenshot,
                    "worker": worker,
                    "now": now,
                    "expires_at": now + ttl,
                },
            )
            assert new_id is not None
            self._event(
                tx,
                run_id,
                "approval",
                now=now,
                step_id=step_id,
                attempt_no=attempt_no,
                worker=worker,
                epoch=epoch,
                decision="approval_requested",
                detail={
                    "approval": new_id,
                    "fingerprint": fingerprint,
                    "method": summary.get("method"),
                    "url": summary.get("url"),
                    "screenshot": screenshot,
                    "expires_at": now + ttl,
                },
            )
            row = tx.one("get_approval", {"id": new_id})
        assert row is not None
        return ApprovalRecord.from_row(row)

    def _supersede(
        self, tx: Tx, live: Row, fingerprint: str, *, epoch: int, attempt_no: int, worker: str | None, now: float
    ) -> None:
        """Supersede the step's live approval ``live``: the request it was asked for changed."""
        tx.execute("supersede_approval", {"id": live["id"], "reason": "the request changed"})
        self._event(
            tx,
            live["run_id"],
            "approval",
            now=now,
            step_id=live["step_id"],
            attempt_no=attempt_no,
            worker=worker,
            epoch=epoch,
            decision="approval_superseded",
            detail={
                "approval": live["id"],
                "was": live["state"],
                "fingerprint": live["fingerprint"],
                "now": fingerprint,
            },
        )

    def park(self, run_id: str, epoch: int, approval_id: int, *, worker: str | None = None) -> RunRecord:
        """The lease holder hands its run over to the decision: AWAITING_APPROVAL while it is
        PENDING, QUEUED if approved meanwhile, FAILED if rejected or expired. Bumps the epoch."""
        now = self.c.now()
        with self.c.transaction() as tx:
            before = self._fence(tx, run_id, epoch, "park for approval")
            approval = tx.one("get_approval", {"id": approval_id})
            assert approval is not None
            if approval["state"] == "SUPERSEDED":  # the step's live approval decides
                approval = tx.one("latest_approval", {"run_id": run_id, "step_id": approval["step_id"]}) or approval
            state = approval["state"]
            if state == "PENDING" and approval["expires_at"] < now:
                state = self._expire(tx, approval, now)
            to, error = _run_after(state, approval)
            if (
                tx.execute("park_run", {"id": run_id, "epoch": epoch, "state": str(to), "error": error, "now": now})
                != 1
            ):
                raise self._lease_lost(run_id, epoch, 0.0, "park for approval")
            self._event(
                tx,
                run_id,
                "run_state",
                now=now,
                step_id=approval["step_id"],
                attempt_no=approval["attempt_no"],
                worker=worker,
                epoch=epoch,
                from_state=before["state"],
                to_state=to,
                decision="awaiting_approval" if to == RunState.AWAITING_APPROVAL else f"approval_{state.lower()}",
                detail={"approval": approval_id},
            )
        parked = self.runs.get_run(run_id)
        assert parked is not None
        return parked

    def _fence(self, tx: Tx, run_id: str, epoch: int, what: str) -> Row:
        run = tx.one("lock_run", {"id": run_id})
        if run is None or run["lease_epoch"] != epoch or run["state"] not in _LIVE_RUN:
            raise self._lease_lost(run_id, epoch, 0.0, what)
        return run

    # -- people -------------------------------------------------------------------------

    def decide(
        self, run_id: str, step_id: str, decision: str, *, who: str, reason: str | None = None
    ) -> ApprovalRecord:
        """A person's ``approve`` or ``reject`` of the step's PENDING approval, once only.

        Approved: a parked run is QUEUED (a worker holding the page sees it and dispatches).
        Rejected: a parked run ends FAILED; a worker holding the page ends the attempt
        FAILED_BEFORE_SEND and the run FAILED. Raises :class:`RunNotFound` for an unknown run, and
        :class:`UsageError` for an unknown step or an approval already decided or expired."""
        if decision not in ("approve", "reject"):
            raise UsageError(f"unknown decision {decision!r}")
        self.expire_due()
        now = self.c.now()
        with self.c.transaction() as tx:
            run = tx.one("lock_run", {"id": run_id})
            if run is None:
                raise RunNotFound(f"no run {run_id!r}")
            live = tx.one("latest_approval", {"run_id": run_id, "step_id": step_id})
            if live is None:
                raise UsageError(f"step {step_id!r} of run {run_id} has no approval to decide")
            if live["state"] != "PENDING":
                by = f" by {live['decided_by']}" if live["decided_by"] else ""
                raise UsageError(f"the approval of step {step_id!r} of run {run_id} is already {live['state']}{by}")
            state = "APPROVED" if decision == "approve" else "REJECTED"
            tx.execute("decide_approval", {"id": live["id"], "state": state, "now": now, "who": who, "reason": reason})
            detail = {
                "approval": live["id"],
                "who": who,
                "at": now,
                "fingerprint": live["fingerprint"],
                "reason": reason,
            }
            self._event(
                tx,
                run_id,
                "approval",
                now=now,
                step_id=step_id,
                attempt_no=live["attempt_no"],
                worker=who,
                decision=f"human:{'approved' if state == 'APPROVED' else 'rejected'}",
                detail=detail,
            )
            self._decide_run(tx, run, {**dict(live), "state": state, "decided_by": who, "reason": reason}, now, who)
            row = tx.one("get_approval", {"id": live["id"]})
        assert row is not None
        return ApprovalRecord.from_row(row)

    def _decide_run(self, tx: Tx, run: Row, approval: dict[str, Any], now: float, who: str | None) -> None:
        """A parked run follows its approval's decision."""
        if run["state"] != RunState.AWAITING_APPROVAL:
            return  # its worker holds the page and polls; or it was cancelled
        to, error = _run_after(approval["state"], approval)
        if tx.execute("approved_run", {"id": run["id"], "state": str(to), "error": error, "now": now}) == 1:
            self._event(
                tx,
                run["id"],
                "run_state",
                now=now,
                step_id=approval["step_id"],
                attempt_no=approval["attempt_no"],
                worker=who,
                from_state=RunState.AWAITING_APPROVAL,
                to_state=to,
                decision=f"approval_{approval['state'].lower()}",
                detail={"approval": approval["id"]},
            )

    def expire_due(self, limit: int = 100) -> int:
        """End every PENDING approval past its ``expires_at`` like a rejection (reason
        ``expired``): its parked run FAILED. Returns how many expired."""
        now = self.c.now()
        due = self.c.read("approvals_due", {"now": now, "limit": limit})
        expired = 0
        for row in due:
            with self.c.transaction() as tx:
                run = tx.one("lock_run", {"id": row["run_id"]})
                approval = tx.one("get_approval", {"id": row["id"]})
                if run is None or approval is None or approval["state"] != "PENDING":
                    continue
                self._expire(tx, approval, now)
                self._decide_run(tx, run, {**dict(approval), "state": "EXPIRED", "reason": "expired"}, now, None)
                expired += 1
        return expired

    def _expire(self, tx: Tx, approval: Row, now: float) -> str:
        tx.execute(
            "decide_approval",
            {"id": approval["id"], "state": "EXPIRED", "now": now, "who": "expiry", "reason": "expired"},
        )
        self._event(
            tx,
            approval["run_id"],
            "approval",
            now=now,
            step_id=approval["step_id"],
            attempt_no=approval["attempt_no"],
            decision="approval_expired",
            detail={"approval": approval["id"], "expires_at": approval["expires_at"]},
        )
        return "EXPIRED"

    @read_only
    def waiting(self, limit: int = 100) -> list[ApprovalRecord]:
        """PENDING approvals of live runs, oldest first."""
        return [ApprovalRecord.from_row(r) for r in self.c.read("approvals_waiting", {"limit": limit})]

    @read_only
    def awaiting_count(self) -> int:
        row = self.c.read_one("count_awaiting_approval", {})
        return 0 if row is None else int(row["n"])


def _run_after(state: str, approval: Row | dict[str, Any]) -> tuple[RunState, str | None]:
    """Where a parked run goes for its approval's state, and its error."""
    if state == "PENDING":
        return RunState.AWAITING_APPROVAL, None
    if state in ("APPROVED", "SUPERSEDED"):  # superseded with nothing live: a new attempt asks anew
        return RunState.QUEUED, None
    if state == "EXPIRED":
        return RunState.FAILED, f"the approval of {approval['step_id']} expired: nothing was sent"
    who, reason = approval["decided_by"], approval["reason"]
    return RunState.FAILED, (
        f"the approval of {approval['step_id']} was rejected by {who}"
        + (f": {reason}" if reason else "")
        + "; nothing was sent"
    )
