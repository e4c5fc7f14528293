"""Benchmark baseline (a): the same ten steps as flows/ten_steps.py, plain Playwright async.

``plain_ten_steps.py BASE [--hooks]``: with ``--hooks``, the context carries what the kit puts
in a pass to keep the channels of docs/channels.md, where and when `browserworker run` puts it,
and nothing else (no journal): its :class:`~browserworker.gate.ContextRoute` (the API request
context hooked), WebSockets routed before the page opens, the request events listened to, the
route put in before the first effect's step, the page's renderer stopped before the context
closes (benchmarks/kit_hooks.py)."""

from __future__ import annotations

import asyncio
import re
import sys
import uuid

from kit_hooks import hooked_page
from playwright.async_api import async_playwright

from browserworker.runtime import BrowserSettings
from browserworker.runtime._browser import launch_options

ORDER_PAGE = re.compile(r"/orders/\d+$")


async def main(base: str, hooks: bool) -> None:
    settings = BrowserSettings.discover()
    async with async_playwright() as p:
        browser = await p.chromium.launch(**await launch_options(p, settings))  # the kit's browser flags
        context = await browser.new_context(service_workers="block")
        route, page = await hooked_page(context) if hooks else (None, await context.new_page())
        run = uuid.uuid4().hex
        await page.goto(f"{base}/login?next=/orders/new")
        await page.fill("#username", "demo")
        await page.fill("#password", "demo")
        async with page.expect_navigation(url="**/orders/new"):
            await page.click("#login")
        if route is not None:
            await route.install()  # the first effect's gate puts the route in
        for n in range(1, 5):
            if n > 1:
                await page.goto(f"{base}/orders/new")
            await page.fill("#item", f"item-{n}")
            await page.fill("#reference", f"{run}/order_{n}")
            async with page.expect_navigation(url=ORDER_PAGE):
                await page.click("#submit")
            await page.text_content("#order-id")
        await page.goto(f"{base}/orders")
        await page.goto(f"{base}/")
        if route is not None:
            await route.shut()
        await context.close()
        await browser.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], "--hooks" in sys.argv[2:]))
