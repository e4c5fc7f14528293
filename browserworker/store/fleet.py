"""The fleet: queues and their limits, claims, reclaiming lost leases, releases, the worker registry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .._canonical import canonical_json
from ..errors import OverBudget, QueueFull, UsageError
from ..states import RunState
from .coalesce import coalesced
from .connector import Connector, Row, Tx
from .limits import admit
from .manager import Manager, lease_params, read_only
from .records import NewRun, Owner, RunRecord, WorkerRecord
from .runs import RunManager

__all__ = ["Claim", "FleetManager"]

STUCK_SESSION = 5.0
"""Seconds a database session may sit inside a transaction, waiting on its client, before the
reclaimer ends it to free the runs it holds (PostgreSQL's ``idle_in_transaction_session_timeout``
of the store's sessions, for the waits that timeout does not see)."""
_ADMISSION_TRIES = 8  # candidates a claim may find over budget under their key's lock before it gives up
_BUSY = object()


class Claim(NamedTuple):
    """One call of :meth:`FleetManager.claim_next`."""

    owner: Owner
    queues: Sequence[str]
    ttl: float
    start: bool = False


def _claim_key(claim: Claim) -> object:
    """Claims act on no run the caller knows: a key of its own, so many share one call."""
    return object()


class FleetManager(Manager):
    """Many runs and many workers (fenced as :mod:`.manager` says)."""

    def __init__(self, connector: Connector, runs: RunManager) -> None:
        super().__init__(connector)
        self.runs = runs

    def enqueue(self, run: NewRun) -> RunRecord:
        """Create a queued run, refusing (:class:`QueueFull`, nothing written) past the queue's max depth."""
        now = self.c.now()
        with self.c.transaction() as tx:
            limit = tx.one("get_queue", {"name": run.queue})
            if limit is not None and limit["max_depth"] is not None:
                depth = tx.one("queued_depth", {"queue": run.queue})["depth"]  # type: ignore[index]
                if depth >= limit["max_depth"]:
                    raise QueueFull(
                        f"queue {run.queue!r} is full ({depth} queued, max depth {limit['max_depth']}); "
                        "nothing was enqueued"
                    )
            if tx.one("get_run", {"id": run.id}) is not None:
                raise UsageError(f"a run with id {run.id!r} already exists")
            self.runs.insert_run(
                tx,
                run,
                now,
                {"flow": run.flow_name, "queue": run.queue, "priority": run.priority, "not_before": run.not_before},
            )
        created = self.runs.get_run(run.id)
        assert created is not None
        return created

    def set_queue_limit(self, queue: str, max_depth: int | None) -> None:
        with self.c.transaction() as tx:
            tx.execute("set_queue", {"name": queue, "max_depth": max_depth})

    @read_only
    def queue_limits(self) -> dict[str, int | None]:
        return {r["name"]: r["max_depth"] for r in self.c.read("list_queues", {})}

    @coalesced(Claim, "claim_each", key=_claim_key)
    def claim_next(self, owner: Owner, queues: Sequence[str], ttl: float, *, start: bool = False) -> RunRecord | None:
        """Atomically lease the next run of ``queues``: highest priority, then oldest, of the
        runs whose limit key's budget lets them start (:mod:`browserworker.store.limit_rules`).

        With ``start``, the caller begins the run at once: a run leased for the first time
        (:attr:`~.records.RunRecord.fresh`) is RUNNING when the claim commits, one write of its
        row fewer, and its journal holds the claim and the start as two events, as if the caller
        had started it. A run leased before stays LEASED (its journal is read first)."""
        return self.claim_each([Claim(owner, queues, ttl, start)])[0]

    def claim_each(self, claims: list[Claim]) -> list[RunRecord | None]:
        """:meth:`claim_next` for many slots in one transaction: each the next run or None.
        Claims of one owner, queue and TTL read their runs in one statement when none of them
        has a budget; a budget is admitted one run at a time, under its key's lock."""
        out: list[RunRecord | None] = [None] * len(claims)
        slots: dict[tuple[Owner, tuple[str, ...], float, bool], list[int]] = {}
        for at, claim in enumerate(claims):
            slots.setdefault((claim.owner, tuple(claim.queues), claim.ttl, claim.start), []).append(at)
        with self.c.transaction() as tx:
            # the clock read inside the transaction: a claim that waited for a connection (the
            # database unreachable for a while) must not store a lease that is already over
            now = self.c.now()
            for (owner, queues, ttl, start), ats in slots.items():
                lease = lease_params(owner, now, ttl, start=start)
                ids = self._unlimited_next(tx, queues, now, len(ats))
                if ids is not None:
                    runs = self._claim_ids(tx, lease, ids)
                else:
                    runs = []
                    for _ in ats:
                        run = self._claim_admitted(tx, lease, queues)
                        if run is None:
                            break
                        runs.append(run)
                for at, run in zip(ats, runs, strict=False):
                    out[at] = run
        return out

    def _unlimited_next(self, tx: Tx, queues: Sequence[str], now: float, n: int) -> list[str] | None:
        """The ids of the next ``n`` runs of a single queue if no budget applies to any of them;
        None if one does (or there are several queues): then they are taken one at a time."""
        if len(queues) != 1:
            return None
        rows = tx.rows("next_queued_ids", {"queue": queues[0], "now": now, "n": n})
        if any(row["limited"] for row in rows):
            return None
        return [row["id"] for row in rows]

    def _claim_admitted(self, tx: Tx, lease: dict[str, Any], queues: Sequence[str]) -> RunRecord | None:
        """Lease (:func:`~.manager.lease_params`) the next run its budget admits, or None."""
        for _ in range(_ADMISSION_TRIES):
            run_id = self._candidate(tx, queues, lease["now"])
            if run_id is None:
                return None
            if isinstance(run_id, str):
                claimed = self._claim_ids(tx, lease, [run_id])
                return claimed[0] if claimed else None
        return None

    def _claim_ids(self, tx: Tx, lease: dict[str, Any], ids: list[str]) -> list[RunRecord]:
        """Lease (:func:`~.manager.lease_params`) the QUEUED runs ``ids`` (each update conditioned
        on QUEUED: a run somebody took meanwhile is left out) and journal each claim."""
        taken = tx.changed_each("claim_queued_by_id", [{**lease, "id": run_id} for run_id in ids], "get_run")
        now = lease["now"]
        runs = []
        for row in taken:
            if row is None:  # somebody took it meanwhile
                continue
            events: list[tuple[str, RunState, RunState, str, dict[str, Any] | None]] = [
                (
                    "lease_claimed",
                    RunState.QUEUED,
                    RunState.LEASED,
                    "claimed",
                    {"ttl": lease["ttl"], "waited": now - row["created_at"]},
                )
            ]
            if row["state"] == RunState.RUNNING:  # started in the claim (claim_next's start)
                events.append(("run_state", RunState.LEASED, RunState.RUNNING, "started", None))
            for kind, from_state, to_state, decision, detail in events:
                self._event(
                    tx,
                    row["id"],
                    kind,
                    now=now,
                    worker=row["owner"],
                    epoch=row["lease_epoch"],
                    from_state=from_state,
                    to_state=to_state,
                    decision=decision,
                    detail=detail,
                )
            runs.append(RunRecord.from_row(row))
        return runs

    def _candidate(self, tx: Tx, queues: Sequence[str], now: float) -> str | None | object:
        """The id of the next run to claim (None: none eligible); :data:`_BUSY` when its key's
        budget, re-checked under the key's lock, was taken by a concurrent claim meanwhile
        (the next query no longer offers that key)."""
        if len(queues) == 1:
            best = tx.one("next_queued_ids", {"queue": queues[0], "now": now, "n": 1})
        else:
            best = None
            for queue in queues:
                cand = tx.one("next_queued_full", {"queue": queue, "now": now})
                if cand is not None and (
                    best is None
                    or (-cand["priority"], cand["created_at"], cand["id"])
                    < (-best["priority"], best["created_at"], best["id"])
                ):
                    best = cand
        if best is None:
            return None
        if best["limited"]:
            try:
                admit(tx, best["limit_key"], now)
            except OverBudget:
                return _BUSY
        chosen: str = best["id"]
        return chosen

    def reclaim_expired(
        self,
        *,
        skew: float,
        max_lease_losses: int,
        worker: str | None = None,
        limit: int = 100,
        stuck: float = STUCK_SESSION,
    ) -> list[RunRecord]:
        """Send runs whose lease expired (plus ``skew``) back to QUEUED, flagged for reconciliation.

        A run that has lost its lease more than ``max_lease_losses`` times goes to NEEDS_REVIEW
        instead (a poison run). The owning worker is marked unhealthy. A run whose old owner is
        still writing it is passed by; if its lease expired more than ``stuck`` seconds ago, the
        store's sessions stuck that long inside a transaction are ended (a frozen client's
        transaction rolls back and lets the run go: the next pass takes it).
        """
        now = self.c.now()
        reclaimed = []
        passed_by = False
        for row in self.c.read("expired_leases", {"now": now, "skew": skew, "limit": limit}):
            poison = f"lost its lease {row['lease_losses'] + 1} times (last owner {row['owner']})"
            if self._requeue(
                row,
                "requeue_expired",
                {"skew": skew},
                now=now,
                worker=worker,
                max_lease_losses=max_lease_losses,
                poison=poison,
                decision="requeued",
                detail={},
            ):
                reclaimed.append(self.runs.get_run(row["id"]))
            elif row["lease_expires_at"] < now - skew - stuck:
                passed_by = True
        if passed_by:
            self.c.read_one("end_stuck_sessions", {"stuck": stuck})
        return [r for r in reclaimed if r is not None]

    @read_only
    def next_expiry_in(self) -> float | None:
        """Seconds until the earliest lease of a LEASED or RUNNING run expires, by the store's
        clock (negative once it has); None if no lease is held."""
        row = self.c.read_one("next_lease_expiry", {})
        return None if row is None or row["at"] is None else float(row["at"]) - self.c.now()

    def reclaim_dead_owners(
        self, host: str, is_gone: Callable[[RunRecord], bool], *, max_lease_losses: int, worker: str | None = None
    ) -> list[RunRecord]:
        """Requeue runs held on ``host`` by owners ``is_gone`` proves dead, without waiting for
        expiry; ``owner_stopped_at`` is now, for the settle rule. The runs of ``worker`` (the
        caller, alive) are not looked at."""
        reclaimed = []
        for row in self.c.read("owned_on_host", {"host": host, "worker": worker}):
            if not is_gone(RunRecord.from_row(row)):
                continue
            if self._requeue(
                row,
                "requeue_dead_owner",
                {},
                now=self.c.now(),
                worker=worker,
                max_lease_losses=max_lease_losses,
                poison=f"lost its owner {row['lease_losses'] + 1} times",
                decision="owner_dead",
                detail={"owner_pid": row["owner_pid"]},
            ):
                again = self.runs.get_run(row["id"])
                if again is not None:
                    reclaimed.append(again)
        return reclaimed

    def _requeue(
        self,
        row: Row,
        query: str,
        extra: dict[str, object],
        *,
        now: float,
        worker: str | None,
        max_lease_losses: int,
        poison: str,
        decision: str,
        detail: dict[str, object],
    ) -> bool:
        """Hand a run whose owner lost it back to the queue (or to review once it was lost more
        than ``max_lease_losses`` times, with the error ``poison``), fenced by the epoch it was
        read at; False if it was renewed or taken meanwhile. The owner is marked unhealthy."""
        losses = row["lease_losses"] + 1
        to_review = losses > max_lease_losses
        state = RunState.NEEDS_REVIEW if to_review else RunState.QUEUED
        error = poison if to_review else None
        with self.c.transaction() as tx:
            if tx.one("lock_run_if_free", {"id": row["id"]}) is None:  # its owner is writing: next pass
                return False
            if not to_review and tx.one("pending_approval_of_run", {"run_id": row["id"]}) is not None:
                state = RunState.AWAITING_APPROVAL  # it died waiting for a person: the run waits on
            if (
                tx.execute(
                    query,
                    {
                        "id": row["id"],
                        "epoch": row["lease_epoch"],
                        "state": str(state),
                        "error": error,
                        "now": now,
                        **extra,
                    },
                )
                != 1
            ):
                return False
            self._event(
                tx,
                row["id"],
                "lease_expired",
                now=now,
                worker=worker,
                epoch=row["lease_epoch"] + 1,
                from_state=row["state"],
                to_state=state,
                decision="poison" if to_review else decision,
                detail={
                    "previous_owner": row["owner"],
                    "expired_at": row["lease_expires_at"],
                    "detected_at": now,
                    **detail,
                    "lease_losses": losses,
                },
            )
            if row["owner"]:
                tx.execute("mark_worker", {"id": row["owner"], "health": "unhealthy", "now": now})
        return True

    def release_run(self, run_id: str, epoch: int, *, worker: str | None = None, decision: str = "released") -> None:
        """Hand a run back (QUEUED now, no expiry wait); bumps the epoch so this owner is fenced off."""
        now = self.c.now()
        with self.c.transaction() as tx:
            before = tx.one("lock_run", {"id": run_id})
            if tx.execute("release_run", {"id": run_id, "epoch": epoch, "now": now}) != 1:
                raise self._lease_lost(run_id, epoch, 0.0, "release")
            assert before is not None
            self._event(
                tx,
                run_id,
                "lease_released",
                now=now,
                worker=worker,
                epoch=epoch,
                from_state=before["state"],
                to_state=RunState.QUEUED,
                decision=decision,
            )

    def register_worker(self, owner: Owner, queues: Sequence[str], concurrency: int) -> None:
        with self.c.transaction() as tx:
            tx.execute(
                "register_worker",
                {
                    "id": owner.worker,
                    "host": owner.host,
                    "pid": owner.pid,
                    "pid_start": owner.pid_start,
                    "queues": canonical_json(list(queues)),
                    "concurrency": concurrency,
                    "now": self.c.now(),
                },
            )

    def worker_heartbeat(self, worker_id: str) -> None:
        with self.c.transaction() as tx:
            tx.execute("worker_heartbeat", {"id": worker_id, "now": self.c.now()})

    def mark_worker(self, worker_id: str, health: str) -> None:
        with self.c.transaction() as tx:
            tx.execute("mark_worker", {"id": worker_id, "health": health, "now": self.c.now()})

    @read_only
    def workers(self) -> list[WorkerRecord]:
        return [WorkerRecord.from_row(r) for r in self.c.read("list_workers", {})]
