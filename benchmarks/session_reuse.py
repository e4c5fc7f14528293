"""(f) A login + effect flow drained by one worker, with and without a reused login session.

tests/flows/session_order.py logs in through the shop's form and places one order; with
``SESSION_ORDER_REUSE=1`` its login is a ``@flow.login`` under the session key ``username``
(saved once, then each run starts signed in and its check passes), with ``0`` it is a plain
action that logs in on every run. Both sides drain the same number of runs with one
``browserworker worker --once -n N`` in a fresh SQLite store, alternating in ABBA order;
throughput is first claim to last finish, as in (e). The sandbox counts the logins.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from browser_bench import PY, ROOT, _env
from figures import abba, load_range, pair_ratios, spread, verdict

from browserworker.control import enqueue
from browserworker.flow import load_flow
from browserworker.states import RunState
from browserworker.store import SQLiteStore

FLOW = ROOT / "tests" / "flows" / "session_order.py"


def _drain(shop: Any, reuse: bool, runs: int, n: int) -> dict[str, float]:
    env = {**_env(), "SESSION_ORDER_REUSE": "1" if reuse else "0"}
    before = shop.logins("demo")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "f.db"
        previous = os.environ.get("SESSION_ORDER_REUSE")
        os.environ["SESSION_ORDER_REUSE"] = env["SESSION_ORDER_REUSE"]  # the flow reads it as it loads
        try:
            loaded = load_flow(FLOW)
        finally:
            if previous is None:
                os.environ.pop("SESSION_ORDER_REUSE", None)
            else:
                os.environ["SESSION_ORDER_REUSE"] = previous
        store = SQLiteStore(db)
        try:
            for i in range(runs):
                enqueue(store, loaded, {"base_url": shop.url, "item": f"f{i}"})
        finally:
            store.close()
        subprocess.run(
            [PY, "-m", "browserworker", "worker", "--once", "-n", str(n), "--db", str(db)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
        )
        store = SQLiteStore(db)
        try:
            done = store.list_runs(limit=runs + 1)
            first = store.connector.conn.execute("SELECT MIN(at) FROM events WHERE kind = 'lease_claimed'").fetchone()[
                0
            ]
        finally:
            store.close()
    ok = sum(1 for r in done if r.state == RunState.SUCCEEDED)
    assert ok == runs, f"{ok}/{runs} succeeded"
    return {"seconds": max(r.finished_at or 0 for r in done) - first, "logins": shop.logins("demo") - before}


def session_reuse(shop: Any, runs: int = 16, n: int = 2, reps: int = 4) -> dict[str, Any]:
    """(f) runs/min of the login + effect flow with and without session reuse (medians)."""
    sides = {"reuse": [], "login_each_run": []}  # type: dict[str, list[dict[str, float]]]
    for rep in range(reps):
        for key in abba(list(sides), rep):
            sides[key].append(_drain(shop, key == "reuse", runs, n))
    out: dict[str, Any] = {"runs": runs, "concurrency": n, "reps": reps, "detail": sides}
    for key, rows in sides.items():
        out[f"{key}_runs_per_min"] = runs / statistics.median(r["seconds"] for r in rows) * 60
        out[f"{key}_logins"] = statistics.median(r["logins"] for r in rows)
    out["ratio"] = out["reuse_runs_per_min"] / out["login_each_run_runs_per_min"]
    return out


def render(row: dict[str, Any]) -> str:
    """Its line of the results table: the ratio with its ABBA pairs' min-max and the load."""
    d = row["detail"]
    # runs/min over runs/min in each pair: the other side's seconds over ours
    pairs = pair_ratios([r["seconds"] for r in d["login_each_run"]], [r["seconds"] for r in d["reuse"]])
    return (
        f"| f | login + effect flow, {row['runs']} runs, worker -n {row['concurrency']}, median of "
        f"{row['reps']}: reused session (logins per drain {row['reuse_logins']:g}) vs logging in every run "
        f"({row['login_each_run_logins']:g}), {load_range(row)} | {row['reuse_runs_per_min']:.0f} runs/min | "
        f"{row['login_each_run_runs_per_min']:.0f} runs/min | {row['ratio']:.2f}x ({spread(pairs)}) | > 1x | "
        f"{verdict(pairs, lambda v: v > 1)} |"
    )
