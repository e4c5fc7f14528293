"""PostgreSQL benchmark, our side: the control plane, claim latency and recovery on the PG store.

Every measurement gets a fresh database on the local server (``pg_peers.fresh_database``:
created, then dropped) opened with ``open_store("postgresql://...")``.

- :func:`ours_pg`: the control-plane drain of benchmark (b), unchanged: each run makes the
  store calls the executor and its gate make for a run of one effect sending one request
  (claim, RUNNING, the effect's boundary, intent, dispatch, response, outcome, SUCCEEDED; the
  full journal), through one AsyncStore (group commit) per worker process, 64 runs in flight
  per process (``control_plane.drain_store``). runs/s = runs / (last finish - first start).
- :func:`claim_latency_pg`: with backlog 0, the real worker (``browserworker worker``, one
  Chromium, concurrency 1) idle on an empty queue; the parent enqueues one run of
  ``flows/hold.py`` at a time (each after the previous one finished, plus 50 ms, so the worker
  is idle at each) and reads the claim's own journal entry: ``lease_claimed``'s ``at`` minus
  ``time.time()`` taken just before the enqueue call (the peers are timed the same way: from
  before the defer call to the job's start); its ``waited`` (claim minus ``created_at``) too.
  With a backlog of 100/10k/100k queued runs (bulk-loaded with COPY into ``runs``, then
  ANALYZE), the time of a ``claim_next`` call, as benchmark (c) does on SQLite.
- :func:`recovery_pg`: a worker holding leases on ``held`` runs (each inside a step) is
  SIGKILLed; a second worker, started before and idle (it has run a probe), reclaims and
  finishes them; the journal gives the phases (lease expired, requeued, claimed, finished). Seconds from the kill to the last
  run's ``finished_at``, against the lease TTL + the clock-skew tolerance + 1 s. ``remote=True``
  makes the dead owner look like another host's (its pid cannot be checked), so only lease
  expiry frees the runs; otherwise the survivor sees the owner's pid gone at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import pg_peers  # noqa: E402

from browserworker.store.postgres._store import DEFAULT_SCHEMA, ENV_SCHEMA  # noqa: E402

HOLD_FLOW = HERE / "flows" / "hold.py"
# the schema open_store(url) puts the store in
SCHEMA = os.environ.get(ENV_SCHEMA) or DEFAULT_SCHEMA
SKEW = 0.5  # LeaseSettings' default clock-skew tolerance (the worker CLI does not change it)


# --- (b) on PostgreSQL -------------------------------------------------------------------------


def ours_pg(workers: int, runs: int, concurrency: int = 64) -> dict[str, Any]:
    """``runs`` one-effect runs drained by ``workers`` processes with ``concurrency`` in flight each."""
    import control_plane

    from browserworker.states import RunState
    from browserworker.store import open_store

    with pg_peers.fresh_database("ours") as dsn:
        control_plane.seed(dsn, runs)  # type: ignore[arg-type]  # open_store takes a URL too
        start = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "worker", dsn, str(concurrency)], stdout=subprocess.PIPE, text=True
            )
            for _ in range(workers)
        ]
        outs = [json.loads(p.communicate()[0]) for p in procs]
        wall = time.perf_counter() - start
        store = open_store(dsn)
        rows = store.list_runs(limit=runs + 1)
        store.close()
    ok = sum(1 for r in rows if r.state == RunState.SUCCEEDED)
    assert ok == runs, f"only {ok}/{runs} runs succeeded"
    first = min(r.started_at for r in rows if r.started_at is not None)
    last = max(r.finished_at for r in rows if r.finished_at is not None)
    return {
        "runs": runs,
        "workers": workers,
        "concurrency": concurrency,
        "runs_per_s": runs / (last - first),
        "wall_incl_startup": wall,
        "commits_per_run": sum(o["commits"] for o in outs) / runs,
        "calls_per_run": sum(o["calls"] for o in outs) / runs,
        "worker_cpu_ms_per_run": sum(o["cpu_s"] for o in outs) / runs * 1000,
    }


def _worker_child(dsn: str, concurrency: int) -> None:
    import control_plane

    from browserworker.store import open_store

    store = open_store(dsn)
    cpu = time.process_time()
    out = asyncio.run(control_plane.drain_store(store, concurrency))
    print(json.dumps({**out, "cpu_s": time.process_time() - cpu}))


def statements_pg(runs: int = 2000, concurrency: int = 64) -> dict[str, Any]:
    """What the drain of :func:`ours_pg` sends the server per run, counted in this process (not
    timed: the counting costs CPU): statements (each execution: a pipeline of 64 is 64, a COPY
    is one) and round trips (each ``execute``, pipeline or ``COPY`` waited for is one)."""
    import control_plane
    import psycopg

    from browserworker.store import open_store

    counts = {"statements": 0, "round_trips": 0}
    cursor = psycopg.Cursor
    execute, executemany, copy = cursor.execute, cursor.executemany, cursor.copy

    def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        counts["round_trips"] += 1
        return execute(self, query, *args, **kwargs)

    def counted_executemany(self: Any, query: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        params = list(params)
        counts["statements"] += len(params)
        counts["round_trips"] += 1
        return executemany(self, query, params, *args, **kwargs)

    def counted_copy(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        counts["round_trips"] += 1
        return copy(self, *args, **kwargs)

    with pg_peers.fresh_database("statements") as dsn:
        control_plane.seed(dsn, runs)  # type: ignore[arg-type]
        store = open_store(dsn)
        store.now()  # the pool's first connection and the clock's reading: not per run
        cursor.execute, cursor.executemany, cursor.copy = counted_execute, counted_executemany, counted_copy  # type: ignore[method-assign]
        try:
            out = asyncio.run(control_plane.drain_store(store, concurrency))
        finally:
            cursor.execute, cursor.executemany, cursor.copy = execute, executemany, copy  # type: ignore[method-assign]
    assert out["runs"] == runs
    return {
        "runs": runs,
        "concurrency": concurrency,
        "statements_per_run": counts["statements"] / runs,
        "round_trips_per_run": counts["round_trips"] / runs,
        "store_calls_per_run": out["calls"] / runs,
    }


# --- (c) on PostgreSQL -------------------------------------------------------------------------


def claim_latency_pg(backlog: int, samples: int = 300) -> dict[str, Any]:
    """Claim latency with ``backlog`` queued runs; 0 is the idle worker's enqueue -> claimed."""
    if backlog == 0:
        return idle_claim_pg(min(samples, 200))
    import claims

    from browserworker.store import open_store

    with pg_peers.fresh_database("claims") as dsn:
        store = open_store(dsn)
        bulk_backlog(dsn, backlog + samples)
        times = claims.timed_claims(store, samples)
        store.close()
    return {"backlog": backlog, "how": "claim_next call", **pg_peers.percentiles(times)}


