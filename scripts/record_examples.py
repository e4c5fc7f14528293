"""Re-record the example flows into recordings/ (what the test suite replays offline).

    .venv/bin/python scripts/record_examples.py [NAME ...]

Starts the sandbox shop on a free loopback port with a fresh database, then records each
example with `browserworker run FLOW --record recordings/NAME --run-id rec-NAME`. Run ids
are fixed so that request keys (and so the recorded form bodies) stay readable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from browserworker.sandbox.testing import start_sandbox  # noqa: E402

# name -> (flow file, inputs, sandbox faults for the recorded run)
EXAMPLES: dict[str, tuple[str, dict[str, str], dict[str, object]]] = {
    "place-order": ("flows/place_order.py", {"item": "tea", "quantity": "2"}, {}),
    "place-order-api": ("flows/place_order_api.py", {"item": "coffee"}, {}),
    "place-order-unverified": ("flows/place_order_unverified.py", {"item": "cocoa"}, {}),
    # the shop commits the order, then answers 503: the recorded run is decided by its verifier
    "place-order-503": ("flows/place_order.py", {"item": "mate"}, {"fail_after_commit": True, "times": 1}),
}


def main(names: list[str]) -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault(
        "BROWSERWORKER_CHROMIUM_ARGS", "--host-resolver-rules='MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost'"
    )
    failed = 0
    with tempfile.TemporaryDirectory(prefix="browserworker-record-") as tmp:
        shop = start_sandbox(Path(tmp) / "sandbox.db")
        try:
            for name in names or list(EXAMPLES):
                flow, inputs, knobs = EXAMPLES[name]
                shop.clear_faults()
                if knobs:
                    shop.set_faults(**knobs)
                args = [
                    sys.executable,
                    "-m",
                    "browserworker",
                    "run",
                    flow,
                    "--record",
                    f"recordings/{name}",
                    "--force",
                    "--run-id",
                    f"rec-{name}",
                    "--db",
                    str(Path(tmp) / "browserworker.db"),
                    "--input",
                    f"base_url={shop.url}",
                ]
                for key, value in inputs.items():
                    args += ["--input", f"{key}={value}"]
                print(f"== {name}: {' '.join(args[2:])}", flush=True)
                done = subprocess.run(args, cwd=ROOT, env=env)
                failed += done.returncode != 0
        finally:
            shop.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
