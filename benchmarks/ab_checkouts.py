"""A/B of two checkouts of browserworker on this machine, alternating in ABBA order: (a) the
ten-step flow's `browserworker run` wall time and (b) the SQLite control plane's runs/s with one
worker process. For a change that should not move either (a refactor): each side runs its own
package and its own benchmark code.

    python benchmarks/ab_checkouts.py OLD_CHECKOUT NEW_CHECKOUT [--reps 6] [--json OUT]

Each checkout is a directory with ``browserworker/`` and ``benchmarks/`` (``git worktree add``
of a commit). The sandbox shop of the newer checkout serves both sides' flows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PY = sys.executable


def _env(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout), "PYTHONUNBUFFERED": "1"}


def ten_steps(checkout: Path, base_url: str) -> float:
    """Seconds for one `browserworker run` of the ten-step flow from ``checkout``."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [PY, "-m", "browserworker", "run", str(checkout / "benchmarks" / "flows" / "ten_steps.py")]
        cmd += ["--input", f"base_url={base_url}", "--db", str(Path(tmp) / "a.db")]
        start = time.perf_counter()
        done = subprocess.run(cmd, env=_env(checkout), cwd=tmp, capture_output=True, text=True)
        took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: run failed: {done.stderr[-2000:]}")
    return took


def control_plane(checkout: Path, runs: int = 3000) -> float:
    """Runs/s of one worker process of ``checkout``'s control-plane benchmark (SQLite)."""
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); import control_plane; "
        f"print(json.dumps(control_plane.ours(1, {runs})))"
    )
    done = subprocess.run([PY, "-c", code], env=_env(checkout), cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: control plane failed: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["runs_per_s"])


def _abba(rep: int) -> list[int]:
    return [0, 1] if rep % 2 == 0 else [1, 0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sides = [args.old.resolve(), args.new.resolve()]
    sys.path.insert(0, str(sides[1]))
    from browserworker.sandbox.testing import start_sandbox

    a: list[list[float]] = [[], []]
    b: list[list[float]] = [[], []]
    load = []
    with tempfile.TemporaryDirectory() as tmp:
        shop = start_sandbox(Path(tmp) / "sandbox.db")
        try:
            for rep in range(args.reps):
                load.append(os.getloadavg()[0])
                for side in _abba(rep):
                    a[side].append(ten_steps(sides[side], shop.url))
                for side in _abba(rep + 1):
                    b[side].append(control_plane(sides[side]))
                print(
                    f"rep {rep + 1}/{args.reps}: a {a[0][-1]:.2f}/{a[1][-1]:.2f} s, "
                    f"b {b[0][-1]:.0f}/{b[1][-1]:.0f} runs/s",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            shop.stop()
    out: dict[str, Any] = {"old": str(sides[0]), "new": str(sides[1]), "reps": args.reps, "load_1m": load}
    for name, values, better in (("a_ten_steps_s", a, "lower"), ("b_runs_per_s", b, "higher")):
        pairs = [new / old for old, new in zip(values[0], values[1], strict=True)]
        out[name] = {
            "old_median": statistics.median(values[0]),
            "new_median": statistics.median(values[1]),
            "ratio_median": statistics.median(pairs),
            "ratio_min": min(pairs),
            "ratio_max": max(pairs),
            "better": better,
        }
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
