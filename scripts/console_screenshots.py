"""Make the console's screenshots in docs/img/ from a small, real dataset.

Runs real flows against the sandbox shop: orders placed by a worker, one crashed with its
reply lost (a verifier proves it landed: a duplicate prevented), one crashed with no verifier
(parked for review), a worker frozen until its lease expired (reclaimed by another, then
killed), a backlog in a queue nobody serves, two cancels; then photographs the pages.

    .venv/bin/python scripts/console_screenshots.py [OUT_DIR]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from browserworker import control
from browserworker.console.app import create_app
from browserworker.console.auth import load_keys
from browserworker.runtime._browser import find_chromium
from browserworker.sandbox.testing import start_sandbox
from browserworker.store import open_store

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "docs-operator-token-0123456789"


def bw(db: Path, *args: str, env: dict[str, str] | None = None, wait: bool = True) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "browserworker", *args, "--db", str(db)],
        cwd=db.parent,
        text=True,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if wait:
        proc.wait(180)
    return proc


def until(what: str, check, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def dataset(db: Path, shop_url: str) -> None:
    order = ROOT / "flows" / "place_order.py"
    unverified = ROOT / "flows" / "place_order_unverified.py"
    for i, item in enumerate(["tea", "coffee", "cocoa", "tea", "mate", "coffee"]):
        bw(
            db,
            "enqueue",
            str(order),
            "--input",
            f"base_url={shop_url}",
            "--input",
            f"item={item}",
            "--run-id",
            f"order-{i + 1:03d}",
        )
    bw(db, "worker", "--once")
    kill = {"BROWSERWORKER_FAULTS": "reply_lost:submit=kill"}
    for flow, rid in ((order, "order-lost-reply"), (unverified, "order-in-doubt")):
        bw(db, "run", str(flow), "--input", f"base_url={shop_url}", "--input", "item=tea", "--run-id", rid, env=kill)
        bw(db, "run", str(flow), "--run-id", rid)
    store = open_store(db)
    bw(db, "enqueue", str(order), "--input", f"base_url={shop_url}", "--input", "item=tea", "--run-id", "order-frozen")
    frozen = bw(db, "worker", "--lease-ttl", "3", wait=False)
    until("a lease", lambda: store.get_run("order-frozen").state in ("LEASED", "RUNNING"))  # type: ignore[union-attr]
    frozen.send_signal(signal.SIGSTOP)
    bw(db, "worker", "--once", "--lease-ttl", "3")
    frozen.kill()
    frozen.wait()
    for i in range(7):
        bw(
            db,
            "enqueue",
            str(order),
            "--input",
            f"base_url={shop_url}",
            "--input",
            "item=tea",
            "--queue",
            "reports",
            "--run-id",
            f"report-{i + 1:03d}",
        )
    control.cancel(store, "report-006", who="ann")
    control.cancel(store, "report-007", who="ann")
    store.close()


def photograph(db: Path, out: Path) -> None:
    store = open_store(db)
    keys, _ = load_keys(
        db.with_name("keys"),
        {"BROWSERWORKER_CONSOLE_TOKEN": TOKEN, "BROWSERWORKER_CONSOLE_READONLY_TOKEN": TOKEN[::-1]},
    )
    app = create_app(store, keys, evidence_dir=db.with_name(db.name + ".evidence"), recordings_dir=db.parent)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=8471, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    until("the console", lambda: server.started)
    idle = bw(db, "worker", "--queue", "nightly", wait=False)  # a live worker on the host
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(find_chromium()))
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.goto("http://127.0.0.1:8471/login")
            page.screenshot(path=str(out / "console-login.png"))
            page.fill("input[name=name]", "Ann")
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")

            def worker_shown() -> bool:
                page.reload()
                return "nightly" in page.content()

            until("the worker", worker_shown)
            for name, path in (
                ("overview", "/"),
                ("runs", "/runs"),
                ("run", "/runs/order-lost-reply"),
                ("review", "/review"),
            ):
                page.goto("http://127.0.0.1:8471" + path)
                page.screenshot(path=str(out / f"console-{name}.png"), full_page=True)
            browser.close()
    finally:
        idle.terminate()
        idle.wait(30)
        server.should_exit = True
        store.close()


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shop = start_sandbox(Path(tmp) / "sandbox.db")
        try:
            db = Path(tmp) / "browserworker.db"
            dataset(db, shop.url)
            photograph(db, out)
        finally:
            shop.stop()


if __name__ == "__main__":
    main()
