"""Approval before dispatch with real Chromium, real worker processes and the sandbox shop:
a request waits for a person across a SIGKILL and is sent once when approved; a rejected one
is never sent."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from browserworker.control import enqueue
from browserworker.flow import load_flow
from browserworker.states import RunState
from browserworker.store import open_store
from tests.support.bw import BW
from tests.support.fleet import start_worker
from tests.support.paths import TEST_FLOWS
from tests.support.processes import sigkill, wait_until_gone

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FLOW = TEST_FLOWS / "approved_order.py"
SECRET_ITEM = "item-secret-7f3a9c"


def wait_for(db: str | Path, what: Any, timeout: float = 30.0) -> Any:
    """Poll the store until ``what(store)`` is truthy; its value (deadline, not a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        store = open_store(db)
        try:
            found = what(store)
        finally:
            store.close()
        if found:
            return found
        assert time.monotonic() < deadline, f"not seen within {timeout}s"
        time.sleep(0.1)


def test_a_request_waits_across_a_sigkill_and_is_sent_once_when_approved(bw: BW, shop: Any, tmp_path: Path) -> None:
    """The worker holds the filled form's POST waiting for a person: one approval with a screenshot
    and the request (the secret item masked, nowhere in the approvals or events). SIGKILLed while
    it waits, nothing reaches the shop; the next worker sends the run back to the wait without
    asking twice; ``approve`` queues it and that worker dispatches it: exactly one order."""
    db = bw.db
    run_id = f"ap-{uuid.uuid4().hex[:8]}"
    store = open_store(db)
    enqueue(store, load_flow(FLOW), {"base_url": shop.url, "item": SECRET_ITEM}, run_id=run_id)
    store.close()
    tag = uuid.uuid4().hex
    holder = start_worker(
        db,
        "--lease-ttl",
        "5",
        env={"BROWSERWORKER_APPROVAL_HOLD": "300", "BW_TEST_TAG": tag},
        log=tmp_path / "holder.log",
    )
    [asked] = wait_for(db, lambda s: s.approvals.waiting())
    assert asked.run_id == run_id and asked.request_key == f"{run_id}/submit"
    assert asked.screenshot and Path(asked.screenshot).read_bytes()[:4] == b"\x89PNG"
    fields = dict(asked.summary["fields"])
    assert fields["item"] == "[redacted]" and fields["csrf_token"] == "[redacted]"
    assert asked.summary["headers"]["cookie"].endswith("=[redacted]")
    store = open_store(db)
    try:
        assert store.get_run(run_id).state == RunState.RUNNING  # type: ignore[union-attr]  (held, not parked)
        stored = json.dumps(
            [a.to_dict() for a in store.approvals.of_run(run_id)] + [e.detail for e in store.events(run_id)],
            default=str,
        )
        assert SECRET_ITEM not in stored
    finally:
        store.close()

    sigkill(holder)
    wait_until_gone(tag)
    assert shop.orders(f"{run_id}/submit") == []

    survivor = start_worker(
        db, "--lease-ttl", "5", env={"BROWSERWORKER_APPROVAL_HOLD": "0"}, log=tmp_path / "survivor.log"
    )
    wait_for(db, lambda s: s.get_run(run_id).state == RunState.AWAITING_APPROVAL)
    done = bw.run("approve", run_id, "submit", "--db", str(db), "--by", "alice", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["decided_by"] == "alice"
    wait_for(db, lambda s: s.get_run(run_id).state == RunState.SUCCEEDED)
    survivor.terminate()
    survivor.wait(timeout=30)

    assert len(shop.orders(f"{run_id}/submit")) == 1
    store = open_store(db)
    try:
        assert [a.state for a in store.approvals.of_run(run_id)] == ["APPROVED"]  # asked once
        submits = [a for a in store.attempts(run_id) if a.step_id == "submit"]
        assert [a.state for a in submits][-1] == "SUCCEEDED"
        assert all(a.dispatched_at is None for a in submits[:-1])
        decisions = [e.decision for e in store.events(run_id)]
        assert "human:approved" in decisions and "approval_used" in decisions
    finally:
        store.close()


def test_a_rejected_request_never_reaches_the_shop(bw: BW, shop: Any, pg_url: str) -> None:
    """On PostgreSQL: ``run`` parks the run (exit 8) with nothing sent; ``reject --reason`` ends
    it FAILED with who and why, its attempt FAILED_BEFORE_SEND, and the shop has no order."""
    run_id = f"rj-{uuid.uuid4().hex[:8]}"
    parked = bw.run(
        "run",
        str(FLOW),
        "--db",
        pg_url,
        "--run-id",
        run_id,
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        env={"BROWSERWORKER_APPROVAL_HOLD": "0"},
    )
    assert parked.returncode == 8, parked.stderr
    listed = json.loads(bw.run("approvals", "--db", pg_url, "--json").stdout)
    assert [(a["run_id"], a["step_id"]) for a in listed] == [(run_id, "submit")]
    no = bw.run("reject", run_id, "submit", "--db", pg_url, "--by", "bob", "--reason", "wrong shop", "--json")
    assert no.returncode == 0, no.stderr
    shown = json.loads(bw.run("show", run_id, "--db", pg_url, "--json").stdout)
    assert shown["run"]["state"] == "FAILED" and "rejected by bob: wrong shop" in shown["run"]["error"]
    [attempt] = [a for a in shown["journal"] if a["step_id"] == "submit"]
    assert attempt["state"] == "FAILED_BEFORE_SEND" and attempt["dispatched_at"] is None
    assert shop.orders(f"{run_id}/submit") == []


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decision_while_the_worker_holds_the_page(bw: BW, shop: Any, decision: str) -> None:
    """A decision within the hold reaches the worker that holds the page: approved, it lets the
    very request it held go (one attempt, one order, SUCCEEDED); rejected, it drops it (the
    attempt FAILED_BEFORE_SEND, the run FAILED, no order)."""
    run_id = f"ah-{uuid.uuid4().hex[:8]}"
    running = bw.start(
        "run",
        str(FLOW),
        "--db",
        str(bw.db),
        "--run-id",
        run_id,
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        env={"BROWSERWORKER_APPROVAL_HOLD": "60"},
    )
    try:
        wait_for(bw.db, lambda s: s.approvals.waiting())
        assert bw.run(decision, run_id, "submit", "--db", str(bw.db)).returncode == 0
        assert running.wait(timeout=60) == (0 if decision == "approve" else 1)
    finally:
        if running.poll() is None:
            sigkill(running)
    shown = bw.show(run_id)
    [attempt] = [a for a in shown["journal"] if a["step_id"] == "submit"]
    if decision == "approve":
        assert len(shop.orders(f"{run_id}/submit")) == 1
        assert (attempt["state"], shown["run"]["state"]) == ("SUCCEEDED", "SUCCEEDED")
    else:
        assert shop.orders(f"{run_id}/submit") == []
        assert (attempt["state"], attempt["decided_by"]) == ("FAILED_BEFORE_SEND", "approval_rejected")
        assert shown["run"]["state"] == "FAILED" and attempt["dispatched_at"] is None
