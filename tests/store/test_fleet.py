"""Queue, lease and reclaim logic of the store, tested without sleeps by back-dating leases."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from browserworker.errors import LeaseLost, QueueFull, UsageError
from browserworker.states import AttemptState, RunState
from browserworker.store import NewRun, Owner, SQLStore, open_store
from browserworker.store.testing import backdate

A = Owner("worker-a", "host", 1)
B = Owner("worker-b", "host", 2)


@pytest.fixture
def store(any_store: SQLStore) -> SQLStore:
    return any_store


def add(store: SQLStore, run_id: str, **kw: object) -> None:
    store.enqueue(NewRun(id=run_id, flow_name="f", inputs={}, **kw))  # type: ignore[arg-type]


def test_claims_go_by_priority_then_age(store: SQLStore) -> None:
    """Higher priority first; equal priority oldest first; a delayed run waits."""
    add(store, "old-low")
    add(store, "new-high", priority=5)
    add(store, "newer-high", priority=5)
    add(store, "delayed", priority=9, not_before=store.now() + 60)
    claimed = [store.claim_next(A, ["default"], ttl=30) for _ in range(4)]
    assert [c.id if c else None for c in claimed] == ["new-high", "newer-high", "old-low", None]
    backdate(store, "delayed", 61, column="not_before")
    assert store.claim_next(A, ["default"], ttl=30).id == "delayed"


def test_claims_only_from_served_queues(store: SQLStore) -> None:
    """A worker claims only from its queues."""
    add(store, "x", queue="other")
    assert store.claim_next(A, ["default"], ttl=30) is None
    assert store.claim_next(A, ["default", "other"], ttl=30).id == "x"


def test_backpressure_refuses_and_writes_nothing(store: SQLStore) -> None:
    """Past the queue's max depth enqueue raises QueueFull and writes nothing."""
    store.set_queue_limit("default", 2)
    add(store, "a")
    add(store, "b")
    with pytest.raises(QueueFull, match="max depth 2"):
        add(store, "c")
    assert store.get_run("c") is None
    store.claim_next(A, ["default"], ttl=30)  # depth counts QUEUED runs only
    add(store, "c")


def test_duplicate_run_id_is_refused(store: SQLStore) -> None:
    """Enqueueing an id twice is a usage error."""
    add(store, "a")
    with pytest.raises(UsageError, match="already exists"):
        add(store, "a")


def test_reclaim_expired_requeues_and_fences_the_old_owner(store: SQLStore) -> None:
    """An expired lease (past the skew) goes back to QUEUED, flagged; the old owner is fenced
    off and marked unhealthy; the event records when expiry was detected."""
    store.register_worker(A, ["default"], 1)
    add(store, "r")
    run = store.claim_next(A, ["default"], ttl=30)
    attempt = store.begin_attempt("r", run.lease_epoch, "submit", "effect", "r/submit", "fp", margin=5)
    backdate(store, "r", 31, column="lease_expires_at")
    assert store.reclaim_expired(skew=2, max_lease_losses=3) == []  # within the skew tolerance
    backdate(store, "r", 2, column="lease_expires_at")
    [back] = store.reclaim_expired(skew=2, max_lease_losses=3, worker="worker-b")
    assert back.state == RunState.QUEUED and back.needs_reconcile and back.lease_epoch == run.lease_epoch + 1
    assert back.owner is None and back.owner_stopped_at is not None and back.lease_losses == 1
    with pytest.raises(LeaseLost):
        store.mark_dispatched(attempt, run.lease_epoch, "POST", "http://x", margin=0)
    [worker] = store.workers()
    assert worker.health == "unhealthy"
    [event] = [e for e in store.events("r") if e.kind == "lease_expired"]
    assert event.decision == "requeued" and event.detail["previous_owner"] == "worker-a"
    again = store.claim_next(B, ["default"], ttl=30)
    assert again.id == "r" and again.lease_epoch == back.lease_epoch + 1


