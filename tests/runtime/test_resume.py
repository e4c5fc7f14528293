"""Resuming a run whose journal says every step that matters is done."""

from __future__ import annotations

from pathlib import Path

import pytest

from browserworker.control import enqueue
from browserworker.flow import load_flow
from browserworker.states import AttemptState, RunState
from browserworker.store import Owner, open_store
from tests.support.bw import BW

pytestmark = pytest.mark.browser

FLOW = """
from pathlib import Path
from browserworker import Flow, StepContext

flow = Flow("prepared")
RAN = Path(__file__).with_suffix(".ran")


def mark(step: str) -> None:
    with RAN.open("a") as f:
        f.write(step + "\\n")


@flow.step
async def log_in(ctx: StepContext) -> None:
    mark("log_in")


@flow.step
async def fill_form(ctx: StepContext) -> None:
    mark("fill_form")


@flow.effect
async def submit(ctx: StepContext) -> dict:
    mark("submit")
    return {"order_id": "new"}
"""

GONE = Owner(worker="worker-gone", host="elsewhere.invalid", pid=99)


def parked_in_review(db: Path, flow: Path) -> str:
    """A run whose actions succeeded and whose last step, the effect, is UNKNOWN: in review."""
    store = open_store(db)
    try:
        run = enqueue(store, load_flow(flow), {}, run_id="parked")
        leased = store.claim_run(run.id, GONE, ttl=30)
        assert leased is not None
        epoch = leased.lease_epoch
        store.set_run_state(run.id, epoch, RunState.RUNNING)
        for step in ("log_in", "fill_form"):
            action = store.begin_attempt(run.id, epoch, step, "action", f"{run.id}/{step}", "fp")
            store.finish_attempt(action, epoch, AttemptState.SUCCEEDED, decided_by="return")
        effect = store.begin_attempt(run.id, epoch, "submit", "effect", f"{run.id}/submit", "fp")
        store.mark_dispatched(effect, epoch, "POST", "http://127.0.0.1:1/orders")
        store.finish_attempt(effect, epoch, AttemptState.UNKNOWN, decided_by="recovery:dispatched")
        store.set_run_state(run.id, epoch, RunState.NEEDS_REVIEW, error="in doubt")
        return run.id
    finally:
        store.close()


def test_a_run_resolved_done_on_its_last_effect_finishes_without_running_its_actions(bw: BW, tmp_path: Path) -> None:
    """After ``resolve --done`` on the last step, the resumed run has nothing left to do: it
    ends SUCCEEDED at once, logging in and filling the form again for nothing (a real site's
    rate limits count every login) never happen, and the person's result stays the step's."""
    flow = tmp_path / "prepared.py"
    flow.write_text(FLOW)
    run_id = parked_in_review(bw.db, flow)
    resolved = bw.run("resolve", run_id, "submit", "--done", "--result", '{"order_id": "42"}', "--db", str(bw.db))
    assert resolved.returncode == 0, resolved.stderr
    done = bw.run("run", str(flow), "--run-id", run_id, "--db", str(bw.db))
    assert done.returncode == 0, done.stderr
    assert not flow.with_suffix(".ran").exists()  # no step ran
    view = bw.show(run_id)
    assert view["run"]["state"] == "SUCCEEDED"
    [submit] = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert submit["result"] == {"order_id": "42"}
    assert [e["decision"] for e in view["events"] if e["to_state"] == "SUCCEEDED" and e["kind"] == "run_state"] == [
        "nothing left to do"
    ]


def test_a_run_with_an_action_left_after_its_last_effect_runs_its_steps(bw: BW, tmp_path: Path) -> None:
    """The same run with one more action after the effect still has work left: the actions
    run (they prepare the page), the resolved effect is skipped, the trailing action runs."""
    flow = tmp_path / "prepared.py"
    flow.write_text(
        FLOW + "\n\n@flow.step\nasync def read_confirmation(ctx: StepContext) -> None:\n    mark('read_confirmation')\n"
    )
    run_id = parked_in_review(bw.db, flow)
    assert bw.run("resolve", run_id, "submit", "--done", "--db", str(bw.db)).returncode == 0
    done = bw.run("run", str(flow), "--run-id", run_id, "--db", str(bw.db))
    assert done.returncode == 0, done.stderr
    assert flow.with_suffix(".ran").read_text().split() == ["log_in", "fill_form", "read_confirmation"]
