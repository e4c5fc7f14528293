"""Workers on PostgreSQL with real Chromium: an idle worker claims a new run at once (LISTEN/NOTIFY),
not at its next poll."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from browserworker.control import enqueue
from browserworker.flow import Extension, load_flow
from browserworker.journal import LeaseSettings
from browserworker.runtime import BrowserSettings, Engine, WorkerSettings
from browserworker.store import open_store
from browserworker.store.records import RunRecord

pytestmark = pytest.mark.browser

LOOK_FLOW = """
from browserworker import Flow, StepContext

flow = Flow("look")


@flow.step
async def look(ctx: StepContext) -> None:
    await ctx.page.set_content("<p>looked</p>")
"""


def test_an_idle_worker_claims_a_new_run_at_once_not_at_its_poll(pg_url: str, tmp_path: Path) -> None:
    """With its poll a minute away, an idle worker on PostgreSQL starts each of five runs
    enqueued by another process's store within a fraction of a second of the commit: the
    enqueue's notification wakes it."""
    path = tmp_path / "look.py"
    path.write_text(LOOK_FLOW)
    loaded = load_flow(path)
    store, producer = open_store(pg_url), open_store(pg_url)
    started: dict[str, float] = {}
    finished = asyncio.Queue[str]()

    class Watch(Extension):
        def run_started(self, run: RunRecord) -> None:
            started[run.id] = time.monotonic()

        def run_finished(self, record: RunRecord) -> None:
            finished.put_nowait(record.id)

    settings = WorkerSettings(reclaim_every=60, poll_interval=60)
    worker = Engine(
        store, browser=BrowserSettings.discover(), lease=LeaseSettings(ttl=30), extensions=[Watch()]
    ).worker(settings)

    async def main() -> dict[str, float]:
        working = asyncio.create_task(worker.run())
        waits = {}
        try:
            await asyncio.sleep(0)  # let the worker start, then give it one run to be sure it is idle
            for i in range(6):
                enqueued = time.monotonic()
                run = await asyncio.to_thread(enqueue, producer, loaded, {}, run_id=f"look-{i}")
                assert await asyncio.wait_for(finished.get(), 30) == run.id
                waits[run.id] = started[run.id] - enqueued
        finally:
            worker.request_stop()
            await working
        return waits

    try:
        waits = asyncio.run(main())
        later = sorted(w for run_id, w in waits.items() if run_id != "look-0")  # look-0: the browser's start
        assert later[-1] < 2.0, waits  # each well before the 60 s poll
        assert worker.stats.finished == {"SUCCEEDED": 6}
    finally:
        store.close()
        producer.close()
