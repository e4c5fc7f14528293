"""Approvals in the store, on both stores: asking (fenced), parking, deciding once, superseding a
changed request, expiry, and the reclaimer sending a run that died waiting back to the wait.
Also the CLI (``approvals``, ``approve``, ``reject``) over such a store."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from browserworker import control
from browserworker.cli import main
from browserworker.errors import LeaseLost, UsageError
from browserworker.states import RunState
from browserworker.store import NewRun, Owner, SQLStore, open_store
from browserworker.store.testing import backdate_approvals

OWNER = Owner(worker="w-1", host="elsewhere.invalid", pid=1)
SUMMARY = {"method": "POST", "url": "https://shop.example/orders", "fields": [["item", "[redacted]"]]}


def leased(store: SQLStore, run_id: str, ttl: float = 30.0) -> Any:
    """A run leased by OWNER with one INTENT attempt of its effect ``submit``."""
    store.create_run(NewRun(id=run_id, flow_name="f", inputs={}))
    run = store.claim_run(run_id, OWNER, ttl)
    assert run is not None
    attempt = store.begin_attempt(
        run_id, run.lease_epoch, "submit", "effect", f"{run_id}/submit", "fp", worker=OWNER.worker, margin=0.0
    )
    return run, attempt


def ask(store: SQLStore, run: Any, fingerprint: str = "a" * 64, ttl: float = 3600.0) -> Any:
    return store.approvals.request(
        run.id,
        run.lease_epoch,
        "submit",
        1,
        f"{run.id}/submit",
        fingerprint,
        SUMMARY,
        screenshot="/tmp/x.png",
        ttl=ttl,
        worker=OWNER.worker,
    )


def test_ask_park_approve_queues_the_run_once(any_store: SQLStore) -> None:
    """Asking twice for one fingerprint gives one approval; parking moves the run to
    AWAITING_APPROVAL (fencing its holder off); approving queues it and journals who; a second
    decision is refused; a stale epoch cannot ask."""
    run, _ = leased(any_store, "r1")
    first = ask(any_store, run)
    assert ask(any_store, run).id == first.id and first.state == "PENDING"
    parked = any_store.approvals.park(run.id, run.lease_epoch, first.id, worker=OWNER.worker)
    assert parked.state == RunState.AWAITING_APPROVAL and parked.owner is None
    assert parked.lease_epoch == run.lease_epoch + 1
    with pytest.raises(LeaseLost):
        ask(any_store, run, "b" * 64)
    assert any_store.claim_next(OWNER, ["default"], 30) is None  # not claimable while it waits
    assert [a.run_id for a in control.list_approvals(any_store)] == ["r1"]
    decided = control.approve(any_store, "r1", "submit", who="alice")
    assert (decided.state, decided.decided_by) == ("APPROVED", "alice")
    assert any_store.get_run("r1").state == RunState.QUEUED  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="already APPROVED by alice"):
        control.reject(any_store, "r1", "submit", who="bob")
    decisions = [e.decision for e in any_store.events("r1") if e.kind in ("approval", "run_state")]
    assert decisions == ["approval_requested", "awaiting_approval", "human:approved", "approval_approved"]
    assert control.list_approvals(any_store) == []


def test_reject_fails_a_parked_run_and_unknowns_are_refused(any_store: SQLStore) -> None:
    """Rejecting a parked run's approval ends the run FAILED with who and why; an unknown run
    or a step with no approval is a clear usage error; a parked run can be cancelled."""
    run, _ = leased(any_store, "r2")
    asked = ask(any_store, run)
    any_store.approvals.park(run.id, run.lease_epoch, asked.id)
    with pytest.raises(UsageError, match="no run 'nope'"):
        control.approve(any_store, "nope", "submit", who="alice")
    with pytest.raises(UsageError, match="no approval to decide"):
        control.approve(any_store, "r2", "other", who="alice")
    done = control.reject(any_store, "r2", "submit", who="bob", reason="wrong amount")
    assert (done.state, done.decided_by, done.reason) == ("REJECTED", "bob", "wrong amount")
    failed = any_store.get_run("r2")
    assert failed is not None and failed.state == RunState.FAILED
    assert failed.error is not None and "rejected by bob: wrong amount" in failed.error
    other, _ = leased(any_store, "r2b")
    any_store.approvals.park(other.id, other.lease_epoch, ask(any_store, other).id)
    assert any_store.cancel("r2b") == "cancelled"  # a parked run can be cancelled like a queued one
    assert control.list_approvals(any_store) == []


def test_a_changed_request_supersedes_even_an_approved_one(any_store: SQLStore) -> None:
    """An approval is for one fingerprint: asking with another supersedes the live one (approved
    or not) and asks anew, so a changed request is never sent on an old approval."""
    run, _ = leased(any_store, "r3")
    old = ask(any_store, run, "a" * 64)
    any_store.approvals.decide("r3", "submit", "approve", who="alice")
    new = ask(any_store, run, "b" * 64)
    assert new.id != old.id and new.state == "PENDING"
    assert any_store.approvals.get(old.id).state == "SUPERSEDED"  # type: ignore[union-attr]
    assert any_store.approvals.current("r3", "submit").id == new.id  # type: ignore[union-attr]


def test_an_expired_approval_ends_like_a_rejection(any_store: SQLStore) -> None:
    """Past its time an approval is no longer offered by a listing, which writes nothing; a
    worker's sweep makes it EXPIRED and its parked run FAILED with the reason; parking one that
    is already past its time fails the run too."""
    run, _ = leased(any_store, "r4")
    asked = ask(any_store, run, ttl=60)
    any_store.approvals.park(run.id, run.lease_epoch, asked.id)
    assert backdate_approvals(any_store, "r4", 61) == 1  # past its time
    assert control.list_approvals(any_store) == []
    assert any_store.approvals.get(asked.id).state == "PENDING"  # type: ignore[union-attr]  # looking wrote nothing
    assert any_store.approvals.expire_due() == 1  # the worker's sweep
    assert any_store.approvals.get(asked.id).state == "EXPIRED"  # type: ignore[union-attr]
    ended = any_store.get_run("r4")
    assert ended is not None and ended.state == RunState.FAILED and "expired" in (ended.error or "")

    run5, _ = leased(any_store, "r5")
    late = ask(any_store, run5, ttl=60)
    backdate_approvals(any_store, "r5", 61)
    assert any_store.approvals.park(run5.id, run5.lease_epoch, late.id).state == RunState.FAILED


def test_a_run_that_dies_waiting_is_reclaimed_to_the_wait(any_store: SQLStore) -> None:
    """A holder that dies while its request waits: the reclaimer sends the run to
    AWAITING_APPROVAL, not the queue (its attempt is still undispatched); once approved it is
    queued; without a pending approval an expired lease is queued as before."""
    run, attempt = leased(any_store, "r6", ttl=0.5)
    ask(any_store, run)
    deadline = time.monotonic() + 10
    while not (reclaimed := any_store.reclaim_expired(skew=0.0, max_lease_losses=5)):
        assert time.monotonic() < deadline, "the lease was never reclaimed"
        time.sleep(0.05)
    [back] = reclaimed
    assert back.state == RunState.AWAITING_APPROVAL
    assert any_store.get_attempt(attempt.id).dispatched_at is None
    control.approve(any_store, "r6", "submit", who="alice")
    assert any_store.get_run("r6").state == RunState.QUEUED  # type: ignore[union-attr]


def test_cli_approvals_approve_reject(tmp_path: Path) -> None:
    """``approvals --json`` lists what waits; ``approve``/``reject --json`` decide with ``--by``;
    an unknown run or step exits 2 with a clear message."""
    db = tmp_path / "bw.db"
    store = open_store(db)
    assert isinstance(store, SQLStore)
    for rid in ("c1", "c2"):
        run, _ = leased(store, rid)
        store.approvals.park(rid, run.lease_epoch, ask(store, run).id)
    store.close()
    cli = CliRunner()
    listed = cli.invoke(main, ["approvals", "--db", str(db), "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [(r["run_id"], r["step_id"], r["request_key"]) for r in rows] == [
        ("c1", "submit", "c1/submit"),
        ("c2", "submit", "c2/submit"),
    ]
    assert set(rows[0]) == {
        "id",
        "run_id",
        "flow",
        "step_id",
        "attempt_no",
        "request_key",
        "fingerprint",
        "request",
        "screenshot",
        "state",
        "worker",
        "waiting_since",
        "expires_at",
        "decided_at",
        "decided_by",
        "reason",
    }
    assert [(r["flow"], r["request"], r["screenshot"], r["state"]) for r in rows] == [
        ("f", SUMMARY, "/tmp/x.png", "PENDING")
    ] * 2
    ok = cli.invoke(main, ["approve", "c1", "submit", "--db", str(db), "--by", "alice", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output)["decided_by"] == "alice"
    no = cli.invoke(main, ["reject", "c2", "submit", "--db", str(db), "--reason", "no", "--json"])
    assert no.exit_code == 0 and json.loads(no.output)["state"] == "REJECTED"
    unknown = cli.invoke(main, ["approve", "ghost", "submit", "--db", str(db)])
    assert unknown.exit_code == 2 and "no run 'ghost'" in unknown.output
    step = cli.invoke(main, ["reject", "c1", "nope", "--db", str(db)])
    assert step.exit_code == 2 and "no approval to decide" in step.output