def test_a_run_that_keeps_losing_its_lease_goes_to_review(store: SQLStore) -> None:
    """Poison runs stop looping: past max_lease_losses they go to NEEDS_REVIEW."""
    add(store, "p")
    for _ in range(2):
        store.claim_next(A, ["default"], ttl=30)
        backdate(store, "p", 100, column="lease_expires_at")
        store.reclaim_expired(skew=0, max_lease_losses=2)
    store.claim_next(A, ["default"], ttl=30)
    backdate(store, "p", 100, column="lease_expires_at")
    [poison] = store.reclaim_expired(skew=0, max_lease_losses=2)
    assert poison.state == RunState.NEEDS_REVIEW and "lost its lease 3 times" in poison.error


def test_release_hands_the_run_back_at_once(store: SQLStore) -> None:
    """A released run is claimable immediately by another worker; the releaser is fenced off."""
    add(store, "r")
    run = store.claim_next(A, ["default"], ttl=300)
    store.release_run("r", run.lease_epoch, worker="worker-a")
    taken = store.claim_next(B, ["default"], ttl=30)
    assert taken.id == "r" and taken.owner == "worker-b"
    with pytest.raises(LeaseLost):
        store.heartbeat("r", run.lease_epoch, ttl=30)


def test_cancel(store: SQLStore) -> None:
    """Queued → CANCELLED at once; leased → a request honoured at the next step boundary."""
    add(store, "q")
    add(store, "r")
    assert store.cancel("q") == "cancelled" and store.get_run("q").state == RunState.CANCELLED
    store.claim_next(A, ["default"], ttl=30)
    assert store.cancel("r") == "requested"
    assert store.get_run("r").cancel_requested and store.get_run("r").state == RunState.LEASED
    assert store.cancel_requested("r") and not store.cancel_requested("nope")  # the step boundary's narrow read
    assert store.cancel("q") == "CANCELLED"
    with pytest.raises(UsageError):
        store.cancel("nope")


def park(store: SQLStore, run_id: str) -> None:
    add(store, run_id)
    run = store.claim_run(run_id, A, ttl=30)
    attempt = store.begin_attempt(run_id, run.lease_epoch, "submit", "effect", f"{run_id}/submit", "fp")
    store.mark_dispatched(attempt, run.lease_epoch, "POST", "http://x", margin=0)
    store.finish_attempt(attempt, run.lease_epoch, AttemptState.UNKNOWN, decided_by="no_proof")
    store.set_run_state(run_id, run.lease_epoch, RunState.NEEDS_REVIEW)


def test_resolve_done_requeues_with_the_result(store: SQLStore) -> None:
    """--done journals who decided and the result, and re-queues the run."""
    park(store, "r")
    run = store.resolve("r", "submit", "done", result={"order_id": "7"}, who="alice")
    assert run.state == RunState.QUEUED
    attempt = store.latest_attempt("r", "submit")
    assert (attempt.state, attempt.decided_by, attempt.result) == (
        AttemptState.SUCCEEDED,
        "human:alice",
        {"order_id": "7"},
    )
    assert attempt.evidence["who"] == "alice"


def test_resolve_not_done_and_failed(store: SQLStore) -> None:
    """--not-done marks the attempt for replay; --failed ends the run; others are refused."""
    park(store, "a")
    store.resolve("a", "submit", "not_done", who="bob")
    assert store.latest_attempt("a", "submit").state == AttemptState.NOT_DONE
    park(store, "b")
    assert store.resolve("b", "submit", "failed", who="bob").state == RunState.FAILED
    with pytest.raises(UsageError, match="not NEEDS_REVIEW"):
        store.resolve("b", "submit", "done", who="bob")


def _claim_all(target: str, name: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    os.environ["BROWSERWORKER_BUSY_TIMEOUT"] = "30"  # a loaded machine: wait long for the others' locks
    store = open_store(target)
    owner = Owner(name, "host", 0)
    got = []
    while (run := store.claim_next(owner, ["default"], ttl=300)) is not None:
        got.append(run.id)
    out.put(got)


def test_concurrent_claims_never_share_a_run(store_target: str) -> None:
    """Three processes claiming from one database: every run claimed exactly once."""
    store = open_store(store_target)
    for i in range(300):
        add(store, f"r{i}")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(store_target, f"w{i}", out)) for i in range(3)]
    for p in procs:
        p.start()
    claimed = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    flat = [r for got in claimed for r in got]
    assert len(flat) == len(set(flat)) == 300
    assert all(r.lease_epoch == 1 for r in store.list_runs(limit=1000))
