"""The README's demo: a normal run, then a run killed right after its submit reached the
shop, resumed, ending with exactly one order and the journal showing the verifier's decision.

Run it with `make demo` (which sets everything up first).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from browserworker.sandbox.testing import start_sandbox  # noqa: E402

DEMO = ROOT / ".demo"
DB = DEMO / "browserworker.db"
FLOW = ROOT / "flows" / "place_order.py"


def bw(*args: str) -> list[str]:
    return [sys.executable, "-m", "browserworker", *args]


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def main() -> int:
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BROWSERWORKER_DB": str(DB)}
    env.setdefault(
        "BROWSERWORKER_CHROMIUM_ARGS", "--host-resolver-rules='MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost'"
    )
    shop = start_sandbox(DEMO / "sandbox.db")
    try:
        inputs = ("--input", f"base_url={shop.url}", "--input", "item=tea", "--input", "quantity=2")
        say(f"sandbox shop at {shop.url}; journal in {DB}")

        say("1. a normal run")
        subprocess.run(bw("run", str(FLOW), *inputs, "--run-id", "demo-normal"), env=env, check=True)

        say("2. a run killed right after its submit reached the shop")
        shop.set_faults(delay_after_commit=60, times=1)  # the shop commits, then is slow to answer
        run_id = f"demo-crash-{time.strftime('%H%M%S')}"
        worker = subprocess.Popen(bw("run", str(FLOW), *inputs, "--run-id", run_id), env=env)
        shop.wait_for_orders(f"{run_id}/submit", 1, timeout=60)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        print(
            f"   SIGKILLed the worker (pid {worker.pid}): the order is committed, the worker never saw the reply",
            flush=True,
        )

        say(f"3. resume it: browserworker run flows/place_order.py --run-id {run_id}")
        resumed = subprocess.run(bw("run", str(FLOW), "--run-id", run_id), env=env)

        say(f"4. the journal: browserworker show {run_id}")
        subprocess.run(bw("show", run_id), env=env, check=True)

        orders = shop.orders(f"{run_id}/submit")
        say(f"orders on the shop with reference {run_id}/submit: {len(orders)}")
        ok = resumed.returncode == 0 and len(orders) == 1
        print(
            "exactly one order: the verifier found it, nothing was resubmitted" if ok else "UNEXPECTED OUTCOME",
            flush=True,
        )
        print(f"\nexplore: browserworker sandbox --port 8800   then   browserworker runs --db {DB}")
        return 0 if ok else 1
    finally:
        shop.stop()


if __name__ == "__main__":
    sys.exit(main())
