"""The benchmarks measure what the kit really does."""

from __future__ import annotations

import asyncio
import importlib.util
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from browserworker.runtime import BrowserSettings, Engine, WorkerSettings
from browserworker.states import RunState
from browserworker.store import NewRun, SQLiteStore
from browserworker.store.aio import AsyncStore
from tests.support.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"

# how a run gets its lease differs (`run` leases its own run, a worker claims the next one),
# and heartbeats come with the clock, not with the steps
_LEASING = {"claim_run", "claim_next", "heartbeat", "get_run"}
# what a worker process does besides its runs: its registry row, the reclaimer, expired approvals,
# the login sessions it leaves at its end
_WORKER_ONLY = {
    "register_worker",
    "worker_heartbeat",
    "mark_worker",
    "reclaim_expired",
    "reclaim_dead_owners",
    "expire_due",
    "next_expiry_in",
    "leftovers",
}

ONE_EFFECT = textwrap.dedent("""
    from pydantic import BaseModel
    from browserworker import Flow, StepContext

    class Target(BaseModel):
        url: str

    flow = Flow("one-effect", inputs=Target)

    @flow.effect(idempotent=True)
    async def effect(ctx: StepContext[Target]) -> dict:
        await ctx.page.goto(ctx.inputs.url)
        status = await ctx.page.evaluate("fetch('/api/reset', {method: 'POST'}).then(r => r.text().then(() => r.status))")
        return {"status": status}
""")


