"""Helpers for the ops tests: drive a store into known states, back-dating instead of waiting."""

from __future__ import annotations

from typing import Any

from browserworker.states import AttemptState, RunState
from browserworker.store import NewRun, Owner, SQLStore, testing
from browserworker.store.records import AttemptRecord, RunRecord

ELSEWHERE = Owner("worker-elsewhere", "some-other-host", 4242)

#: A process (``python -c WRITER DB STOP``) that opens the store DB (a path or a URL), says
#: "ready" and enqueues runs w000000, w000001... until the file STOP exists.
WRITER = """
import sys, pathlib
from browserworker.store import NewRun, open_store
store = open_store(sys.argv[1])
stop = pathlib.Path(sys.argv[2])
i = 0
print("ready", flush=True)
while not stop.exists():
    store.enqueue(NewRun(id=f"w{i:06d}", flow_name="f", inputs={"i": i}))
    i += 1
store.close()
"""


def queued(
    store: SQLStore,
    run_id: str,
    *,
    queue: str = "default",
    age: float = 0.0,
    flow: str = "f",
    delay: float | None = None,
) -> RunRecord:
    """A QUEUED run, enqueued ``age`` seconds ago (and not claimable for ``delay`` more seconds)."""
    store.enqueue(
        NewRun(
            id=run_id, flow_name=flow, inputs={}, queue=queue, not_before=None if delay is None else store.now() + delay
        )
    )
    shift(store, "runs", "created_at", age, id=run_id)
    run = store.get_run(run_id)
    assert run is not None
    return run


def running(store: SQLStore, run_id: str, *, owner: Owner = ELSEWHERE, ttl: float = 30.0, **kw: Any) -> RunRecord:
    """A RUNNING run leased by ``owner``."""
    queued(store, run_id, **kw)
    run = store.claim_run(run_id, owner, ttl)
    assert run is not None
    store.set_run_state(run_id, run.lease_epoch, RunState.RUNNING, worker=owner.worker)
    return run


def dispatched(store: SQLStore, run: RunRecord, step: str = "submit") -> AttemptRecord:
    """An effect attempt with its intent and dispatch journaled, no outcome yet."""
    attempt = store.begin_attempt(run.id, run.lease_epoch, step, "effect", f"{run.id}/{step}", "fp")
    store.mark_dispatched(attempt, run.lease_epoch, "POST", "http://127.0.0.1:1/orders")
    return store.get_attempt(attempt.id)


def finish(store: SQLStore, attempt: AttemptRecord, epoch: int, state: AttemptState, by: str) -> AttemptRecord:
    return store.finish_attempt(attempt, epoch, state, decided_by=by, result={} if state == "SUCCEEDED" else None)


def succeed(store: SQLStore, run: RunRecord) -> None:
    store.set_run_state(run.id, run.lease_epoch, RunState.SUCCEEDED, worker=run.owner)


def shift(store: SQLStore, table: str, column: str, seconds: float, **where: Any) -> None:
    """Move ``column`` of the matching rows ``seconds`` into the past (browserworker.store.testing)."""
    if not seconds:
        return
    if table == "runs":
        testing.backdate(store, where["id"], seconds, column=column)
    elif (table, column) == ("attempts", "finished_at"):
        testing.backdate_attempts(store, seconds, **where)
    elif (table, column) == ("events", "at"):
        testing.backdate_events(store, where["run_id"], where["kind"], seconds)
    elif (table, column) == ("workers", "last_heartbeat"):
        testing.backdate_worker(store, where["id"], seconds)
    else:
        raise ValueError(f"no helper moves {table}.{column}")


def expire(store: SQLStore, run_id: str, *, detected_ago: float = 0.0) -> None:
    """Let the run's lease lapse and the reclaimer find it (``detected_ago`` seconds ago)."""
    shift(store, "runs", "lease_expires_at", 1000.0, id=run_id)
    assert [r.id for r in store.reclaim_expired(skew=0.0, max_lease_losses=5, worker="reclaimer")] == [run_id]
    shift(store, "events", "at", detected_ago, run_id=run_id, kind="lease_expired")
