"""Drain throughput of 1/2/3 worker processes x concurrency 1/4/8 (the short order flow).

Not part of `make bench` (it takes several minutes more): `python benchmarks/drain_matrix.py [RUNS]`.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from browser_bench import ROOT, _env, enqueue_short_orders

from browserworker.sandbox.testing import start_sandbox
from browserworker.states import RunState
from browserworker.store import SQLiteStore


def drain(base_url: str, workers: int, n: int, runs: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        enqueue_short_orders(db, base_url, runs)
        cmd = [sys.executable, "-m", "browserworker", "worker", "--once", "-n", str(n), "--db", str(db)]
        procs = [
            subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=ROOT)
            for _ in range(workers)
        ]
        for p in procs:
            p.wait()
        store = SQLiteStore(db)
        done = [r for r in store.list_runs(limit=runs + 1) if r.state == RunState.SUCCEEDED]
        span = max(r.finished_at for r in done) - min(r.started_at for r in done)
        store.close()
        assert len(done) == runs
        return runs / span * 60


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    with tempfile.TemporaryDirectory() as tmp:
        shop = start_sandbox(Path(tmp) / "s.db")
        try:
            print("| workers | N=1 | N=4 | N=8 |\n|---|---|---|---|")
            for w in (1, 2, 3):
                row = [f"{drain(shop.url, w, n, runs):.0f}" for n in (1, 4, 8)]
                print(f"| {w} | " + " | ".join(row) + " |  (runs/min)", flush=True)
        finally:
            shop.stop()
