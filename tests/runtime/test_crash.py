"""A `run` process SIGKILLed at the dangerous boundaries, then resumed with `run --run-id`.

Each case checks the business outcome on the sandbox (exactly one order for the
reference) and what the journal says decided it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.bw import BW
from tests.support.paths import TEST_FLOWS
from tests.support.processes import sigkill, tagged_processes, wait_until_gone

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def inputs(shop: Any) -> tuple[str, ...]:
    return ("--input", f"base_url={shop.url}", "--input", "item=tea")


def submit_attempts(bw: BW, run_id: str) -> list[dict[str, Any]]:
    return [a for a in bw.show(run_id)["journal"] if a["step_id"] == "submit"]


def resume(bw: BW, flow: str, run_id: str, expect: int = 0) -> str:
    done = bw.run_flow(flow, "--run-id", run_id)
    assert done.returncode == expect, done.stderr
    return done.stderr


def test_a_killed_after_intent_before_click_replays_without_verifying(bw: BW, shop: Any, run_id: str) -> None:
    """(a) Intent committed, killed before the click: the gate released nothing, so the step is
    FAILED_BEFORE_SEND and replayed with the same key, without asking the verifier."""
    killed = bw.run_flow(
        "place_order.py",
        *inputs(shop),
        "--run-id",
        run_id,
        env={"BROWSERWORKER_FAULTS": "after_intent_commit:submit=kill"},
    )
    assert killed.returncode == -9
    [intent] = submit_attempts(bw, run_id)
    assert intent["state"] == "INTENT" and intent["dispatched_at"] is None
    assert shop.orders(f"{run_id}/submit") == []

    err = resume(bw, "place_order.py", run_id)
    assert "is gone: reclaimed at once" in err
    first, second = submit_attempts(bw, run_id)
    assert (first["state"], first["decided_by"]) == ("FAILED_BEFORE_SEND", "recovery:no_dispatch")
    assert (second["state"], second["decided_by"]) == ("SUCCEEDED", "return")
    assert first["request_key"] == second["request_key"] == f"{run_id}/submit"
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_killed_while_the_gate_holds_the_request_sends_nothing(bw: BW, shop: Any, run_id: str) -> None:
    """SIGKILL while the gate holds the intercepted POST (before its dispatch commit): the held
    request dies with the worker. Playwright's driver would release it on shutdown and Chromium
    would resume it when its controller goes, so both are made to die with the worker; once every
    process of that worker is gone the shop has no order, and the resume replays it exactly once."""
    tag = uuid.uuid4().hex
    received_before = shop.inflight()["received"]
    killed = bw.run_flow(
        "place_order.py",
        *inputs(shop),
        "--run-id",
        run_id,
        env={"BROWSERWORKER_FAULTS": "dispatch_held:submit=kill", "BW_TEST_TAG": tag},
    )
    assert killed.returncode == -9
    wait_until_gone(tag)
    [intent] = submit_attempts(bw, run_id)
    assert intent["state"] == "INTENT" and intent["dispatched_at"] is None
    assert shop.inflight()["received"] == received_before  # the POST never reached the shop
    assert shop.orders(f"{run_id}/submit") == []

    resume(bw, "place_order.py", run_id)
    first, second = submit_attempts(bw, run_id)
    assert (first["state"], first["decided_by"]) == ("FAILED_BEFORE_SEND", "recovery:no_dispatch")
    assert second["state"] == "SUCCEEDED"
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_a_killed_worker_takes_its_driver_and_browser_with_it(bw: BW, shop: Any, run_id: str) -> None:
    """The Playwright driver and Chromium die with the worker: SIGKILL of the worker kills the
    driver, whose death kills the browser (parent-death signals). Both are stopped (SIGSTOP)
    first, so neither could notice and shut down by itself: only those kills can end them."""
    import signal

    from browserworker.prove._chaos import _wait_stopped

    tag = uuid.uuid4().hex
    proc = bw.start_flow(
        "place_order.py",
        *inputs(shop),
        "--run-id",
        run_id,
        env={"BROWSERWORKER_FAULTS": "dispatch_held:submit=stop", "BW_TEST_TAG": tag},
    )
    assert _wait_stopped(proc.pid, proc, timeout=60)
    family = {pid: Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1] for pid in tagged_processes(tag)}
    [driver] = [pid for pid, ppid in family.items() if int(ppid) == proc.pid]
    [browser] = [pid for pid, ppid in family.items() if int(ppid) == driver]
    try:
        os.kill(driver, signal.SIGSTOP)
        os.kill(browser, signal.SIGSTOP)
        sigkill(proc)
        wait_until_gone(tag, only={driver, browser})
    finally:
        for pid in tagged_processes(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert shop.orders(f"{run_id}/submit") == []


def test_b_killed_after_the_post_reached_the_sandbox_is_verified(bw: BW, shop: Any, run_id: str) -> None:
    """(b) The POST was committed by the sandbox but its response never came back: the
    verifier finds the order, the step is SUCCEEDED without a replay."""
    shop.set_faults(delay_after_commit=60, times=1)
    proc = bw.start_flow("place_order.py", *inputs(shop), "--run-id", run_id)
    shop.wait_for_orders(f"{run_id}/submit", 1, timeout=60)
    sigkill(proc)
    [attempt] = submit_attempts(bw, run_id)
    assert attempt["state"] == "INTENT" and attempt["dispatched_at"] and not attempt["outbox"][0]["status"]

    resume(bw, "place_order.py", run_id)
    [attempt] = submit_attempts(bw, run_id)
    assert (attempt["state"], attempt["decided_by"]) == ("SUCCEEDED", "verifier")
    assert attempt["result"]["order_id"] == str(shop.orders(f"{run_id}/submit")[0]["id"])
    assert len(shop.orders(f"{run_id}/submit")) == 1
    decisions = [e["decision"] for e in bw.show(run_id)["events"] if e["kind"] == "decision"]
    assert "duplicate_prevented" in decisions


def test_c_killed_after_response_before_journal_uses_the_outbox(bw: BW, shop: Any, run_id: str) -> None:
    """(c) The 303 was recorded in the outbox, then the worker died before the journal update:
    recovery confirms from the outbox without touching the site."""
    killed = bw.run_flow(
        "place_order.py", *inputs(shop), "--run-id", run_id, env={"BROWSERWORKER_FAULTS": "after_response:submit=kill"}
    )
    assert killed.returncode == -9
    [attempt] = submit_attempts(bw, run_id)
    assert attempt["state"] == "INTENT" and attempt["outbox"][0]["status"] == 303

    resume(bw, "place_order.py", run_id)
    [attempt] = submit_attempts(bw, run_id)
    assert (attempt["state"], attempt["decided_by"]) == ("SUCCEEDED", "outbox")
    orders = shop.orders(f"{run_id}/submit")
    assert len(orders) == 1 and attempt["result"] == {"order_id": str(orders[0]["id"])}


def test_killed_with_the_reply_lost_is_decided_by_the_verifier(bw: BW, shop: Any, run_id: str) -> None:
    """`reply_lost`: the shop committed the order and its 303 reached the browser, and the worker
    died before any of the reply was journaled. The journal has `dispatched_at` and an outbox row
    without a response, so `confirm` has nothing to judge: the verifier finds the order and the
    step is SUCCEEDED without a replay."""
    killed = bw.run_flow(
        "place_order.py", *inputs(shop), "--run-id", run_id, env={"BROWSERWORKER_FAULTS": "reply_lost:submit=kill"}
    )
    assert killed.returncode == -9, killed.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1
    [attempt] = submit_attempts(bw, run_id)
    assert attempt["state"] == "INTENT" and attempt["dispatched_at"]
    [row] = attempt["outbox"]
    assert (row["status"], row["response_at"], row["failure"]) == (None, None, None)

    resume(bw, "place_order.py", run_id)
    [attempt] = submit_attempts(bw, run_id)
    assert (attempt["state"], attempt["decided_by"]) == ("SUCCEEDED", "verifier")
    orders = shop.orders(f"{run_id}/submit")
    assert len(orders) == 1 and attempt["result"] == {"order_id": str(orders[0]["id"])}


def test_d_killed_while_in_flight_waits_for_settle(bw: BW, shop: Any, run_id: str) -> None:
    """(d) Killed while the POST was in flight; the sandbox commits seconds later. The
    verifier's early not_done does not count before stopped_at + settle: it is asked
    again, finds the order, and nothing is replayed."""
    shop.set_faults(delay_before_commit=6, times=1)
    received = shop.inflight()["received"]
    proc = bw.start_flow("place_order.py", *inputs(shop), "--run-id", run_id)
    shop.wait_for_received(received + 1, timeout=60)
    sigkill(proc)
    assert shop.orders(f"{run_id}/submit") == []  # not committed yet

    err = resume(bw, "place_order.py", run_id)
    [attempt] = submit_attempts(bw, run_id)
    assert (attempt["state"], attempt["decided_by"]) == ("SUCCEEDED", "verifier")
    assert len(shop.orders(f"{run_id}/submit")) == 1
    if attempt["evidence"]["asked"] == 2:  # the usual case: the first look came before the commit
        assert "asking again in" in err


def test_no_verifier_flow_killed_after_commit_needs_review(bw: BW, shop: Any, run_id: str) -> None:
    """Case (b) for a flow with neither verifier nor idempotency: UNKNOWN, NEEDS_REVIEW (exit 3),
    never retried; still exactly one order."""
    shop.set_faults(delay_after_commit=60, times=1)
    proc = bw.start_flow("place_order_unverified.py", *inputs(shop), "--run-id", run_id)
    shop.wait_for_orders(f"{run_id}/submit", 1, timeout=60)
    sigkill(proc)

    resume(bw, "place_order_unverified.py", run_id, expect=3)
    view = bw.show(run_id)
    assert view["run"]["state"] == "NEEDS_REVIEW"
    [attempt] = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert attempt["state"] == "UNKNOWN"
    assert len(shop.orders(f"{run_id}/submit")) == 1
    # resuming again does not retry it either
    resume(bw, "place_order_unverified.py", run_id, expect=3)
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_idempotent_flow_killed_after_commit_replays_with_the_same_key(bw: BW, shop: Any, run_id: str) -> None:
    """Case (b) for an idempotent=True effect: replayed with the same key; the shop dedupes."""
    shop.set_faults(delay_after_commit=60, times=1)
    proc = bw.start_flow("place_order_api.py", *inputs(shop), "--run-id", run_id)
    shop.wait_for_orders(f"{run_id}/submit", 1, timeout=60)
    sigkill(proc)

    resume(bw, "place_order_api.py", run_id)
    first, second = submit_attempts(bw, run_id)
    assert first["state"] == "UNKNOWN" and second["state"] == "SUCCEEDED"
    assert second["outbox"][0]["status"] == 200  # the existing order, not a new one
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_sigterm_during_run_hands_the_run_back_and_resume_finishes(bw: BW, shop: Any, run_id: str) -> None:
    """SIGTERM to `run`: it stops at the next step boundary, hands the run back (QUEUED, exit 5),
    and `run --run-id` finishes it with one order."""
    import signal as sig
    import time

    from browserworker.store import open_store

    flow = str(TEST_FLOWS / "slow_steps.py")
    proc = bw.start("run", flow, "--db", str(bw.db), *inputs(shop), "--run-id", run_id)
    deadline = time.monotonic() + 60
    while True:  # wait until it is executing steps
        if bw.db.exists():
            store = open_store(bw.db)
            attempts = store.attempts(run_id) if store.get_run(run_id) else []
            store.close()
            if any(a.step_id == "think_1" for a in attempts):
                break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(sig.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 5, err
    assert "handed back (QUEUED)" in err
    view = bw.show(run_id)
    assert view["run"]["state"] == "QUEUED"
    assert any(e["kind"] == "lease_released" for e in view["events"])
    done = bw.run("run", flow, "--db", str(bw.db), "--run-id", run_id)
    assert done.returncode == 0, done.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_evidence_names_what_an_api_verifier_checked(bw: BW, shop: Any, run_id: str) -> None:
    """A verifier that looks the order up with page.request (the reply of a page.request POST lost
    in a crash): the resumed run's journal names the verifier and the lookup it made, its URL and
    status, not the page's URL."""
    killed = bw.run(
        "run",
        str(TEST_FLOWS / "api_verifier.py"),
        "--db",
        str(bw.db),
        *inputs(shop),
        "--run-id",
        run_id,
        env={"BROWSERWORKER_FAULTS": "reply_lost:submit=kill"},
    )
    assert killed.returncode == -9, killed.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1
    done = bw.run("run", str(TEST_FLOWS / "api_verifier.py"), "--db", str(bw.db), "--run-id", run_id)
    assert done.returncode == 0, done.stderr
    [attempt] = submit_attempts(bw, run_id)
    assert (attempt["state"], attempt["decided_by"]) == ("SUCCEEDED", "verifier")
    assert len(shop.orders(f"{run_id}/submit")) == 1
    evidence = attempt["evidence"]
    assert evidence["verifier"] == "landed"
    lookup = f"GET {shop.url}/api/orders?reference={run_id}%2Fsubmit -> 200"
    assert evidence["checked"] == [lookup]
    shown = bw.run("show", run_id, "--db", str(bw.db))
    assert f"verifier landed said done (asked 1x): checked {lookup}" in shown.stdout
