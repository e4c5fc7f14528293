"""Benchmark baseline (a): the same ten steps as flows/ten_steps.py, plain Playwright async."""

from __future__ import annotations

import asyncio
import re
import sys
import uuid

from playwright.async_api import async_playwright

from browserworker.runtime import BrowserSettings
from browserworker.runtime._browser import launch_options

ORDER_PAGE = re.compile(r"/orders/\d+$")


async def main(base: str) -> None:
    settings = BrowserSettings.discover()
    async with async_playwright() as p:
        browser = await p.chromium.launch(**await launch_options(p, settings))  # the kit's browser flags
        context = await browser.new_context(service_workers="block")
        page = await context.new_page()
        run = uuid.uuid4().hex
        await page.goto(f"{base}/login?next=/orders/new")
        await page.fill("#username", "demo")
        await page.fill("#password", "demo")
        async with page.expect_navigation(url="**/orders/new"):
            await page.click("#login")
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
        await context.close()
        await browser.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
