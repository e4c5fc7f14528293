"""Playwright's driver under a lost lease: a context is not closed under a ``page.request`` call
still in flight (closing it then can kill the driver), and a worker whose driver died starts a
new browser instead of taking runs only to crash them."""

from __future__ import annotations

import asyncio
import http.server
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from browserworker.control import enqueue
from browserworker.flow import load_flow
from browserworker.gate import ContextRoute
from browserworker.journal import LeaseSettings
from browserworker.runtime import BrowserProcess, BrowserSettings, Engine, WorkerSettings
from browserworker.states import RunState
from browserworker.store import open_store
from tests.support.paths import TEST_FLOWS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


class _Slow(http.server.BaseHTTPRequestHandler):
    received = threading.Event()
    answered = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Slow.received.set()
        time.sleep(1.0)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
        _Slow.answered.set()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def slow_url() -> Iterator[str]:
    """A loopback server that answers a GET after a second."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Slow.received.clear()
    _Slow.answered.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}/slow"
    server.shutdown()


def test_shutting_a_context_lets_a_page_request_in_flight_finish_first(slow_url: str) -> None:
    """A ``page.request`` call is in Playwright's driver, and the step that made it stopped
    waiting (cancelled, as a lost lease stops a step): shutting the context waits until the
    driver has finished the call, so the context is not closed under it; the driver lives on."""

    async def main() -> tuple[bool, float]:
        async with BrowserProcess(BrowserSettings.discover()) as session:
            context = await session.browser.new_context()
            route = ContextRoute(context)
            page = await context.new_page()
            step = asyncio.ensure_future(page.request.get(slow_url))
            await asyncio.to_thread(_Slow.received.wait, 10)
            step.cancel()
            began = time.monotonic()
            await route.shut()
            took = time.monotonic() - began
            finished = _Slow.answered.is_set()  # the driver had its answer before shut returned
            await context.close()
            again = await session.browser.new_context()  # the driver is alive
            await again.close()
            return finished, took

    finished, took = asyncio.run(main())
    assert finished and 0.5 < took < 5, took


def _driver_pids() -> list[int]:
    """This process's Playwright driver (node) processes."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"playwright/driver" in command:
            pids.append(int(entry))
    return pids


def test_a_worker_whose_browser_died_starts_a_new_one_and_drains_on(tmp_path: Path, shop: Any) -> None:
    """The Playwright driver of a working worker is SIGKILLed (Chromium goes with it): the worker
    starts a new browser once it finds the old one gone, instead of claiming run after run only
    to crash it, and the runs enqueued afterwards all SUCCEEDED, each with one order."""
    store = open_store(tmp_path / "bw.db")
    loaded = load_flow(TEST_FLOWS / "short_order.py")
    worker = Engine(store, browser=BrowserSettings.discover(), lease=LeaseSettings(ttl=3)).worker(
        WorkerSettings(concurrency=1)
    )

    def run_state(run_id: str) -> RunState:
        return store.get_run(run_id).state  # type: ignore[union-attr]

    async def until_succeeded(run_ids: list[str]) -> None:
        deadline = time.monotonic() + 60
        while not all(await asyncio.to_thread(lambda: [run_state(i) == RunState.SUCCEEDED for i in run_ids])):
            assert time.monotonic() < deadline, [run_state(i) for i in run_ids]
            await asyncio.sleep(0.1)

    def new_run(name: str) -> str:
        return enqueue(
            store, loaded, {"base_url": shop.url, "item": name}, run_id=f"gone-{tmp_path.name[-6:]}-{name}"
        ).id

    async def main() -> list[str]:
        working = asyncio.create_task(worker.run())
        try:
            await until_succeeded([new_run("before")])
            for pid in _driver_pids():
                os.kill(pid, signal.SIGKILL)
            after = [new_run(f"after-{i}") for i in range(3)]
            await until_succeeded(after)
            return after
        finally:
            worker.request_stop()
            await asyncio.wait_for(working, 60)

    try:
        with capture_logs() as logs:
            after = asyncio.run(main())
        relaunches = [e for e in logs if e["event"].startswith("the browser is gone")]
        assert len(relaunches) == 1, relaunches
        assert worker.stats.claimed <= 6, worker.stats  # at most one run per slot crashed on the dead browser
        assert all(len(shop.orders(f"{run_id}/submit")) == 1 for run_id in after)
    finally:
        store.close()
