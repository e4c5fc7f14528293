"""Worker processes draining one database with real Chromium against the sandbox:
drains, SIGKILL, SIGSTOP past the lease, SIGTERM hand-over, cancel, review and resolve."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import BrowserContext

from browserworker.control import enqueue
from browserworker.flow import Extension, load_flow
from browserworker.journal import LeaseSettings
from browserworker.runtime import BrowserSettings, Engine, WorkerSettings
from browserworker.states import RunState
from browserworker.store import open_store
from browserworker.store.records import Owner, RunRecord
from browserworker.store.testing import forget_lease
from tests.support.bw import BW
from tests.support.fleet import (
    duplicate_references,
    enqueue_many,
    events,
    run_states,
    start_worker,
    states,
    wait_until_done,
)
from tests.support.paths import FLOWS, TEST_FLOWS
from tests.support.processes import sigkill

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def stop(proc: Any, timeout: float = 60) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


def submit_successes(db: Path) -> dict[str, int]:
    store = open_store(db)
    try:
        out: dict[str, int] = {}
        for r in store.list_runs(limit=100_000):
            out[r.id] = sum(1 for a in store.attempts(r.id) if a.step_id == "submit" and a.state == "SUCCEEDED")
        return out
    finally:
        store.close()


@pytest.mark.parametrize("workers", [3])  # (on PostgreSQL, four hosts: tests/fleet/test_hosts_chaos.py)
def test_workers_drain_200_runs_exactly_once(tmp_path: Path, shop: Any, workers: int) -> None:
    """N worker processes on one database drain 200 runs: every run SUCCEEDED, its effect
    succeeded exactly once, and no reference has two orders."""
    db = tmp_path / "bw.db"
    ids = enqueue_many(db, "short_order.py", shop, 200, prefix=f"drain{workers}-{tmp_path.name[-6:]}")
    procs = [start_worker(db, "--once", "-n", "3", log=tmp_path / f"w{i}.log") for i in range(workers)]
    for p in procs:
        assert p.wait(timeout=400) == 0
    assert states(db) == {"SUCCEEDED": 200}
    assert set(submit_successes(db).values()) == {1}
    assert all(len(shop.orders(f"{i}/submit")) == 1 for i in ids[::20])
    assert duplicate_references(shop) == {}
    claimers = {e.worker for e in events(db, "lease_claimed")}
    assert len(claimers) == workers  # every worker took a share


LOOK_FLOW = """
from browserworker import Flow, StepContext

flow = Flow("look")


@flow.step
async def look(ctx: StepContext) -> None:
    await ctx.page.evaluate("1 + 1")
"""


def test_a_slot_frees_when_the_runs_end_is_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With one slot, the next run starts while the finished run's context is still closing:
    a slot frees when the run's end is committed, not when its browser context is gone."""
    path = tmp_path / "look.py"
    path.write_text(LOOK_FLOW)
    store = open_store(tmp_path / "bw.db")
    loaded = load_flow(path)
    runs = [enqueue(store, loaded, {}).id for _ in range(2)]
    started: list[str] = []
    both_started = asyncio.Event()

    class Starts(Extension):
        def run_started(self, run: RunRecord) -> None:
            started.append(run.id)
            if len(started) == 2:
                both_started.set()

    started_when_closed: list[list[str]] = []
    close = BrowserContext.close

    async def held_close(self: BrowserContext, *args: Any, **kwargs: Any) -> None:
        if not started_when_closed:  # the first context to close waits (at most 10 s) for the second run
            try:
                await asyncio.wait_for(both_started.wait(), timeout=10)
            except TimeoutError:
                pass
        started_when_closed.append(list(started))
        await close(self, *args, **kwargs)

    monkeypatch.setattr(BrowserContext, "close", held_close)
    worker = Engine(store, browser=BrowserSettings.discover(), extensions=[Starts()]).worker(
        WorkerSettings(concurrency=1, once=True, poll_interval=0.05)
    )
    try:
        stats = asyncio.run(worker.run())
        assert stats.finished == {"SUCCEEDED": 2}
        assert started_when_closed[0] == runs  # the second run had started before the first context closed
        assert states(tmp_path / "bw.db") == {"SUCCEEDED": 2}
    finally:
        store.close()


