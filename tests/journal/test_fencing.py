"""A worker whose lease was taken over dispatches nothing: its gate aborts the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.bw import BW
from tests.support.paths import TEST_FLOWS

pytestmark = pytest.mark.browser
FLOW = TEST_FLOWS / "steal_lease.py"


def test_stale_epoch_gate_aborts_the_submit(bw: BW, shop: Any, run_id: str) -> None:
    """The intent was committed at epoch 1; epoch 2 belongs to another owner when the click
    happens, so the fenced dispatch commit fails, the POST is aborted in the browser, the
    sandbox never sees it, and the run stops with exit 5."""
    received = shop.inflight()["received"]
    done = bw.run(
        "run",
        str(FLOW),
        "--db",
        str(bw.db),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        "--run-id",
        run_id,
        env={"BW_TEST_DB": str(bw.db)},
    )
    assert done.returncode == 5, done.stderr
    assert "lease lost" in done.stderr
    view = bw.show(run_id)
    [attempt] = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert attempt["state"] == "INTENT" and attempt["dispatched_at"] is None and attempt["outbox"] == []
    assert view["run"]["owner"] == "thief" and view["run"]["lease_epoch"] == 2
    assert shop.inflight()["received"] == received
    assert shop.orders(f"{run_id}/submit") == []


def test_paused_between_dispatch_commit_and_release_sends_nothing(bw: BW, shop: Any, run_id: str) -> None:
    """A worker paused (SIGSTOP) right after the gate committed `dispatched_at`, until its lease
    has run out, does not release the request when it wakes: the shop never sees it. The
    resumed run verifies (the journal says dispatched), waits out the settle time, and places
    exactly one order."""
    import signal
    import time

    from browserworker.store import open_store

    flow = str(TEST_FLOWS / "short_order.py")
    received = shop.inflight()["received"]
    proc = bw.start(
        "run",
        flow,
        "--db",
        str(bw.db),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        "--run-id",
        run_id,
        "--lease-ttl",
        "3",
        env={"BROWSERWORKER_FAULTS": "after_dispatch_commit:submit=stop"},
    )
    deadline = time.monotonic() + 60
    while Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] != "T":
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    store = open_store(bw.db)
    while (store.get_run(run_id).lease_expires_at or 0) > time.time() - 1:  # until the lease has run out
        assert time.monotonic() < deadline
        time.sleep(0.1)
    store.close()
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 5, err
    assert shop.inflight()["received"] == received  # the held request never left
    [attempt] = [a for a in bw.show(run_id)["journal"] if a["step_id"] == "submit"]
    assert attempt["state"] == "INTENT" and attempt["dispatched_at"]
    done = bw.run("run", flow, "--db", str(bw.db), "--run-id", run_id)
    assert done.returncode == 0, done.stderr
    first, second = [a for a in bw.show(run_id)["journal"] if a["step_id"] == "submit"]
    assert (first["state"], first["decided_by"]) == ("NOT_DONE", "verifier")
    assert second["state"] == "SUCCEEDED"
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_an_effect_that_fails_while_its_post_is_held_still_journals_the_post(bw: BW, shop: Any, run_id: str) -> None:
    """The effect starts the order POST and raises while the gate is still waiting to journal
    that POST (another process holds the write lock). Ending the effect must not let the held
    POST go unjournaled: the gate journals it, then releases it, so the attempt counts as
    dispatched with an unknown outcome, the verifier finds the order, and nothing is replayed."""
    flow = TEST_FLOWS / "raise_while_held.py"
    done = bw.run(
        "run",
        str(flow),
        "--db",
        str(bw.db),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        "--run-id",
        run_id,
        env={"BW_TEST_DB": str(bw.db)},
    )
    assert done.returncode == 0, done.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1
    [attempt] = [a for a in bw.show(run_id)["journal"] if a["step_id"] == "submit"]
    assert attempt["dispatched_at"] is not None
    assert (attempt["state"], attempt["decided_by"]) == ("SUCCEEDED", "verifier")
