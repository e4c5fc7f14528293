"""Site budgets across real worker processes, real Chromium and the real sandbox, on both
stores: a key's concurrency holds at the sandbox while a control key shows it could be
more, and a 429 with Retry-After pauses the key fleet-wide while other keys keep flowing."""

from __future__ import annotations

import asyncio
import collections
import signal
from pathlib import Path
from typing import Any

import pytest

from browserworker.control import enqueue
from browserworker.flow import Extension, load_flow
from browserworker.journal import LeaseSettings
from browserworker.runtime import BrowserSettings, Engine
from browserworker.states import RunState
from browserworker.store import open_store
from browserworker.store.records import RunRecord
from tests.support.fleet import STARTED, start_worker
from tests.support.hosts import wait_for
from tests.support.paths import TEST_FLOWS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def enqueue_sites(db: str, shop: Any, sites: list[str], prefix: str) -> list[str]:
    loaded = load_flow(TEST_FLOWS / "budget_order.py")
    store = open_store(db)
    try:
        return [
            enqueue(
                store,
                loaded,
                {"base_url": shop.url, "item": f"{prefix}-{i:03d}", "site": site},
                run_id=f"{prefix}-{i:03d}",
            ).id
            for i, site in enumerate(sites)
        ]
    finally:
        store.close()


BUSY = {RunState.QUEUED, RunState.LEASED, RunState.RUNNING}
"""The states of a run still in the workers' hands."""


def drain(db: str, tmp_path: Path, workers: int = 3) -> None:
    """``workers`` workers of 2 slots each until no run is left in their hands, then stopped
    (SIGTERM): alive through a key's pause however soon the other runs are done (a ``--once``
    worker with nothing it may claim stops, and leaves the paused key's runs queued)."""
    logs = [tmp_path / f"w{i}.log" for i in range(workers)]
    procs = [start_worker(db, "-n", "2", log=log) for log in logs]  # type: ignore[arg-type]
    store = open_store(db)
    try:
        wait_for(
            lambda: not any(c.n for c in store.runs_by_state() if c.state in BUSY), 300, "every run done", interval=0.2
        )
    finally:
        store.close()
    for p, log in zip(procs, logs, strict=True):
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0, log.read_text()[-3000:]
        STARTED.remove(p)


def one_order_each(shop: Any, ids: list[str]) -> bool:
    by_ref = collections.Counter(o["reference"] for o in shop.orders())
    return all(by_ref[f"{i}/submit"] == 1 for i in ids)


def test_a_keys_concurrency_holds_across_worker_processes(store_target: str, shop: Any, tmp_path: Path) -> None:
    """3 workers of 2 slots each drain 30 runs of a key limited to 2 beside 15 runs of an
    unlimited control key: the sandbox never sees more than 2 runs of the key at once while
    it sees 3 or more of the control key; every run SUCCEEDED with one order each."""
    tag = tmp_path.name[-10:].replace("_", "-")
    limited, control = f"limited-{tag}", f"control-{tag}"
    store = open_store(store_target)
    store.set_limit(limited, concurrency=2)
    store.close()
    shop.set_faults(delay_before_commit=0.4)  # each run stays at the sandbox a while: overlaps show
    sites = [limited if i % 3 else control for i in range(45)]  # 30 limited, 15 control, interleaved
    ids = enqueue_sites(store_target, shop, sites, f"conc-{tag}")
    drain(store_target, tmp_path)
    store = open_store(store_target)
    try:
        assert collections.Counter(store.get_run(i).state for i in ids) == {RunState.SUCCEEDED: 45}
    finally:
        store.close()
    assert one_order_each(shop, ids)
    held, free = shop.visits(limited), shop.visits(control)
    assert len(held["visits"]) == 30 and len(free["visits"]) == 15
    assert held["most_visits_at_once"] <= 2, held["most_visits_at_once"]
    assert free["most_visits_at_once"] >= 3, free["most_visits_at_once"]


