"""Operations: the typed reads behind metrics, ``status``, ``health`` and restore, and the
restore's fence. Each read is an index range or a covering-index scan (``0003_ops.sql``);
ages and windows are taken against the caller's ``now`` (the store's clock)."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from .manager import Manager, read_only
from .records import (
    DuplicatePrevented,
    LiveLease,
    QueueBacklog,
    QueueWait,
    Reconciliation,
    RestoreFence,
    StateCount,
    StepUnknowns,
    UnknownOpen,
    WorkerLoad,
    WorkerRecord,
    _fields,
)

__all__ = ["OpsManager"]


R = TypeVar("R")
_WAITS = {"dispatch": "ops_dispatch_ages", "completion": "ops_completion_ages"}


class OpsManager(Manager):
    """Read-only views of the whole store, and the fence a restored journal needs."""

    def _rows(self, cls: type[R], query: str, **params: Any) -> list[R]:
        return [cls(**_fields(r)) for r in self.c.read(query, params)]

    @read_only
    def runs_by_state(self) -> list[StateCount]:
        return self._rows(StateCount, "ops_runs_by_state")

    @read_only
    def queue_backlog(self, now: float) -> list[QueueBacklog]:
        return self._rows(QueueBacklog, "ops_queued", now=now)

    @read_only
    def unknown_open(self, since: float) -> list[UnknownOpen]:
        return self._rows(UnknownOpen, "ops_unknown_open", since=since)

    @read_only
    def unknown_classified(self, since: float) -> list[StepUnknowns]:
        return self._rows(StepUnknowns, "ops_unknown_classified", since=since)

    @read_only
    def duplicates_prevented(self) -> list[DuplicatePrevented]:
        return self._rows(DuplicatePrevented, "ops_duplicates_prevented")

    @read_only
    def lease_expiries(self, since: float) -> tuple[int, int]:
        """Lost leases found by the reclaimer: ever, and since ``since``."""
        row = self.c.read_one("ops_lease_expiries", {"since": since})
        return (0, 0) if row is None else (int(row["total"]), int(row["recent"]))

    @read_only
    def event_times(self, since: float) -> list[tuple[str, float]]:
        """``("lease_expired" | "duplicate_prevented", at)`` of each such event since ``since``."""
        return [(str(r["what"]), float(r["at"])) for r in self.c.read("ops_event_times", {"since": since})]

    @read_only
    def reconciliations(self) -> list[Reconciliation]:
        return self._rows(Reconciliation, "ops_reconciliations")

    @read_only
    def queue_waits(self, kind: Literal["dispatch", "completion"], lo: float, hi: float) -> list[QueueWait]:
        """How long each run started (``dispatch``) or SUCCEEDED (``completion``) in (lo, hi]
        had waited since it became claimable, by queue."""
        return self._rows(QueueWait, _WAITS[kind], lo=lo, hi=hi)

    @read_only
    def worker_loads(self, since: float, gone_since: float) -> list[WorkerLoad]:
        """Workers not stopped (or stopped since ``since``) that heartbeated after
        ``gone_since``, with the number of runs each holds now."""
        loads = []
        for row in self.c.read("ops_workers", {"since": since, "gone_since": gone_since}):
            data = _fields(row)
            leased = data.pop("leased")
            loads.append(WorkerLoad(WorkerRecord.from_row(data), int(leased)))
        return loads

    @read_only
    def live_workers(self, since: float) -> list[WorkerRecord]:
        """Workers that claim to be running and heartbeated after ``since``."""
        return [WorkerRecord.from_row(r) for r in self.c.read("ops_live_workers", {"since": since})]

    @read_only
    def live_leases(self, now: float) -> list[LiveLease]:
        """Runs whose lease has not expired at ``now`` (their owner may still be working)."""
        return self._rows(LiveLease, "ops_live_leases", now=now)

    def fence_restored(self, *, stop_workers: bool = True) -> RestoreFence:
        """Make a freshly restored journal safe to resume, in one transaction: every leased run
        goes back to the queue (its owner is gone; epoch + 1 fences it off), every unfinished
        run is flagged for reconciliation and gets a ``restored`` event, and (``stop_workers``)
        every registered worker is marked stopped."""
        now = self.c.now()
        last = self.c.read_one("ops_last_event", {})
        last_event = None if last is None else float(last["at"])
        requeued = []
        with self.c.transaction() as tx:
            unfinished = tx.rows("ops_unfinished_runs", {})
            for run in unfinished:
                moved = tx.execute("ops_restore_requeue", {"id": run["id"], "now": now}) == 1
                if moved:
                    requeued.append(run["id"])
                else:
                    tx.execute("ops_restore_flag", {"id": run["id"], "now": now})
                self._event(
                    tx,
                    run["id"],
                    "restored",
                    now=now,
                    epoch=run["lease_epoch"] + 1 if moved else run["lease_epoch"],
                    from_state=run["state"],
                    to_state="QUEUED" if moved else run["state"],
                    decision="restored_from_backup",
                    detail={"previous_owner": run["owner"], "backup_last_event_at": last_event, "restored_at": now},
                )
            if stop_workers:
                tx.execute("ops_restore_stop_workers", {"now": now})
        return RestoreFence(requeued, len(unfinished), last_event)
