"""A fleet of thousands of browsers on one PostgreSQL database, simulated (no browser).

Each simulated host is a process with one store (its pool, one ``AsyncStore`` with group
commit) and N slots. A slot claims a run (``claim_next``, timed) and makes the store calls a
run of six actions and four effects makes (the shape of benchmark (a)'s flow), with a real :class:`~browserworker.journal.Lease`
heartbeating it at the real cadence (TTL 30 s: every 10 s); between its steps it sleeps 0.5-2 s
(what a page would take): RUNNING (in the claim, as the worker claims), each action's attempt begun and finished, each effect's
boundary, intent, dispatch, response (a redirect, and its last answer) and outcome, and after each
effect but a last step the browser state it left (a ``state_kept`` event of the size the sandbox's
sealed state has, written every time, as for a site that re-signs its session cookie on each
answer; the executor skips a state unchanged since the last), SUCCEEDED.

The parent bulk-loads a backlog (COPY), then for each level of runs in flight (100 ... 10,000)
starts as many hosts as it takes, lets them ramp up, and measures a window: runs finished per
second, claim latency p50/p99, heartbeats per second, the database's CPU (its processes'
ticks, read from /proc) and its connections. The knee is the first level where adding runs in
flight stops adding throughput (runs/s per run in flight below 75% of the lowest level's),
claim p99 exceeds 250 ms, or leases are lost (heartbeats that did not get through in time).

    python benchmarks/fleet_sim.py [--levels 100,300,1000,3000,5000,10000] [--window 30]

Writes benchmarks/results/fleet_sim.{json,md}. Needs the server of $BROWSERWORKER_BENCH_PG
(default postgresql://postgres@127.0.0.1:5432); a database of its own, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LEVELS = (100, 300, 1000, 3000, 5000, 10000)
SLOTS_PER_HOST = 1000
RAMP = 12.0  # seconds a level runs before its window: the slots are busy, steps under way
TTL = 30.0
STEP = (0.5, 2.0)
# the shape of benchmark (a)'s flow (benchmarks/flows/ten_steps.py): 6 actions and 4 effects, in its order
STEPS = ("action", "effect", "action", "effect", "action", "effect", "action", "effect", "action", "action")
KEPT = (
    "x" * 390
)  # the sealed state's base64 after an effect of benchmark (a)'s flow on the sandbox: about 390 characters


# -- a simulated host -------------------------------------------------------------------------


async def _host(dsn: str, slots: int, start_at: float, window: float, seed: int) -> dict[str, Any]:
    from browserworker.errors import LeaseLost
    from browserworker.flow import Extensions
    from browserworker.journal import Lease, LeaseSettings, this_owner
    from browserworker.states import AttemptState, RunState
    from browserworker.store import open_store
    from browserworker.store.aio import AsyncStore

    rng = random.Random(seed)
    store = open_store(dsn)
    astore = AsyncStore(store)
    owner = this_owner("sim")
    settings = LeaseSettings(ttl=TTL)
    ext = Extensions()
    beats = 0
    # counted in the many form, which every heartbeat goes through (alone or with others of its
    # batch): wrapping store.heartbeat itself would hide it from the batch's coalescing
    runs = store.runs  # type: ignore[attr-defined]
    many = runs.heartbeats

    def counted(items: list[Any]) -> Any:
        nonlocal beats
        beats += len(items)
        return many(items)

    runs.heartbeats = counted
    window_start, window_end = start_at + RAMP, start_at + RAMP + window
    claims: list[float] = []
    done_in_window = 0
    lost = 0
    beats_at_start = 0

    async def pause() -> None:
        await asyncio.sleep(rng.uniform(*STEP))

    async def action(run_id: str, epoch: int, step: str) -> None:
        await astore.call(store.cancel_requested, run_id)  # as the executor asks before each action
        attempt = await astore.call(
            store.begin_attempt, run_id, epoch, step, "action", f"{run_id}/{step}", "fp", worker=owner.worker
        )
        await astore.call(
            store.finish_attempt, attempt, epoch, AttemptState.SUCCEEDED, decided_by="return", worker=owner.worker
        )

    async def effect(run_id: str, epoch: int, step: str, last: bool) -> None:
        await astore.call(store.effect_boundary, run_id, step)
        attempt = await astore.call(
            store.begin_attempt,
            run_id,
            epoch,
            step,
            "effect",
            f"{run_id}/{step}",
            "fp",
            worker=owner.worker,
            margin=5.0,
        )
        outbox = await astore.call(store.mark_dispatched, attempt, epoch, "POST", "sim://", margin=5.0)
        await asyncio.sleep(rng.uniform(0.05, 0.3))  # the site answers
        await astore.call(store.record_response, outbox, 303, "sim://", {"location": "/done"})
        await astore.call(store.record_final, outbox, 200, "sim://done")  # the redirect's last answer
        await astore.call(
            store.finish_attempt,
            attempt,
            epoch,
            AttemptState.SUCCEEDED,
            decided_by="return",
            result={"ok": True},
            worker=owner.worker,
        )
        if not last:  # as the executor keeps the browser state a done effect left (runtime/_kept.py)
            await astore.call(
                store.record_event,
                run_id,
                "state_kept",
                step_id=step,
                worker=owner.worker,
                epoch=epoch,
                detail={"sealed": KEPT},
            )

    async def one_run() -> bool:
        nonlocal done_in_window
        began = time.time()
        run = await astore.call(store.claim_next, owner, ["default"], TTL, start=True)  # as the worker claims
        if window_start <= began <= window_end:
            claims.append((time.time() - began) * 1000)
        if run is None:
            return False
        epoch = run.lease_epoch
        lease = Lease(astore, run.id, epoch, settings, ext)
        lease.start()
        try:
            if run.state != RunState.RUNNING:  # as the executor: a fresh run was started by its claim
                await astore.call(
                    store.advance_run, run.id, epoch, RunState.RUNNING, worker=owner.worker, decision="started"
                )
            for i, kind in enumerate(STEPS):
                await pause()
                if time.time() > window_end:  # measured no more: left as it is (a saturated level's
                    return True  # runs would take minutes to end, with the database dropped after)
                if kind == "action":
                    await action(run.id, epoch, f"s{i}")
                else:
                    await effect(run.id, epoch, f"s{i}", last=i == len(STEPS) - 1)
            lease.ending = True  # as RunJournal.end: a heartbeat racing the end is not a lost lease
            await astore.call(store.set_run_state, run.id, epoch, RunState.SUCCEEDED, worker=owner.worker)
        finally:
            await lease.stop()
        if window_start <= time.time() <= window_end:
            done_in_window += 1
        return True

    async def slot() -> None:
        nonlocal lost
        await asyncio.sleep(rng.uniform(0, 2.0))  # the slots of a host do not start in step
        while time.time() < window_end:
            try:
                if not await one_run():
                    await asyncio.sleep(0.5)
            except LeaseLost:  # the database did not keep up: a heartbeat or a write came too late
                lost += 1

    async def mark_window() -> None:
        nonlocal beats_at_start
        await asyncio.sleep(max(0.0, window_start - time.time()))
        beats_at_start = beats

    cpu0 = os.times()
    marking = asyncio.ensure_future(mark_window())
    await asyncio.gather(*(slot() for _ in range(slots)))
    await marking
    cpu1 = os.times()
    astore.close()
    store.close()
    return {
        "done": done_in_window,
        "claims_ms": claims,
        "beats": beats - beats_at_start,
        "leases_lost": lost,
        "cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
    }


# -- the parent ------------------------------------------------------------------------------


def _db_ticks() -> int:
    """CPU ticks (user + system) of every postgres process on this machine."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total


