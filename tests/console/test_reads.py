"""A page view never writes: every GET route of the console, viewed by a signed-in viewer,
leaves the database exactly as it was, even with an approval past its time waiting (it is
expired by the workers' sweep or the next decision, never by looking)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

import httpx
from starlette.routing import Route

from browserworker.console.app import create_app
from browserworker.console.auth import load_keys
from browserworker.store import NewRun, Owner, open_store
from browserworker.store.testing import backdate_approvals

OPERATOR, VIEWER = "op-token-" + "a" * 24, "ro-token-" + "b" * 24
ENV = {"BROWSERWORKER_CONSOLE_TOKEN": OPERATOR, "BROWSERWORKER_CONSOLE_READONLY_TOKEN": VIEWER}
OWNER = Owner(worker="w-1", host="elsewhere.invalid", pid=1)
SUMMARY = {"method": "POST", "url": "http://127.0.0.1/orders", "fields": [["item", "[redacted]"]]}


def _dump(db: Path) -> list[str]:
    """Every row of every table, as SQL: equal dumps mean nothing was written."""
    with sqlite3.connect(db) as conn:
        return list(conn.iterdump())


def test_no_get_route_of_the_console_writes(tmp_path: Path) -> None:
    """Overview, runs, a run's page, review, approvals, an approval's screenshot, a trace, the
    login page: each GET leaves the database byte for byte as it was, and the approval past its
    time is still PENDING afterwards."""
    db = tmp_path / "bw.db"
    store = open_store(db)
    store.create_run(NewRun(id="r1", flow_name="f", inputs={"item": "tea"}))
    run = store.claim_run("r1", OWNER, 30.0)
    assert run is not None
    store.begin_attempt("r1", run.lease_epoch, "submit", "effect", "r1/submit", "fp", worker=OWNER.worker, margin=0.0)
    asked = store.approvals.request(
        "r1", run.lease_epoch, "submit", 1, "r1/submit", "a" * 64, SUMMARY, screenshot=None, ttl=60, worker="w-1"
    )
    store.approvals.park("r1", run.lease_epoch, asked.id)
    assert backdate_approvals(store, "r1", 61) == 1  # an approval past its time is what is looked at
    keys, _ = load_keys(tmp_path / "keys", ENV)
    app = create_app(store, keys, evidence_dir=tmp_path / "evidence", recordings_dir=tmp_path)
    params = {"run_id": "r1", "approval_id": str(asked.id), "n": "0", "name": "none"}
    gets = [r.path for r in app.app.routes if isinstance(r, Route) and r.methods and "GET" in r.methods]
    assert {"/", "/runs", "/runs/{run_id}", "/review", "/approvals"} <= set(gets)

    async def view() -> dict[str, int]:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
        async with client:
            done = await client.post("/login", data={"name": "vic", "token": VIEWER})  # a write: signing in
            assert done.status_code == 303, done.text
            before = _dump(db)
            statuses = {}
            for path in gets:
                url = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: params[m.group(1)], path)
                statuses[url] = (await client.get(url)).status_code
            assert _dump(db) == before
        return statuses

    statuses = asyncio.run(view())
    assert statuses["/"] == statuses["/runs"] == statuses["/approvals"] == statuses["/runs/r1"] == 200, statuses
    looked = store.approvals.get(asked.id)
    assert looked is not None and looked.state == "PENDING"
    store.close()
