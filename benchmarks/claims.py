"""Benchmark (c): claim latency with a backlog of 100, 10k and 100k queued runs."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from browserworker._canonical import canonical_json
from browserworker.journal import this_owner
from browserworker.store import SQLiteStore, Store


def _backlog(store: SQLiteStore, n: int) -> None:
    now = time.time()
    rows = [
        (f"c-{i:07d}", "noop", canonical_json({"i": i}), "default", i % 3, "QUEUED", now + i * 1e-6, now)
        for i in range(n)
    ]
    conn = store.connector.conn  # bulk load, for the benchmark only
    with store.connector.transaction():
        conn.executemany(
            "INSERT INTO runs (id, flow_name, inputs_json, queue, priority, state, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def timed_claims(store: Store, samples: int) -> list[float]:
    """Seconds each of ``samples`` successive ``claim_next`` calls took (each must claim a run)."""
    owner = this_owner("bench")
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        run = store.claim_next(owner, ["default"], 60.0, start=True)  # as the worker claims
        times.append(time.perf_counter() - start)
        assert run is not None
    return times


def claim_latency(backlog: int, samples: int = 300) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "claims.db")
        _backlog(store, backlog + samples)
        times = timed_claims(store, samples)
        store.close()
    times.sort()
    return {
        "backlog": backlog,
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": times[int(len(times) * 0.99) - 1] * 1000,
    }


if __name__ == "__main__":
    for n in (100, 10_000, 100_000):
        print(claim_latency(n))