def bulk_backlog(dsn: str, n: int) -> None:
    """``n`` QUEUED runs in ``runs`` by COPY (for the benchmark only: what ``enqueue`` would write,
    without its events), then ANALYZE, as benchmark (c) seeds SQLite with executemany."""
    import psycopg

    from browserworker._canonical import canonical_json

    now = time.time()
    with psycopg.connect(dsn) as conn:
        with conn.cursor() as cur:
            with cur.copy(
                f"COPY {SCHEMA}.runs (id, flow_name, inputs_json, queue, priority, state, created_at, "
                "updated_at) FROM STDIN"
            ) as copy:
                for i in range(n):
                    copy.write_row(
                        (
                            f"c-{i:07d}",
                            "noop",
                            canonical_json({"i": i}),
                            "default",
                            i % 3,
                            "QUEUED",
                            now + i * 1e-6,
                            now,
                        )
                    )
        conn.commit()
        conn.autocommit = True
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.runs")


def _env() -> dict[str, str]:
    import browser_bench

    return browser_bench._env()


def _worker(dsn: str, *, concurrency: int = 1, ttl: float = 30.0) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        "-m",
        "browserworker",
        "worker",
        "--db",
        dsn,
        "--concurrency",
        str(concurrency),
        "--lease-ttl",
        str(ttl),
    ]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=ROOT)


