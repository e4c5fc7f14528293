"""PostgreSQL benchmark, the peers: procrastinate and PgQueuer no-op jobs on the local server.

Each measurement gets a fresh database on the same server (created, then dropped), its own
schema installed by the peer's own installer, and a fresh interpreter (a child process):

- **drain**: defer N no-op jobs with the peer's batch API (one process, not timed), then W
  worker processes (1 or 2) drain them to an empty queue; the drain is timed from the first
  worker's start (its library already imported) to the last one's end, its last completions
  flushed; ``jobs_per_s`` = N / that. procrastinate: ``run_worker_async(wait=False,
  concurrency=C)`` (C jobs in flight; it fetches one job per query, by design), its psycopg pool
  raised to C + 2 connections so that the pool does not cap C. PgQueuer:
  ``QueueManager.run(mode=drain)`` with its default batch of 10 jobs per dequeue and no cap on
  jobs in flight (its defaults), over one asyncpg connection.
- **idle claim latency**: one worker idle on its LISTEN/NOTIFY wake-up; the parent defers one
  job at a time (30 ms apart, so the worker is idle at each) carrying ``time.time()`` taken just
  before the defer call; the job's body takes ``time.time()`` again when it starts. p50/p99
  of the differences (defer commit + notification + fetch + dispatch).

:data:`PROMISES` says what each peer guarantees, from its own documentation.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SERVER = os.environ.get("BROWSERWORKER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
PREFIX = "pgbench_"
PEERS = ("procrastinate", "pgqueuer")
_PACE = 0.03  # seconds between two deferred jobs of the latency sample: the worker is idle at each
_CHUNK = 1000  # jobs per batch insert when deferring the drain's backlog
_counter = itertools.count()

PROMISES: dict[str, dict[str, str]] = {
    "procrastinate": {
        "delivery": "at most once by default: a fetched job is marked 'doing' in the fetch's own "
        "transaction; if its worker dies it stays 'doing' (workers heartbeat, and "
        "JobManager.get_stalled_jobs finds such jobs and retry_job requeues them, only "
        "when you call them, e.g. from a periodic task): at least once then",
        "retries": "opt-in per task (retry=N or a RetryStrategy on exceptions); none by default",
        "locks": "lock=...: jobs sharing a lock run one at a time, in order; queueing_lock=...: at most "
        "one queued job per key",
        "journal": "a job row (status todo/doing/succeeded/failed...) and procrastinate_events "
        "(deferred, started, succeeded...) per job; nothing about what the task did: no "
        "record of side effects, no fencing of a stalled worker's late writes",
        "wake-up": "LISTEN/NOTIFY on insert, polling every 5 s as a fallback",
    },
    "pgqueuer": {
        "delivery": "at least once: a dequeue (FOR UPDATE SKIP LOCKED) marks jobs 'picked' and the "
        "worker heartbeats them; a picked job whose heartbeat is older than the heartbeat "
        "timeout (30 s) is picked again by any worker; completion is buffered (batch or "
        "timeout) and moves the job to pgqueuer_log, so a crash before the flush re-runs a "
        "finished job",
        "retries": "opt-in (RetryRequested, or the DatabaseRetryEntrypointExecutor); by default a failed "
        "job is logged as 'exception' and deleted (on_failure='hold' keeps it)",
        "locks": "per-entrypoint concurrency_limit enforced in SQL across workers; dedupe_key: at most "
        "one queued or picked job per key",
        "journal": "pgqueuer_log: one row per status change (queued, picked, successful/exception), "
        "aggregated into pgqueuer_statistics; nothing about what the job did: no record of "
        "side effects, no fencing of a job that outlived its heartbeat",
        "wake-up": "LISTEN/NOTIFY (a trigger on the queue table), dequeue_timeout (30 s) as a fallback",
    },
}


# --- databases -------------------------------------------------------------------------------


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def fresh_database(tag: str) -> Iterator[str]:
    """A new, empty database on the benchmark server, dropped afterwards; yields its URL."""
    name = f"{PREFIX}{tag}_{os.getpid()}_{next(_counter)}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        yield f"{SERVER}/{name}"
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def server_version() -> str:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres") as conn:
        row = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW synchronous_commit").fetchone()
    assert row is not None and fsync is not None
    return f"PostgreSQL {row[0]} (synchronous_commit={fsync[0]})"


def raw_commit_rate(n: int = 500) -> float:
    """Commits/s of one-row INSERT transactions on one connection: the server's fsync ceiling."""
    import psycopg

    with fresh_database("raw") as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x int)")
        start = time.perf_counter()
        for i in range(n):
            conn.execute("INSERT INTO t VALUES (%s)", (i,))
        return n / (time.perf_counter() - start)


# --- procrastinate (child side) --------------------------------------------------------------


