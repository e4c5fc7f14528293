"""Runs: creating them, reading them, leasing one run, and its fenced state transitions."""

from __future__ import annotations

from .._canonical import canonical_json
from ..states import RUN_TRANSITIONS, RunState, check_run_transition
from .connector import Tx
from .limits import admit
from .manager import Manager, read_only
from .records import NewRun, Owner, RunRecord

__all__ = ["RunManager"]

# set_run_state's narrow updates (the generic query sets every column, so rewrites every index)
_STATE_QUERY = {
    RunState.RUNNING: "start_run",
    RunState.SUCCEEDED: "end_run",
    RunState.FAILED: "end_run",
    RunState.CANCELLED: "end_run",
    RunState.NEEDS_REVIEW: "end_run",
}

# states only one state may precede: set_run_state's single-statement path
_ONLY_FROM = {
    to: str(froms[0]) for to in RunState if len(froms := [s for s in RunState if to in RUN_TRANSITIONS[s]]) == 1
}


class RunManager(Manager):
    """The ``runs`` table on behalf of one run's holder (see :class:`~browserworker.store.base.Store`)."""

    def insert_run(self, tx: Tx, run: NewRun, now: float, detail: dict[str, object]) -> None:
        """Write a new QUEUED run and its ``run_created`` event in ``tx``."""
        tx.execute(
            "insert_run",
            {
                "id": run.id,
                "flow_name": run.flow_name,
                "flow_path": run.flow_path,
                "flow_hash": run.flow_hash,
                "inputs_json": canonical_json(dict(run.inputs)),
                "secret_fields": canonical_json(sorted(run.secret_fields)),
                "queue": run.queue,
                "priority": run.priority,
                "not_before": run.not_before,
                "now": now,
                "limit_key": run.limit_key or run.flow_name,
            },
        )
        self._event(tx, run.id, "run_created", now=now, to_state=RunState.QUEUED, detail=detail)

    def create_run(self, run: NewRun) -> RunRecord:
        now = self.c.now()
        with self.c.transaction() as tx:
            self.insert_run(tx, run, now, {"flow": run.flow_name, "queue": run.queue})
        created = self.get_run(run.id)
        assert created is not None
        return created

    @read_only
    def get_run(self, run_id: str) -> RunRecord | None:
        row = self.c.read_one("get_run", {"id": run_id})
        return None if row is None else RunRecord.from_row(row)

    @read_only
    def list_runs(self, state: RunState | None = None, limit: int = 100) -> list[RunRecord]:
        if state is None:
            rows = self.c.read("list_runs", {"limit": limit})
        else:
            rows = self.c.read("list_runs_in_state", {"state": str(state), "limit": limit})
        return [RunRecord.from_row(r) for r in rows]

    @read_only
    def search_runs(
        self,
        *,
        state: RunState | None = None,
        flow: str | None = None,
        queue: str | None = None,
        text: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[RunRecord], int]:
        """One page of runs (newest first) in ``state``, of ``flow``, on ``queue``, whose id is
        or starts with ``text`` or that journaled the request key ``text`` (None: any), and
        how many runs pass the filter in all."""
        params: dict[str, object] = {
            "state": None if state is None else str(state),
            "flow": flow,
            "queue": queue,
            "text": text,
            "prefix": None if text is None else text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%",
        }
        rows = self.c.read("search_runs", {**params, "limit": limit, "offset": offset})
        total = self.c.read_one("count_runs", params)
        return [RunRecord.from_row(r) for r in rows], 0 if total is None else int(total["n"])

    @read_only
    def run_flows(self) -> dict[str, int]:
        """Each flow that has runs, and how many."""
        return {r["flow_name"]: int(r["n"]) for r in self.c.read("run_flows", {})}

    def claim_run(
        self, run_id: str, owner: Owner, ttl: float, *, skew: float = 0.0, takeover_epoch: int | None = None
    ) -> RunRecord | None:
        """Atomically lease a run; None if someone else holds it. Bumps the lease epoch.

        A queued run is admitted by its limit key's budget (:class:`OverBudget` if it may not
        start now, nothing written); taking over a lease that expired or whose owner died is not
        a new admission."""
        with self.c.transaction() as tx:
            before = tx.one("lock_run", {"id": run_id})
            if before is None:
                return None
            # the clock read once the row is ours: a call that waited for a connection or the
            # lock must not store a lease that is already (nearly) over
            now = self.c.now()
            if before["state"] == RunState.QUEUED:  # a new admission (a takeover is not): its budget
                admit(tx, before["limit_key"], now)
            n = tx.execute(
                "claim_run",
                {
                    "id": run_id,
                    "owner": owner.worker,
                    "host": owner.host,
                    "pid": owner.pid,
                    "pid_start": owner.pid_start,
                    "now": now,
                    "ttl": ttl,
                    "skew": skew,
                    "takeover_epoch": -1 if takeover_epoch is None else takeover_epoch,
                },
            )
            if n != 1:
                return None
            old_state = before["state"]
            if old_state == RunState.QUEUED:
                decision = "claimed"
            elif takeover_epoch is not None and before["lease_epoch"] == takeover_epoch:
                decision = "owner_dead"
            else:
                decision = "lease_expired"
            self._event(
                tx,
                run_id,
                "lease_claimed",
                now=now,
                worker=owner.worker,
                epoch=before["lease_epoch"] + 1,
                from_state=old_state,
                to_state=RunState.LEASED,
                decision=decision,
                detail={"previous_owner": before["owner"], "previous_epoch": before["lease_epoch"], "ttl": ttl},
            )
        return self.get_run(run_id)

    def heartbeat(self, run_id: str, epoch: int, ttl: float) -> None:
        """Extend the lease; :class:`LeaseLost` if it is no longer ours or already expired."""
        with self.c.transaction() as tx:
            if tx.execute("heartbeat", {"id": run_id, "epoch": epoch, "now": self.c.now(), "ttl": ttl}) != 1:
                raise self._lease_lost(run_id, epoch, 0.0, "heartbeat")

    @read_only
    def cancel_requested(self, run_id: str) -> bool:
        """Whether someone asked to cancel the run (read at every step boundary: one column)."""
        row = self.c.read_one("run_cancel_requested", {"id": run_id})
        return bool(row and row["cancel_requested"])

    def set_run_state(
        self,
        run_id: str,
        epoch: int,
        state: RunState,
        *,
        worker: str | None = None,
        error: str | None = None,
        decision: str | None = None,
    ) -> RunRecord:
        """Move the run to ``state`` (fenced by ``epoch``); returns the run as it is now."""
        with self.c.transaction() as tx:
            self._move_run(tx, run_id, epoch, state, worker, error, decision)
            row = tx.one("get_run", {"id": run_id})
        assert row is not None
        return RunRecord.from_row(row)

    def advance_run(
        self,
        run_id: str,
        epoch: int,
        state: RunState,
        *,
        worker: str | None = None,
        error: str | None = None,
        decision: str | None = None,
    ) -> None:
        """:meth:`set_run_state` for a caller that does not use the run afterwards (the
        executor's RUNNING transition): the same write, without reading 25 columns back."""
        with self.c.transaction() as tx:
            self._move_run(tx, run_id, epoch, state, worker, error, decision)

    def _move_run(
        self,
        tx: Tx,
        run_id: str,
        epoch: int,
        state: RunState,
        worker: str | None,
        error: str | None,
        decision: str | None,
    ) -> None:
        """The fenced transition and its event, in the caller's transaction.

        A state with one legal predecessor (RUNNING, SUCCEEDED: the happy path) is tried as a
        single update conditioned on that predecessor; only when it matches nothing is the run
        read, to tell an illegal transition (ValueError) from a lost lease.
        """
        now = self.c.now()
        only_from = _ONLY_FROM.get(state)
        params = {
            "id": run_id,
            "epoch": epoch,
            "state": str(state),
            "error": error,
            "now": now,
            "from_state": only_from,
        }
        query = _STATE_QUERY.get(state, "set_run_state")
        from_state = only_from
        if only_from is None or tx.execute(query, params) != 1:
            before = tx.one("run_fence", {"id": run_id})
            if before is not None and before["lease_epoch"] == epoch:
                check_run_transition(RunState(before["state"]), state)
            from_state = before["state"] if before else None
            params["from_state"] = None
            if tx.execute(query, params) != 1:
                raise self._lease_lost(run_id, epoch, 0.0, f"set run state {state}")
        self._event(
            tx,
            run_id,
            "run_state",
            now=now,
            worker=worker,
            epoch=epoch,
            from_state=from_state,
            to_state=state,
            decision=decision,
            detail={"error": error} if error else None,
        )

    def clear_reconcile(self, run_id: str, epoch: int) -> None:
        with self.c.transaction() as tx:
            tx.execute("clear_reconcile", {"id": run_id, "epoch": epoch, "now": self.c.now()})
