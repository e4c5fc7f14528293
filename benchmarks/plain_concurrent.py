"""Benchmark baseline (e): the short order flow, N at a time on one Chromium, plain Playwright.

``plain_concurrent.py BASE N RUNS [--playwright-defaults]``: Chromium is launched with the
kit's browser flags (:func:`browserworker.runtime.launch_options`), so the comparison is of
what the kit adds around the same browser work; with ``--playwright-defaults``, with the
flags Playwright alone passes."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid

from playwright.async_api import Browser, async_playwright

from browserworker.runtime import BrowserSettings
from browserworker.runtime._browser import launch_options

POST = """async ([item, quantity, reference]) => {
    const r = await fetch('/api/orders', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                          body: JSON.stringify({item, quantity, reference})});
    return {status: r.status, body: await r.json()};
}"""


async def one(browser: Browser, base: str, i: int) -> None:
    context = await browser.new_context(service_workers="block")
    page = await context.new_page()
    form = await page.request.get(f"{base}/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text())
    assert token
    await page.request.post(
        f"{base}/login", form={"csrf_token": token.group(1), "username": "demo", "password": "demo", "next": "/healthz"}
    )
    await page.goto(f"{base}/healthz")
    reply = await page.evaluate(POST, [f"i{i}", 1, f"{uuid.uuid4().hex}/submit"])
    assert reply["status"] == 201
    await context.close()


async def main(base: str, n: int, runs: int, playwright_defaults: bool) -> None:
    settings = BrowserSettings.discover()
    if playwright_defaults:
        settings.disable_features = ()
    async with async_playwright() as p:
        browser = await p.chromium.launch(**await launch_options(p, settings))
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(runs):
            queue.put_nowait(i)

        async def lane() -> None:
            while not queue.empty():
                await one(browser, base, queue.get_nowait())

        start = time.time()
        await asyncio.gather(*(lane() for _ in range(n)))
        # the drain itself, first run started to last run finished (as ours is measured)
        print(json.dumps({"first_start": start, "last_finish": time.time()}))
        await browser.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "--playwright-defaults" in sys.argv[4:]))