def test_the_reclaimer_wakes_when_a_lease_expires(tmp_path: Path) -> None:
    """A lease held elsewhere (no pid to check) is reclaimed when it expires (plus the skew),
    not at the reclaimer's next poll: here the poll is a minute away, and the run, leased
    for one second, finishes well within that."""
    path = tmp_path / "look.py"
    path.write_text(LOOK_FLOW)
    store = open_store(tmp_path / "bw.db")
    run = enqueue(store, load_flow(path), {})
    elsewhere = Owner(worker="worker-elsewhere", host="elsewhere.invalid", pid=1)
    leased = store.claim_run(run.id, elsewhere, 1.0)
    assert leased is not None and leased.owner == "worker-elsewhere"
    done = asyncio.Event()

    class Finished(Extension):
        def run_finished(self, record: RunRecord) -> None:
            done.set()

    settings = WorkerSettings(reclaim_every=60, poll_interval=60)
    worker = Engine(
        store, browser=BrowserSettings.discover(), lease=LeaseSettings(ttl=300, skew=0.2), extensions=[Finished()]
    ).worker(settings)

    async def main() -> None:
        working = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(done.wait(), timeout=20)
        finally:
            worker.request_stop()
            await working

    try:
        asyncio.run(main())
        assert worker.stats.reclaimed == 1 and worker.stats.finished == {"SUCCEEDED": 1}
        expired = events(tmp_path / "bw.db", "lease_expired")
        assert [e.detail["previous_owner"] for e in expired] == ["worker-elsewhere"]
        assert expired[0].at >= leased.lease_expires_at + 0.2  # not before expiry plus skew
    finally:
        store.close()


def test_sigkilled_worker_runs_finish_elsewhere(tmp_path: Path, shop: Any) -> None:
    """A worker SIGKILLed mid-drain: after its leases expire the other worker reclaims and
    finishes its runs; one order per reference."""
    db = tmp_path / "bw.db"
    enqueue_many(db, "short_order.py", shop, 40, prefix=f"kill-{tmp_path.name[-6:]}")
    victim = start_worker(db, "-n", "4", "--lease-ttl", "3", log=tmp_path / "victim.log")
    wait_until_done(db, 8, timeout=120)
    survivor = start_worker(db, "-n", "4", "--lease-ttl", "3", log=tmp_path / "survivor.log")
    sigkill(victim)
    counts = wait_until_done(db, 40, timeout=240)
    assert stop(survivor) == 0
    assert counts == {"SUCCEEDED": 40}
    assert set(submit_successes(db).values()) == {1}
    assert duplicate_references(shop) == {}
    expired = events(db, "lease_expired")
    assert expired and all(e.detail["previous_owner"].startswith("worker-") for e in expired)


def test_sigstopped_worker_past_its_lease_dispatches_nothing(tmp_path: Path, shop: Any) -> None:
    """A worker paused (SIGSTOP) after its intent, past its lease: another worker reclaims
    and completes the run; after SIGCONT the paused worker's fenced dispatch fails, the
    gate aborts its request and it stops that run. Exactly one order, one POST received."""
    db = tmp_path / "bw.db"
    [run_id] = enqueue_many(db, "short_order.py", shop, 1, prefix=f"stop-{tmp_path.name[-6:]}")
    received = shop.inflight()["received"]
    paused = start_worker(
        db,
        "-n",
        "1",
        "--lease-ttl",
        "3",
        log=tmp_path / "paused.log",
        env={"BROWSERWORKER_FAULTS": "after_intent_commit:submit=stop"},
    )
    _wait_for_state(paused.pid, "T", timeout=60)
    other = start_worker(db, "-n", "1", "--lease-ttl", "3", log=tmp_path / "other.log")
    wait_until_done(db, 1, timeout=120)
    assert shop.inflight()["received"] == received + 1
    paused.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 30
    log = tmp_path / "paused.log"
    while "lease lost" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "lease lost" in log.read_text()  # its heartbeat or its gate found the epoch moved on
    assert stop(paused) == 0 and stop(other) == 0
    assert shop.inflight()["received"] == received + 1  # the paused worker sent nothing
    store = open_store(db)
    first, second = [a for a in store.attempts(run_id) if a.step_id == "submit"]
    store.close()
    assert (first.lease_epoch, first.dispatched_at, first.state) == (1, None, "FAILED_BEFORE_SEND")
    assert second.state == "SUCCEEDED" and second.lease_epoch > 1
    assert len(shop.orders(f"{run_id}/submit")) == 1
    assert run_states(db, [run_id]) == {run_id: RunState.SUCCEEDED}


