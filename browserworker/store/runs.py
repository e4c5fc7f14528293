"""Runs: creating them, reading them, leasing one run, and its fenced state transitions."""

from __future__ import annotations

from typing import Any, NamedTuple

from .._canonical import canonical_json
from ..states import RUN_TRANSITIONS, RunState, check_run_transition
from .coalesce import coalesced
from .connector import Row, Tx
from .limits import admit
from .manager import Manager, lease_params, read_only
from .records import NewRun, Owner, RunRecord

__all__ = ["Beat", "Move", "RunManager"]


class Move(NamedTuple):
    """One call of :meth:`RunManager.set_run_state` or :meth:`RunManager.advance_run`."""

    run_id: str
    epoch: int
    state: RunState
    worker: str | None = None
    error: str | None = None
    decision: str | None = None


class Beat(NamedTuple):
    """One call of :meth:`RunManager.heartbeat`."""

    run_id: str
    epoch: int
    ttl: float


def _run_of(call: Move | Beat) -> str:
    return call.run_id


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
                    **lease_params(owner, now, ttl),
                    "id": run_id,
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

    @coalesced(Beat, "heartbeats", key=_run_of)
    def heartbeat(self, run_id: str, epoch: int, ttl: float) -> None:
        """Extend the lease; :class:`LeaseLost` if it is no longer ours or already expired."""
        self.heartbeats([Beat(run_id, epoch, ttl)])

    def heartbeats(self, beats: list[Beat]) -> list[None]:
        """:meth:`heartbeat` of many leases in one transaction (raises for the first one lost)."""
        with self.c.transaction() as tx:
            now = self.c.now()
            params = [{"id": b.run_id, "epoch": b.epoch, "now": now, "ttl": b.ttl} for b in beats]
            for beat, n in zip(beats, tx.execute_each("heartbeat", params), strict=True):
                if n != 1:
                    raise self._lease_lost(beat.run_id, beat.epoch, 0.0, "heartbeat")
        return [None] * len(beats)

    @read_only
    def cancel_requested(self, run_id: str) -> bool:
        """Whether someone asked to cancel the run (read at every step boundary: one column)."""
        row = self.c.read_one("run_cancel_requested", {"id": run_id})
        return bool(row and row["cancel_requested"])

    @coalesced(Move, "set_run_states", key=_run_of)
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
        return self.set_run_states([Move(run_id, epoch, state, worker, error, decision)])[0]

    def set_run_states(self, moves: list[Move]) -> list[RunRecord]:
        """:meth:`set_run_state` of many runs in one transaction (raises for the first that fails)."""
        with self.c.transaction() as tx:
            rows = self._move_runs(tx, moves, read=True)
        records = []
        for row in rows:
            assert row is not None  # it was just updated, in this transaction
            records.append(RunRecord.from_row(row))
        return records

    @coalesced(Move, "advance_runs", key=_run_of)
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
        self.advance_runs([Move(run_id, epoch, state, worker, error, decision)])

    def advance_runs(self, moves: list[Move]) -> list[None]:
        """:meth:`advance_run` of many runs in one transaction (raises for the first that fails)."""
        with self.c.transaction() as tx:
            self._move_runs(tx, moves)
        return [None] * len(moves)

    def _move_runs(self, tx: Tx, moves: list[Move], *, read: bool = False) -> list[Row | None]:
        """The fenced transitions and their events, in the caller's transaction; with ``read``,
        each run's row after it (else Nones).

        A state with one legal predecessor (RUNNING, SUCCEEDED: the happy path) is tried as a
        single update conditioned on that predecessor; only when it matches nothing is the run
        read, to tell an illegal transition (ValueError) from a lost lease.
        """
        now = self.c.now()
        params: list[dict[str, Any]] = [
            {
                "id": m.run_id,
                "epoch": m.epoch,
                "state": str(m.state),
                "error": m.error,
                "now": now,
                "from_state": _ONLY_FROM.get(m.state),
            }
            for m in moves
        ]
        rows: list[Row | None] = [None] * len(moves)
        moved = [False] * len(moves)
        by_query: dict[str, list[int]] = {}
        for at, m in enumerate(moves):
            if params[at]["from_state"] is not None:
                by_query.setdefault(_STATE_QUERY.get(m.state, "set_run_state"), []).append(at)
        for query, ats in by_query.items():
            if read:
                for at, row in zip(ats, tx.changed_each(query, [params[at] for at in ats], "get_run"), strict=True):
                    moved[at], rows[at] = row is not None, row
            else:
                for at, n in zip(ats, tx.execute_each(query, [params[at] for at in ats]), strict=True):
                    moved[at] = n == 1
        for at, m in enumerate(moves):
            from_state = params[at]["from_state"] if moved[at] else self._move_checked(tx, m, params[at])
            if read and not moved[at]:
                rows[at] = tx.one("get_run", {"id": m.run_id})
            self._event(
                tx,
                m.run_id,
                "run_state",
                now=now,
                worker=m.worker,
                epoch=m.epoch,
                from_state=from_state,
                to_state=m.state,
                decision=m.decision,
                detail={"error": m.error} if m.error else None,
            )
        return rows

    def _move_checked(self, tx: Tx, move: Move, params: dict[str, Any]) -> str | None:
        """A transition its single update did not make: the run read (ValueError for an illegal
        transition), then updated from whatever state it is in; its state before."""
        before = tx.one("run_fence", {"id": move.run_id})
        if before is not None and before["lease_epoch"] == move.epoch:
            check_run_transition(RunState(before["state"]), move.state)
        params = {**params, "from_state": None}
        if tx.execute(_STATE_QUERY.get(move.state, "set_run_state"), params) != 1:
            raise self._lease_lost(move.run_id, move.epoch, 0.0, f"set run state {move.state}")
        return None if before is None else str(before["state"])

    def clear_reconcile(self, run_id: str, epoch: int) -> None:
        with self.c.transaction() as tx:
            tx.execute("clear_reconcile", {"id": run_id, "epoch": epoch, "now": self.c.now()})