def _connections(dsn: str) -> int:
    import psycopg

    name = dsn.rsplit("/", 1)[1]
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
    return int(row[0]) if row else 0


def level(dsn: str, in_flight: int, window: float) -> dict[str, Any]:
    hosts = max(1, math.ceil(in_flight / SLOTS_PER_HOST))
    per_host = [in_flight // hosts + (1 if i < in_flight % hosts else 0) for i in range(hosts)]
    start_at = time.time() + 3.0  # time for the processes to start and open their stores
    env = {**os.environ, "BROWSERWORKER_DB_POOL": "4"}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "host", dsn, str(n), str(start_at), str(window), str(i)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i, n in enumerate(per_host)
    ]
    time.sleep(max(0.0, start_at + RAMP - time.time()))
    load0, ticks0 = os.getloadavg()[0], _db_ticks()
    time.sleep(window / 2)
    connections = _connections(dsn)
    time.sleep(max(0.0, start_at + RAMP + window - time.time()))
    ticks1, load1 = _db_ticks(), os.getloadavg()[0]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    claims = sorted(ms for o in outs for ms in o["claims_ms"])
    hz = os.sysconf("SC_CLK_TCK")
    return {
        "in_flight": in_flight,
        "hosts": hosts,
        "runs_per_s": sum(o["done"] for o in outs) / window,
        "claim_p50_ms": statistics.median(claims) if claims else None,
        "claim_p99_ms": claims[min(len(claims) - 1, int(len(claims) * 0.99))] if claims else None,
        "heartbeats_per_s": sum(o["beats"] for o in outs) / window,
        "leases_lost": sum(o["leases_lost"] for o in outs),
        "db_cpu_cores": (ticks1 - ticks0) / hz / window,
        "client_cpu_s": sum(o["cpu_s"] for o in outs),
        "connections": connections,
        "load": [round(load0, 2), round(load1, 2)],
    }


