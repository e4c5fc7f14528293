"""A worker whose lease was taken over dispatches nothing: its gate aborts the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import BW

pytestmark = pytest.mark.browser
FLOW = Path(__file__).parent / "flows" / "steal_lease.py"


def test_stale_epoch_gate_aborts_the_submit(bw: BW, shop: Any, run_id: str) -> None:
    """The intent was committed at epoch 1; epoch 2 belongs to another owner when the click
    happens, so the fenced dispatch commit fails, the POST is aborted in the browser, the
    sandbox never sees it, and the run stops with exit 5."""
    received = shop.inflight()["received"]
    done = bw.run("run", str(FLOW), "--db", str(bw.db), "--input", f"base_url={shop.url}", "--input", "item=tea",
                  "--run-id", run_id, env={"BW_TEST_DB": str(bw.db)})
    assert done.returncode == 5, done.stderr
    assert "lease lost" in done.stderr
    view = bw.show(run_id)
    [attempt] = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert attempt["state"] == "INTENT" and attempt["dispatched_at"] is None and attempt["outbox"] == []
    assert view["run"]["owner"] == "thief" and view["run"]["lease_epoch"] == 2
    assert shop.inflight()["received"] == received
    assert shop.orders(f"{run_id}/submit") == []