def _wait_for_state(pid: int, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rpartition(")")[2].split()[0] == state:
            return
        time.sleep(0.05)
    raise TimeoutError(f"process {pid} never reached state {state}")


def test_sigterm_hands_runs_over_without_waiting_for_expiry(tmp_path: Path, shop: Any) -> None:
    """SIGTERM: the worker stops claiming, releases its runs at the next step boundary and
    exits 0; another worker finishes them long before the 120 s lease would have expired."""
    db = tmp_path / "bw.db"
    ids = enqueue_many(db, "slow_steps.py", shop, 2, prefix=f"term-{tmp_path.name[-6:]}")
    first = start_worker(db, "-n", "2", "--lease-ttl", "120", log=tmp_path / "first.log")
    deadline = time.monotonic() + 60
    while states(db).get("RUNNING", 0) < 2:
        assert time.monotonic() < deadline, states(db)
        time.sleep(0.1)
    terminated_at = time.monotonic()
    assert stop(first) == 0
    second = start_worker(db, "-n", "2", "--lease-ttl", "120", "--once", log=tmp_path / "second.log")
    assert second.wait(timeout=100) == 0
    assert time.monotonic() - terminated_at < 60
    assert run_states(db, ids) == {i: RunState.SUCCEEDED for i in ids}
    released = events(db, "lease_released")
    assert {e.run_id for e in released} == set(ids)
    assert all(len(shop.orders(f"{i}/submit")) == 1 for i in ids)


def test_cancel_queued_and_running(bw: BW, tmp_path: Path, shop: Any) -> None:
    """A queued run is CANCELLED at once; a running one stops at its next step boundary,
    before its submit, so no order is placed."""
    db = bw.db
    queued, running = enqueue_many(db, "slow_steps.py", shop, 2, prefix=f"cancel-{tmp_path.name[-6:]}", queue="slow")
    out = bw.run("cancel", queued, "--db", str(db))
    assert out.returncode == 0 and "CANCELLED" in out.stdout
    worker = start_worker(db, "--queue", "slow", "--once", log=tmp_path / "w.log")
    deadline = time.monotonic() + 60
    while run_states(db, [running])[running] != RunState.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    out = bw.run("cancel", running, "--db", str(db))
    assert out.returncode == 0 and "next step boundary" in out.stdout
    assert worker.wait(timeout=60) == 0
    assert run_states(db, [queued, running]) == {queued: RunState.CANCELLED, running: RunState.CANCELLED}
    assert shop.orders(f"{running}/submit") == []
    assert bw.run("cancel", running, "--db", str(db)).returncode == 2  # already ended


def test_backpressure_refusal_exit_code(bw: BW, shop: Any) -> None:
    """Beyond the queue's max depth `enqueue` exits 6 with a clear message; nothing is written."""
    assert bw.run("queue", "tiny", "--max-depth", "1", "--db", str(bw.db)).returncode == 0
    args = (
        "enqueue",
        str(FLOWS / "place_order.py"),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        "--queue",
        "tiny",
        "--db",
        str(bw.db),
    )
    assert bw.run(*args).returncode == 0
    refused = bw.run(*args, "--run-id", "one-too-many")
    assert refused.returncode == 6 and "queue 'tiny' is full" in refused.stderr
    assert bw.run("show", "one-too-many", "--db", str(bw.db)).returncode == 2


def test_review_then_resolve_not_done_replays_once(bw: BW, shop: Any, run_id: str) -> None:
    """No verifier, a 500 from the shop: UNKNOWN, NEEDS_REVIEW. `review` shows the key,
    fingerprint and evidence; `resolve --not-done` re-queues it and a worker replays it
    with the same key: one order."""
    shop.set_faults(fail_before_commit=True, times=1)
    parked = bw.run_flow(
        "place_order_unverified.py", "--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id
    )
    assert parked.returncode == 3, parked.stderr
    [item] = json.loads(bw.run("review", "--json", "--db", str(bw.db)).stdout)
    assert item["run_id"] == run_id and item["step_id"] == "submit"
    assert item["request_key"] == f"{run_id}/submit" and len(item["fingerprint"]) == 64
    assert item["evidence"]["responses"][0]["status"] == 500
    assert Path(item["evidence"]["screenshot"]).stat().st_size > 0
    assert item["evidence"]["page_url"].startswith(shop.url)
    done = bw.run("resolve", run_id, "submit", "--not-done", "--db", str(bw.db))
    assert done.returncode == 0 and "QUEUED" in done.stdout
    worker = bw.run("worker", "--once", "--db", str(bw.db))
    assert worker.returncode == 0, worker.stderr
    view = bw.show(run_id)
    assert view["run"]["state"] == "SUCCEEDED"
    first, second = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert first["state"] == "NOT_DONE" and first["decided_by"].startswith("human:")
    assert second["state"] == "SUCCEEDED" and second["request_key"] == first["request_key"]
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_review_then_resolve_done_skips_the_step(bw: BW, shop: Any, run_id: str) -> None:
    """Killed after the shop committed, no verifier: a person checks and says --done with the
    result; the run resumes without resubmitting."""
    shop.set_faults(delay_after_commit=60, times=1)
    proc = bw.start_flow(
        "place_order_unverified.py", "--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id
    )
    [order] = shop.wait_for_orders(f"{run_id}/submit", 1, timeout=60)
    sigkill(proc)
    assert bw.run_flow("place_order_unverified.py", "--run-id", run_id).returncode == 3
    resolved = bw.run(
        "resolve",
        run_id,
        "submit",
        "--done",
        "--result",
        json.dumps({"order_id": str(order["id"])}),
        "--db",
        str(bw.db),
    )
    assert resolved.returncode == 0, resolved.stderr
    assert bw.run("worker", "--once", "--db", str(bw.db)).returncode == 0
    view = bw.show(run_id)
    assert view["run"]["state"] == "SUCCEEDED"
    [attempt] = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert attempt["result"] == {"order_id": str(order["id"])}
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_flow_change_warns_and_missing_step_goes_to_review(bw: BW, tmp_path: Path, shop: Any, run_id: str) -> None:
    """A changed flow file is a warning; a journaled step that no longer exists sends the run
    to NEEDS_REVIEW instead of guessing."""
    flow = tmp_path / "flow.py"
    flow.write_text(
        (TEST_FLOWS / "short_order.py")
        .read_text()
        .replace('Path(__file__).resolve().parents[2] / "flows"', repr(str(FLOWS)))
    )
    proc = bw.start(
        "run",
        str(flow),
        "--db",
        str(bw.db),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=x",
        "--run-id",
        run_id,
        env={"BROWSERWORKER_FAULTS": "after_intent_commit:submit=kill"},
    )
    assert proc.wait(timeout=60) == -9
    flow.write_text(
        flow.read_text().replace("async def submit(", "async def place(").replace("@submit.verify", "@place.verify")
    )
    store = open_store(bw.db)
    forget_lease(store, run_id)
    store.close()
    assert bw.run("worker", "--once", "--db", str(bw.db)).returncode == 0
    view = bw.show(run_id)
    assert view["run"]["state"] == "NEEDS_REVIEW" and "submit" in view["run"]["error"]
    assert any(e["kind"] == "flow_changed" for e in view["events"])
