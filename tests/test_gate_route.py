"""The gate's context route: prepared (interception on, nothing routed to Python), then put in;
and the outbox rows an effect's outcome is decided from are the ones the store holds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Request, Route

from browserworker.browser import BrowserSession, BrowserSettings
from browserworker.gate import ContextRoute
from conftest import BW

pytestmark = pytest.mark.browser


def test_a_prepared_route_routes_nothing_to_python_until_it_is_put_in(shop: Any) -> None:
    """After ``prepare()`` the page loads with no request reaching a Python handler (the
    driver lets them go on by itself); once ``install()`` has run, every request does."""

    async def scenario() -> tuple[list[str], list[str], int, int]:
        seen: list[str] = []

        async def spy(route: Route, request: Request) -> None:
            seen.append(request.url)
            await route.fallback()

        async with BrowserSession(BrowserSettings.discover()) as session:
            async with session.context() as context:
                gate_route = ContextRoute(context)
                gate_route.handler = spy
                prepared = gate_route.prepare()
                assert prepared is not None
                await prepared
                page = await context.new_page()
                before = await page.goto(f"{shop.url}/healthz")
                while_prepared = list(seen)
                await gate_route.install()
                after = await page.goto(f"{shop.url}/healthz?again=1")
                assert before is not None and after is not None
                return while_prepared, seen, before.status, after.status

    while_prepared, seen, first, second = asyncio.run(scenario())
    assert (first, second) == (200, 200)
    assert while_prepared == []
    assert seen == [f"{shop.url}/healthz?again=1"]


def test_the_outcome_evidence_matches_the_stored_outbox(bw: BW, shop: Any, run_id: str) -> None:
    """The effect's outcome is classified from the gate's own copy of the outbox rows (not
    read back); the responses kept as evidence are exactly what the store's outbox holds."""
    done = bw.run("run", str(Path(__file__).parent / "flows" / "short_order.py"), "--db", str(bw.db),
                  "--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id)
    assert done.returncode == 0, done.stderr
    [submit] = [a for a in bw.show(run_id)["journal"] if a["step_id"] == "submit"]
    stored = [{"method": o["method"], "url": o["url"], "status": o["status"],
               "location": (o["headers"] or {}).get("location"), "answered": o["response_at"] is not None,
               "failure": o["failure"]} for o in submit["outbox"]]
    assert len(stored) == 1 and stored[0]["method"] == "POST" and stored[0]["status"] == 201
    assert submit["evidence"]["responses"] == stored
    assert len(shop.orders(f"{run_id}/submit")) == 1