def knee(rows: list[dict[str, Any]]) -> int | None:
    """The first level where throughput per run in flight drops below 75% of the first level's,
    claim p99 exceeds 250 ms, or a lease is lost (a heartbeat did not get through in time)."""
    base = rows[0]["runs_per_s"] / rows[0]["in_flight"]
    for row in rows[1:]:
        slow = row["runs_per_s"] / row["in_flight"] < 0.75 * base or (row["claim_p99_ms"] or 0) > 250
        if slow or row["leases_lost"]:
            return int(row["in_flight"])
    return None


def render(out: dict[str, Any]) -> str:
    lines = [
        f"Simulated fleet on {out['server']} ({out['cores']} cores shared by the database and every host), "
        f"window {out['window']:.0f} s per level after a {RAMP:.0f} s ramp, steps {STEP[0]}-{STEP[1]} s apart, "
        f"lease TTL {TTL:.0f} s.",
        "",
        "| runs in flight | hosts | runs/s | claim p50 / p99 | heartbeats/s | leases lost | database CPU | connections | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in out["levels"]:
        claims = (
            f"{r['claim_p50_ms']:.1f} / {r['claim_p99_ms']:.1f} ms"
            if r["claim_p50_ms"] is not None
            else "no claim in the window"
        )
        lines.append(
            f"| {r['in_flight']:,} | {r['hosts']} | {r['runs_per_s']:.0f} | {claims} "
            f"| {r['heartbeats_per_s']:.0f} | {r['leases_lost']} | {r['db_cpu_cores']:.2f} cores | "
            f"{r['connections']} | {r['load'][0]}-{r['load'][1]} |"
        )
    k = out["knee"]
    lines += ["", f"The knee: {f'{k:,} runs in flight' if k else 'not reached at these levels'}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    import argparse

    import pg_control_plane
    import pg_peers

    from browserworker.store import open_store

    parser = argparse.ArgumentParser(prog="benchmarks/fleet_sim.py", description=__doc__.strip().splitlines()[0])
    parser.add_argument("--levels", default=",".join(str(n) for n in LEVELS), help="runs in flight, comma-separated")
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured per level")
    args = parser.parse_args(argv)
    levels = [int(n) for n in args.levels.split(",")]
    began = time.perf_counter()
    with pg_peers.fresh_database("fleet") as dsn:
        open_store(dsn).close()  # the schema
        # enough for every level never to run dry: a run takes at least 10 x 0.5 s
        backlog = sum(int(n / 5.0 * (args.window + RAMP + 5)) for n in levels)
        pg_control_plane.bulk_backlog(dsn, backlog)
        rows = []
        for n in levels:
            print(f"[fleet {time.perf_counter() - began:5.0f}s] {n} runs in flight", file=sys.stderr)
            rows.append(level(dsn, n, args.window))
            print(f"  {json.dumps(rows[-1])}", file=sys.stderr)
    out = {
        "server": pg_peers.server_version(),
        "cores": os.cpu_count(),
        "window": args.window,
        "backlog": backlog,
        "levels": rows,
        "knee": knee(rows),
        "seconds": round(time.perf_counter() - began),
    }
    results = HERE / "results"
    (results / "fleet_sim.json").write_text(json.dumps(out, indent=2))
    table = render(out)
    (results / "fleet_sim.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "host":
        dsn, slots, start_at, window, seed = sys.argv[2:7]
        result = asyncio.run(_host(dsn, int(slots), float(start_at), float(window), int(seed)))
        print(json.dumps(result))
    else:
        sys.exit(main(sys.argv[1:]))