def _wait(what: str, ready: Any, timeout: float = 120.0, every: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def idle_claim_pg(samples: int = 200) -> dict[str, Any]:
    """Enqueue -> claimed for the real worker idle on an empty queue (see the module docstring)."""
    from browserworker.control import enqueue
    from browserworker.flow import load_flow
    from browserworker.states import RunState
    from browserworker.store import open_store

    loaded = load_flow(HOLD_FLOW)
    lags: list[float] = []
    waited: list[float] = []
    with pg_peers.fresh_database("idle") as dsn:
        store = open_store(dsn)
        worker = _worker(dsn)
        try:
            for i in range(samples + 1):  # the first run starts Chromium: not a sample
                t0 = time.time()
                run = enqueue(store, loaded, {})
                _wait("a run to finish", lambda: store.get_run(run.id).state == RunState.SUCCEEDED)  # noqa: B023
                claim = next(e for e in store.events(run.id) if e.kind == "lease_claimed")
                if i:
                    lags.append(claim.at - t0)
                    waited.append(claim.detail["waited"])
                time.sleep(0.05)  # the worker back in its idle wait
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
            store.close()
    journal = pg_peers.percentiles(waited)
    return {
        "backlog": 0,
        "how": "idle `browserworker worker -n 1`: lease_claimed.at - time before enqueue",
        **pg_peers.percentiles(lags),
        "waited_p50_ms": journal["p50_ms"],
        "waited_p99_ms": journal["p99_ms"],
    }


# --- (d) on PostgreSQL -------------------------------------------------------------------------


def recovery_pg(ttl: float = 6.0, held: int = 4, reps: int = 3, remote: bool = True) -> dict[str, Any]:
    """SIGKILL a worker holding ``held`` leases; seconds until another worker finished them all."""
    phases = [_one_recovery(ttl, held, remote) for _ in range(reps)]
    times = [p["finished_s"] for p in phases]
    target = ttl + SKEW + 1.0
    med = statistics.median(times)
    return {
        "ttl_s": ttl,
        "skew_s": SKEW,
        "held": held,
        "recovery_s": med,
        "all_s": times,
        "target_s": target,
        "met": med <= target,
        "phases_median_s": {k: statistics.median(p[k] for p in phases) for k in phases[0]},
        "path": "lease expiry (remote owner)" if remote else "same host (owner pid gone)",
    }


def _one_recovery(ttl: float, held: int, remote: bool) -> dict[str, float]:
    """One kill: the phases after it, in seconds, each the latest over the held runs."""
    from browserworker.control import enqueue
    from browserworker.flow import load_flow
    from browserworker.states import RunState
    from browserworker.store import open_store

    loaded = load_flow(HOLD_FLOW)
    with tempfile.TemporaryDirectory() as tmp, pg_peers.fresh_database("recovery") as dsn:
        hold = Path(tmp) / "hold"
        hold.touch()
        store = open_store(dsn)
        ids = [enqueue(store, loaded, {"hold": str(hold)}).id for _ in range(held)]
        victim = _worker(dsn, concurrency=held, ttl=ttl)
        survivor = None
        try:
            _wait("the victim to start every run", lambda: _all_in(store, ids, RunState.RUNNING), every=0.02)
            survivor = _worker(dsn, concurrency=held, ttl=ttl)
            # the survivor up and idle: it ran a probe (the victim's slots are all taken)
            probe = enqueue(store, loaded, {}).id
            _wait("the survivor to run a probe", lambda: _all_in(store, [probe], RunState.SUCCEEDED), every=0.02)
            if remote:  # before the kill, so the survivor never sees a dead local pid
                _set_owner_host(dsn, ids, "elsewhere")
            victim.send_signal(signal.SIGKILL)
            killed_at = time.time()
            victim.wait()
            hold.unlink()
            _wait("the runs to be recovered", lambda: _all_in(store, ids, RunState.SUCCEEDED), every=0.02)
            return _phases(store, ids, killed_at)
        finally:
            for proc in (victim, survivor):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)
            store.close()


def _all_in(store: Any, ids: list[str], state: Any) -> bool:
    return all(store.get_run(i).state == state for i in ids)


def _phases(store: Any, ids: list[str], killed_at: float) -> dict[str, float]:
    """From the journal: when (after the kill) the last held lease expired, the last was found lost
    and requeued, the last was claimed again, and the last run finished."""
    expired, found, claimed = [], [], []
    for run_id in ids:
        events = store.events(run_id)
        lost = next(e for e in events if e.kind == "lease_expired")
        expired.append(lost.detail["expired_at"])
        found.append(lost.detail["detected_at"])
        claimed.append(max(e.at for e in events if e.kind == "lease_claimed"))
    finished = [store.get_run(i).finished_at for i in ids]
    return {
        "lease_expired_s": max(expired) - killed_at,
        "requeued_s": max(found) - killed_at,
        "claimed_again_s": max(claimed) - killed_at,
        "finished_s": max(finished) - killed_at,
    }


def _set_owner_host(dsn: str, ids: list[str], host: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {SCHEMA}.runs SET owner_host = %s WHERE id = ANY(%s)", (host, ids))


def all_ours() -> dict[str, Any]:
    """Every figure of our side, for ``benchmarks/run.py --postgres``."""
    return {
        "control_plane": [ours_pg(1, 3000), ours_pg(2, 3000)],
        "claims": [claim_latency_pg(n) for n in (0, 100, 10_000, 100_000)],
        "recovery": [recovery_pg(remote=False), recovery_pg(remote=True)],
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        _worker_child(sys.argv[2], int(sys.argv[3]))
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        print(json.dumps(all_ours(), indent=2))
