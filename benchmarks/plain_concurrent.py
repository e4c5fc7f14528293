"""Benchmark baseline (e): the short order flow, N at a time on one Chromium, plain Playwright.

``plain_concurrent.py BASE N RUNS [--playwright-defaults | --hooks]``: Chromium is launched
with the kit's browser flags (:func:`browserworker.runtime.launch_options`), so the comparison
is of what the kit adds around the same browser work; with ``--playwright-defaults``, with the
flags Playwright alone passes.

With ``--hooks``, each run's context carries what the kit puts in every pass to keep the
channels of docs/channels.md, where and when a worker puts it, and nothing else (no journal,
no executor, no worker loop): its :class:`~browserworker.gate.ContextRoute` (the API request
context hooked), WebSockets routed before the page opens, the context's request events
listened to, the route put in before the effect's POST, and the pass's pages' renderers
stopped before its context closes, that close beside the next run (as a worker's slot frees
once a run's end is committed). Ours over this side is the kit's own share; this side over
plain, the share of the hooks themselves (Chromium's and Playwright's work for them)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid

from kit_hooks import hooked_page
from playwright.async_api import Browser, BrowserContext, async_playwright

from browserworker.gate import ContextRoute
from browserworker.runtime import BrowserSettings
from browserworker.runtime._browser import launch_options

POST = """async ([item, quantity, reference]) => {
    const r = await fetch('/api/orders', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                          body: JSON.stringify({item, quantity, reference})});
    return {status: r.status, body: await r.json()};
}"""


async def one(browser: Browser, base: str, i: int, closing: set[asyncio.Future[None]] | None = None) -> None:
    """One run; with ``closing`` (the kit's hooks), its context is closed in the background and
    its close is added there."""
    context = await browser.new_context(service_workers="block")
    route, page = await hooked_page(context) if closing is not None else (None, await context.new_page())
    form = await page.request.get(f"{base}/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text())
    assert token
    await page.request.post(
        f"{base}/login", form={"csrf_token": token.group(1), "username": "demo", "password": "demo", "next": "/healthz"}
    )
    await page.goto(f"{base}/healthz")
    if route is not None:
        await route.install()  # the effect's gate puts the route in before its step runs
    reply = await page.evaluate(POST, [f"i{i}", 1, f"{uuid.uuid4().hex}/submit"])
    assert reply["status"] == 201
    if route is None or closing is None:
        await context.close()
        return
    done = asyncio.ensure_future(_shut_and_close(route, context))
    closing.add(done)
    done.add_done_callback(closing.discard)


async def _shut_and_close(route: ContextRoute, context: BrowserContext) -> None:
    await route.shut()
    await context.close()


async def main(base: str, n: int, runs: int, playwright_defaults: bool, hooks: bool) -> None:
    settings = BrowserSettings.discover()
    if playwright_defaults:
        settings.disable_features = ()
    async with async_playwright() as p:
        browser = await p.chromium.launch(**await launch_options(p, settings))
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(runs):
            queue.put_nowait(i)

        closing: set[asyncio.Future[None]] | None = set() if hooks else None

        async def lane() -> None:
            while not queue.empty():
                await one(browser, base, queue.get_nowait(), closing)

        start = time.time()
        await asyncio.gather(*(lane() for _ in range(n)))
        # the drain itself, first run started to last run finished (as ours is measured)
        print(json.dumps({"first_start": start, "last_finish": time.time()}))
        while closing:
            await asyncio.gather(*list(closing))
        await browser.close()


if __name__ == "__main__":
    flags = sys.argv[4:]
    asyncio.run(
        main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "--playwright-defaults" in flags, "--hooks" in flags)
    )