def _procrastinate_app(dsn: str, pool: int, body: Callable[[dict[str, Any]], Awaitable[None]]) -> Any:
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=min(pool, 4), max_size=pool)
    )

    @app.task(name="noop")
    async def noop(**payload: Any) -> None:
        await body(payload)

    app.noop = noop  # type: ignore[attr-defined]
    return app


async def _procrastinate_defer(app: Any, n: int) -> None:
    for start in range(0, n, _CHUNK):
        await app.noop.batch_defer_async(*({"i": i} for i in range(start, min(n, start + _CHUNK))))


async def procrastinate_prepare(dsn: str, n: int) -> None:
    app = _procrastinate_app(dsn, 2, _never)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        await _procrastinate_defer(app, n)


async def procrastinate_drain(dsn: str, concurrency: int) -> None:
    async def nothing(payload: dict[str, Any]) -> None:
        return None

    app = _procrastinate_app(dsn, concurrency + 2, nothing)
    async with app.open_async():
        await app.run_worker_async(
            concurrency=concurrency, wait=False, listen_notify=False, install_signal_handlers=False
        )


class Lags:
    """What a serving worker's job bodies collect: the warm-up job (``i < 0``) prints "ready" (the
    worker is up and listening); every other job its lag from the ``t`` it carries to its start."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        self.got: list[float] = []
        self.enough = asyncio.Event()

    def record(self, payload: dict[str, Any]) -> None:
        lag = time.time() - payload["t"]
        if payload["i"] < 0:
            print("ready", flush=True)
            return
        self.got.append(lag)
        if len(self.got) >= self.samples:
            self.enough.set()


async def procrastinate_serve(dsn: str, samples: int) -> list[float]:
    lags = Lags(samples)

    async def record(payload: dict[str, Any]) -> None:
        lags.record(payload)

    app = _procrastinate_app(dsn, 4, record)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        worker = asyncio.create_task(app.run_worker_async(concurrency=1, install_signal_handlers=False))
        await app.noop.defer_async(i=-1, t=time.time())
        await lags.enough.wait()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    return lags.got


async def procrastinate_feed(dsn: str, samples: int) -> None:
    app = _procrastinate_app(dsn, 1, _never)
    async with app.open_async():
        for i in range(samples):
            await app.noop.defer_async(i=i, t=time.time())
            await asyncio.sleep(_PACE)


async def _never(payload: dict[str, Any]) -> None:  # pragma: no cover - the feeder runs no jobs
    raise AssertionError("the feeder runs no jobs")


# --- PgQueuer (child side) -------------------------------------------------------------------


async def _pgqueuer(dsn: str, body: Callable[[Any], Awaitable[None]]) -> tuple[Any, Any, Any]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    conn = await asyncpg.connect(dsn)
    driver = AsyncpgDriver(conn)
    queries = Queries(driver)
    if not await queries.has_table("pgqueuer"):
        await queries.install()
    qm = QueueManager(queries)

    @qm.entrypoint("noop")
    async def noop(job: Any) -> None:
        await body(job)

    return conn, queries, qm


async def pgqueuer_prepare(dsn: str, n: int) -> None:
    conn, queries, _ = await _pgqueuer(dsn, _never)
    for start in range(0, n, _CHUNK):
        k = min(n, start + _CHUNK) - start
        await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
    await conn.close()


async def pgqueuer_drain(dsn: str, concurrency: int) -> None:
    from pgqueuer.domain.types import QueueExecutionMode

    async def nothing(job: Any) -> None:
        return None

    conn, _, qm = await _pgqueuer(dsn, nothing)
    await qm.run(batch_size=concurrency, mode=QueueExecutionMode.drain)  # no cap on jobs in flight (its default)
    if not conn.is_closed():
        await conn.close()


async def pgqueuer_serve(dsn: str, samples: int) -> list[float]:
    lags = Lags(samples)

    async def record(job: Any) -> None:
        lags.record(json.loads(job.payload))

    conn, queries, qm = await _pgqueuer(dsn, record)
    worker = asyncio.create_task(qm.run())
    await asyncio.sleep(0)
    await queries.enqueue("noop", json.dumps({"i": -1, "t": time.time()}).encode())
    await lags.enough.wait()
    qm.shutdown.set()
    await worker
    return lags.got


async def pgqueuer_feed(dsn: str, samples: int) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    for i in range(samples):
        await queries.enqueue("noop", json.dumps({"i": i, "t": time.time()}).encode())
        await asyncio.sleep(_PACE)
    await conn.close()


_PREPARE = {"procrastinate": procrastinate_prepare, "pgqueuer": pgqueuer_prepare}
_DRAIN = {"procrastinate": procrastinate_drain, "pgqueuer": pgqueuer_drain}
_IMPORTS = {"procrastinate": ("procrastinate",), "pgqueuer": ("asyncpg", "pgqueuer", "pgqueuer.domain.types")}
#: how many jobs a drain finished: (query, its expected result)
_DONE = {
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
    "pgqueuer": "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
}
_HOW = {
    "procrastinate": "run_worker_async(concurrency={c}, wait=False), a psycopg pool of {c} + 2; one fetch query "
    "per job",
    "pgqueuer": "QueueManager.run(mode=drain, batch_size={c}), no cap on jobs in flight (its default), one "
    "asyncpg connection",
}
_SERVE = {"procrastinate": procrastinate_serve, "pgqueuer": pgqueuer_serve}
_FEED = {"procrastinate": procrastinate_feed, "pgqueuer": pgqueuer_feed}


# --- the parent side -------------------------------------------------------------------------


def _child(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *args]


def drain(peer: str, jobs: int, concurrency: int, workers: int = 1) -> dict[str, Any]:
    """``jobs`` no-op jobs of ``peer`` deferred, then drained by ``workers`` worker processes
    (``concurrency``: procrastinate's jobs in flight, PgQueuer's batch size), in a fresh database.
    The drain is timed from the first worker's start to the last one's end (each reports both)."""
    import psycopg

    with fresh_database(peer) as dsn:
        t0 = time.perf_counter()
        prepared = subprocess.run(_child("prepare", peer, dsn, str(jobs)), capture_output=True, text=True, timeout=900)
        defer_s = time.perf_counter() - t0
        if prepared.returncode != 0:
            return {"peer": peer, "concurrency": concurrency, "error": _last_line(prepared.stderr)}
        procs = [
            subprocess.Popen(
                _child("drain", peer, dsn, str(concurrency)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(workers)
        ]
        outs = [p.communicate(timeout=900) for p in procs]
        if any(p.returncode for p in procs):
            return {
                "peer": peer,
                "concurrency": concurrency,
                "error": _last_line(next(err for p, (_, err) in zip(procs, outs, strict=True) if p.returncode)),
            }
        spans = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
        with psycopg.connect(dsn) as conn:
            row = conn.execute(_DONE[peer]).fetchone()
        done = int(row[0]) if row else 0
    assert done == jobs, f"{peer}: only {done}/{jobs} jobs succeeded"
    seconds = max(s["end"] for s in spans) - min(s["start"] for s in spans)
    return {
        "peer": peer,
        "jobs": jobs,
        "workers": workers,
        "concurrency": concurrency,
        "drain_s": seconds,
        "jobs_per_s": jobs / seconds,
        "worker_cpu_ms_per_job": sum(s["cpu_s"] for s in spans) / jobs * 1000,
        "defer_incl_startup_s": defer_s,
        "how": _HOW[peer].format(c=concurrency),
    }


def idle_latency(peer: str, samples: int = 200) -> dict[str, Any]:
    """Enqueue -> job started for an idle worker of ``peer``, over ``samples`` paced jobs."""
    with fresh_database(f"{peer}_idle") as dsn:
        proc = subprocess.Popen(
            _child("serve", peer, dsn, str(samples)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            ready = proc.stdout.readline().strip()
            if ready != "ready":
                proc.kill()
                return {"peer": peer, "error": ready or _last_line(proc.communicate()[1])}
            asyncio.run(_FEED[peer](dsn, samples))
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        return {"peer": peer, "error": _last_line(stderr)}
    return {"peer": peer, **percentiles(json.loads(stdout.strip().splitlines()[-1]))}


def percentiles(seconds: list[float]) -> dict[str, Any]:
    """p50 and p99 (nearest rank) in milliseconds of a sample in seconds."""
    times = sorted(seconds)
    return {
        "samples": len(times),
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": times[max(0, int(len(times) * 0.99) - 1)] * 1000,
    }


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else "failed"


def _main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "prepare":
        asyncio.run(_PREPARE[argv[1]](argv[2], int(argv[3])))
    elif mode == "drain":
        for module in _IMPORTS[argv[1]]:  # not timed
            importlib.import_module(module)
        start, cpu = time.time(), time.process_time()
        asyncio.run(_DRAIN[argv[1]](argv[2], int(argv[3])))
        print(json.dumps({"start": start, "end": time.time(), "cpu_s": time.process_time() - cpu}))
    elif mode == "serve":
        peer, dsn, samples = argv[1], argv[2], int(argv[3])
        print(json.dumps(asyncio.run(_SERVE[peer](dsn, samples))), flush=True)
    else:
        jobs = int(argv[1]) if len(argv) > 1 else 5000
        out = {
            "server": server_version(),
            "drain": [
                drain(p, jobs, c, w)
                for p in PEERS
                for c in ((8, 64) if p == "procrastinate" else (10,))
                for w in (1, 2)
            ],
            "idle": [idle_latency(p) for p in PEERS],
        }
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    _main(sys.argv[1:] or ["all"])
