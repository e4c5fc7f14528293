"""The ``browserworker`` command's process: the garbage collector paced through start-up and
settled when the work begins (browserworker.cli.process), and left alone in anyone else's."""

from __future__ import annotations

import gc
import json
from typing import Any

from browserworker.cli import process
from tests.support.bw import BW

PACE_FLOW = """
import gc

from browserworker import Flow, StepContext

LOADED_AT = gc.get_threshold()  # the collector's pace while the flow file loads (start-up)

flow = Flow("gc-pace")


@flow.step()
async def look(ctx: StepContext) -> dict:
    return {"loaded_at": LOADED_AT, "working_at": gc.get_threshold(), "frozen": gc.get_freeze_count()}
"""


def _looked(journal: list[dict[str, Any]]) -> dict[str, Any]:
    (step,) = [e for e in journal if e["step_id"] == "look"]
    assert step["state"] == "SUCCEEDED", step
    result: dict[str, Any] = step["result"]
    return result


def test_a_run_loads_its_flow_at_the_start_up_pace_and_runs_its_steps_settled(bw: BW) -> None:
    """`browserworker run` loads the flow file while the collector runs rarely (start-up), and
    runs the flow's steps with Python's default pace back and the start-up's objects frozen
    (out of every later collection)."""
    (bw.db.parent / "pace.py").write_text(PACE_FLOW)
    done = bw.run("run", "pace.py", "--db", str(bw.db), "--json")
    assert done.returncode == 0, done.stderr
    looked = _looked(json.loads(done.stdout)["journal"])
    assert tuple(looked["loaded_at"]) == process.STARTUP_THRESHOLDS
    assert tuple(looked["working_at"]) == gc.get_threshold() == (700, 10, 10)
    assert looked["frozen"] > 10_000  # click, pydantic, Playwright's API, the runtime, the flow


def test_a_worker_settles_before_it_claims(bw: BW) -> None:
    """`browserworker worker` runs what it claims settled too: default pace, start-up frozen."""
    (bw.db.parent / "pace.py").write_text(PACE_FLOW)
    queued = bw.run("enqueue", "pace.py", "--db", str(bw.db), "--run-id", "paced")
    assert queued.returncode == 0, queued.stderr
    drained = bw.run("worker", "--once", "--db", str(bw.db))
    assert drained.returncode == 0, drained.stderr
    looked = _looked(bw.show("paced")["journal"])
    assert tuple(looked["working_at"]) == (700, 10, 10)
    assert looked["frozen"] > 10_000


def test_settle_leaves_a_process_the_command_did_not_start_alone() -> None:
    """In a process the console script did not start (this test's, the pytest plugin's, an
    application's), settle() freezes nothing and keeps the collector's pace as it is."""
    before_pace, before_frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.set_threshold(1234, 5, 6)
    try:
        process.settle()
        assert gc.get_threshold() == (1234, 5, 6)
        assert gc.get_freeze_count() == before_frozen
    finally:
        gc.set_threshold(*before_pace)