def _bench_module(name: str) -> Any:
    """Load ``benchmarks/<name>.py`` (not a package) as a module."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the name of every store method called through any AsyncStore."""
    names: list[str] = []
    original = AsyncStore.call

    async def recording(self: AsyncStore, fn: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(fn.__name__)
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(AsyncStore, "call", recording)
    return names


def test_the_control_plane_benchmark_makes_the_store_calls_of_a_real_run(
    tmp_path: Path, shop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Benchmark (b) times, without a browser, the store calls that a worker's run of one effect
    sending one request makes in the executor and its gate: the same methods, as many times
    each (the worker's claim starts the run: no separate RUNNING write)."""
    control_plane = _bench_module("control_plane")

    calls = _calls(monkeypatch)
    control_plane.seed(tmp_path / "bench.db", 1)
    assert asyncio.run(control_plane._drain(tmp_path / "bench.db", 1))["runs"] == 1
    bench = calls[:]

    flow_file = tmp_path / "one_effect.py"
    flow_file.write_text(ONE_EFFECT)
    store = SQLiteStore(tmp_path / "real.db")
    store.create_run(NewRun(id="real-1", flow_name="one-effect", flow_path=str(flow_file), inputs={"url": shop.url}))
    worker = Engine(store, browser=BrowserSettings.discover()).worker(WorkerSettings(concurrency=1, once=True))
    del calls[:]
    assert asyncio.run(worker.run()).finished == {"SUCCEEDED": 1}
    real = [name for name in calls if name not in _WORKER_ONLY]
    [attempt] = store.attempts("real-1")
    assert (
        [o.status for o in store.outbox(attempt.id)] == [200] == [attempt.result["status"]]
    )  # the POST went out through the gate

    def made(names: list[str]) -> Counter[str]:
        return Counter(n for n in names if n not in _LEASING)

    assert made(real) == made(bench), ",".join(real)
    assert "claim_next" in bench and "record_response" in bench


def test_the_postgres_control_plane_benchmark_keeps_the_full_journal(pg_url: str) -> None:
    """On PostgreSQL, the drain that benchmark pg-b times leaves each run SUCCEEDED with its whole
    journal: the effect's attempt SUCCEEDED, its released request with the response, the events."""
    from browserworker.store import open_store

    control_plane = _bench_module("control_plane")
    control_plane.seed(pg_url, 3)
    assert asyncio.run(control_plane.drain_store(open_store(pg_url), 2))["runs"] == 3
    store = open_store(pg_url)
    try:
        for run in store.list_runs():
            assert run.state == RunState.SUCCEEDED
            [attempt] = store.attempts(run.id)
            assert (attempt.kind, attempt.state) == ("effect", "SUCCEEDED")
            [sent] = store.outbox(attempt.id)
            assert sent.status == 200
            kinds = {e.kind for e in store.events(run.id)}
            assert kinds == {"run_created", "lease_claimed", "run_state", "intent", "dispatched", "attempt_state"}, (
                kinds
            )
    finally:
        store.close()


def test_the_postgres_claim_benchmark_seeds_runs_the_store_claims_in_order(pg_url: str) -> None:
    """Benchmark pg-c's bulk COPY writes rows the PostgreSQL store claims as ordinary QUEUED runs,
    by priority then age (so the timed claims walk the real claim index)."""
    from browserworker.journal import this_owner
    from browserworker.store import open_store

    pg_control_plane = _bench_module("pg_control_plane")
    pg_control_plane.bulk_backlog(pg_url, 6)
    store = open_store(pg_url)
    try:
        claimed = [store.claim_next(this_owner("t"), ["default"], 30.0) for _ in range(7)]
    finally:
        store.close()
    assert claimed[-1] is None
    runs = [r for r in claimed if r is not None]
    assert [(r.priority, r.id) for r in runs] == sorted(((r.priority, r.id) for r in runs), key=lambda p: (-p[0], p[1]))
    assert {r.state for r in runs} == {RunState.LEASED} and {r.inputs["i"] for r in runs} == set(range(6))


def test_a_verdict_says_the_pairs_median_it_goes_by() -> None:
    """A target is judged by the ABBA pairs: met in every pair, by their median only, or not. A
    line whose ratio is of the sides' medians can show a ratio under the target while the pairs'
    median is over it; the verdict then says that median, so the line does not contradict itself."""
    figures = _bench_module("figures")
    pairs = [0.895, 0.957, 0.983, 1.009, 1.058, 1.062, 1.067, 1.074, 1.116]  # a ratio of medians of 1.01x
    assert figures.verdict(pairs, lambda v: v <= 1.05, fmt="{:.3f}x") == "no (4 of 9 pairs; their median 1.058x)"
    assert figures.verdict(pairs, lambda v: v <= 1.06, fmt="{:.3f}x") == (
        "yes by the median only (5 of 9 pairs; their median 1.058x)"
    )
    assert figures.verdict(pairs, lambda v: v <= 1.2, fmt="{:.3f}x") == "yes, in every one of 9 pairs"
    assert figures.verdict(pairs, lambda v: v <= 1.05) == "no (4 of 9 pairs)"


def test_the_agent_line_times_a_snapshot_of_a_big_page_served_on_loopback() -> None:
    """(g)'s big page is served whole on loopback while its block runs, and its row is in the
    table where the run measured it; a run from before it had that row renders without it."""
    import sys
    import urllib.request

    sys.path.insert(0, str(BENCHMARKS))
    try:
        agent = _bench_module("agent_tools")
    finally:
        sys.path.remove(str(BENCHMARKS))
    with agent._big_page() as url:
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.read() == agent.BIG_PAGE
    assert agent.BIG_PAGE.count(b"<button>") == agent.BIG_ROWS
    side = {
        "ours_ms": 6.5, "playwright_ms": 5.8, "plain_mcp_ms": 6.1,
        "ratio_playwright": 1.12, "ratio_playwright_range": [1.0, 1.25],
        "ratio_plain_mcp": 1.06, "ratio_plain_mcp_range": [0.98, 1.1],
        "plain_mcp_over_playwright": 1.05, "plain_mcp_over_playwright_range": [0.97, 1.2],
    }  # fmt: skip
    submit = {"ours_ms": 380.0, "playwright_ms": 355.0, "added_ms": 25.0}
    before = {"snapshot": side, "fill": side, "submit": submit, "load": [1.0, 1.2]}
    now = {**before, "big_snapshot": {**side, "lines": 560}}
    assert "page of" not in agent.render(before) and len(agent.render(before).splitlines()) == 3
    rows = agent.render(now).splitlines()
    assert len(rows) == 4 and rows[1].startswith(
        f"| g | `snapshot` tool on a page of 560 lines ({agent.BIG_ROWS} table"
    )
    assert "rounds of 10" in rows[1] and "1.12x (1.00-1.25)" in rows[1] and "the median only" in rows[1]


def test_the_fleet_simulation_makes_the_store_calls_of_a_run_of_benchmark_a(
    tmp_path: Path, shop: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fleet_sim.py`` stands for a fleet running benchmark (a)'s flow (six actions, four
    effects): one of its simulated runs makes the store calls a worker's run of that flow makes,
    the same methods as many times each, with its pauses taken out; it keeps the browser state
    after every effect, the real run only after those that changed it."""
    from browserworker.store import open_store

    fleet = _bench_module("fleet_sim")
    monkeypatch.setattr(fleet, "STEP", (0.0, 0.0))
    monkeypatch.setattr(fleet, "RAMP", 0.0)
    store = open_store(pg_url)
    store.create_run(NewRun(id="sim-1", flow_name="sim", flow_path="sim.py", inputs={}))
    store.close()
    calls = _calls(monkeypatch)
    done = asyncio.run(fleet._host(pg_url, 1, time.time(), 4.0, 0))
    sim = calls[:]
    ended = open_store(pg_url).get_run("sim-1")
    assert ended is not None and ended.state == RunState.SUCCEEDED, done

    store = SQLiteStore(tmp_path / "real.db")
    flow_file = BENCHMARKS / "flows" / "ten_steps.py"
    store.create_run(
        NewRun(id="real-1", flow_name="ten-steps", flow_path=str(flow_file), inputs={"base_url": shop.url})
    )
    worker = Engine(store, browser=BrowserSettings.discover()).worker(WorkerSettings(concurrency=1, once=True))
    del calls[:]
    assert asyncio.run(worker.run()).finished == {"SUCCEEDED": 1}
    real = [name for name in calls if name not in _WORKER_ONLY]

    def made(names: list[str]) -> Counter[str]:
        return Counter(n for n in names if n not in _LEASING)

    # a state is kept after an effect only when it changed (the sandbox's session cookie changes
    # with the second it was signed in); the simulation keeps one after every effect
    kept = {"sim": made(sim).pop("record_event"), "real": made(real).pop("record_event")}
    assert 1 <= kept["real"] <= kept["sim"] == 4, kept
    assert made(sim) - Counter(record_event=4) == made(real) - Counter(record_event=kept["real"]), ",".join(real)