def test_retry_after_pauses_the_key_fleet_wide(store_target: str, shop: Any, tmp_path: Path) -> None:
    """A 429 with Retry-After: 3 on one run's order POST pauses its key: no run of the key is
    claimed or reaches the sandbox for ~3 s (journal and sandbox agree), while runs of another
    key complete inside the pause; the throttled run then SUCCEEDED with exactly one order."""
    tag = tmp_path.name[-10:].replace("_", "-")
    paced, other = f"paced-{tag}", f"other-{tag}"
    store = open_store(store_target)
    store.set_limit(paced, concurrency=1)  # one at a time: the throttled run is the only one in flight
    store.close()
    shop.set_faults(delay_before_commit=0.3, throttle=3, throttle_tag=paced, throttle_times=1)
    sites = [paced] * 5 + [other] * 20
    ids = enqueue_sites(store_target, shop, sites, f"pause-{tag}")
    drain(store_target, tmp_path)
    store = open_store(store_target)
    try:
        runs = {i: store.get_run(i) for i in ids}
        assert collections.Counter(r.state for r in runs.values()) == {RunState.SUCCEEDED: 25}
        [(asker, pause)] = [(i, e) for i in ids for e in store.events(i) if e.kind == "limit_paused"]
        assert pause.detail["key"] == paced and pause.detail["status"] == 429
        until = pause.detail["until"]
        assert until - pause.at == pytest.approx(3, abs=0.2)
        claims_after = [
            e.at
            for i in ids
            if runs[i].limit_key == paced
            for e in store.events(i)
            if e.kind == "lease_claimed" and e.at > pause.at
        ]
        assert claims_after and min(claims_after) >= until - 0.1, (pause.at, until, sorted(claims_after)[:3])
        others_done = [r for r in runs.values() if r.limit_key == other and pause.at < (r.finished_at or 0) < until]
        assert others_done, "no run of the other key completed during the pause"
        throttled = [a for a in store.attempts(asker) if a.decided_by == "throttled"]
        assert len(throttled) == 1 and throttled[0].state == "FAILED"
        releases = [e for e in store.events(asker) if e.kind == "lease_released"]
        assert [e.decision for e in releases] == ["throttled"]
    finally:
        store.close()
    assert one_order_each(shop, ids)
    requests = shop.visits(paced)["requests"]
    [refused] = [r for r in requests if r["status"] == 429]
    later = [r["start"] for r in requests if r["start"] > refused["end"]]
    assert later and min(later) >= refused["end"] + 3 - 0.3, (refused, sorted(later)[:3])


def test_a_direct_run_waits_for_its_keys_pause_and_for_a_throttle(tmp_path: Path, shop: Any) -> None:
    """In-process ``run`` (Engine.run) of a run whose key is paused waits with a notice and
    starts when the pause ends; when the site then throttles its order POST (Retry-After: 2),
    it waits out that pause too and goes on: SUCCEEDED, one order, one throttled attempt."""
    tag = tmp_path.name[-10:].replace("_", "-")
    key = f"direct-{tag}"
    store = open_store(tmp_path / "bw.db")
    loaded = load_flow(TEST_FLOWS / "budget_order.py")
    run, _ = Engine(store).prepare(loaded, {"base_url": shop.url, "item": f"direct-{tag}", "site": key})
    until = store.pause_limit(key, 2, "by hand")
    shop.set_faults(throttle=2, throttle_tag=key, throttle_times=1)
    notices: list[str] = []

    class Notices(Extension):
        def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None:
            notices.append(message)

    try:
        engine = Engine(store, browser=BrowserSettings.discover(), lease=LeaseSettings(ttl=30), extensions=[Notices()])
        final = asyncio.run(engine.run(loaded, run))
        assert final.state == RunState.SUCCEEDED
        claims = [e.at for e in store.events(run.id) if e.kind == "lease_claimed"]
        [pause] = [e for e in store.events(run.id) if e.kind == "limit_paused"]
        assert len(claims) == 2 and claims[0] >= until and claims[1] >= pause.detail["until"]
        assert sum("waiting: limit key" in n and "paused" in n for n in notices) == 2, notices
        assert [a.decided_by for a in store.attempts(run.id) if a.step_id == "submit"] == ["throttled", "return"]
    finally:
        store.close()
    assert len(shop.orders(f"{run.id}/submit")) == 1


BUSY_FLOW = """
from browserworker import Flow, StepContext

flow = Flow("busy-page", limit="busy.example")


@flow.step
async def look(ctx: StepContext) -> None:
    await ctx.page.goto(URL)
"""


def test_a_navigation_answered_429_pauses_the_key(tmp_path: Path, shop: Any) -> None:
    """An action's page navigation answered 429 with Retry-After: 5 (a GET the gate does not
    hold) pauses the run's key for ~5 s, journaled on the run; the action itself goes on."""
    path = tmp_path / "busy.py"
    path.write_text(BUSY_FLOW.replace("URL", repr(f"{shop.url}/busy?after=5")))
    store = open_store(tmp_path / "bw.db")
    loaded = load_flow(path)
    engine = Engine(store, browser=BrowserSettings.discover(), lease=LeaseSettings(ttl=30))
    try:
        run, _ = engine.prepare(loaded, {})
        final = asyncio.run(engine.run(loaded, run))
        assert final.state == RunState.SUCCEEDED
        [pause] = [e for e in store.events(run.id) if e.kind == "limit_paused"]
        assert pause.detail["key"] == "busy.example" and pause.detail["status"] == 429
        assert pause.detail["url"] == f"{shop.url}/busy"
        assert pause.detail["until"] - pause.at == pytest.approx(5, abs=0.2)
        [budget] = store.limits()
        assert budget.key == "busy.example" and budget.paused
    finally:
        store.close()
