"""What the gate's route costs a page with many subresources: the time of a navigation with no
route, with the kit's route in (nothing holding it, as between steps after a run's first
effect), and with no route but Chromium's HTTP cache off, as Playwright turns it off while any
route is in. Each side also counts the requests that reach the site per load.

``python benchmarks/route_subresources.py [ROUNDS]``: two pages served on loopback by a Python
HTTP server, each loaded 10 times a side per round, the sides in ABBA order; prints a Markdown
table of the medians (milliseconds a navigation) with the rounds' min-max. Not part of ``make
bench``.

Pages: 45 images; and 15 scripts, 15 stylesheets and 15 images (scripts block the parser,
images do not). Subresources are cacheable for an hour.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from playwright.async_api import Browser, async_playwright

from browserworker.gate import ContextRoute
from browserworker.runtime import BrowserSettings
from browserworker.runtime._browser import launch_options

LOADS = 10  # navigations a side per round

PAGES = {
    "45 images": "".join(f'<img src="/i{i}.png">' for i in range(45)),
    "15 scripts, 15 stylesheets, 15 images": "".join(
        f'<script src="/s{i}.js"></script><link rel="stylesheet" href="/c{i}.css"><img src="/i{i}.png">'
        for i in range(15)
    ),
}
TYPES = {".png": "image/png", ".js": "application/javascript", ".css": "text/css"}


@contextmanager
def _site(body: str, hits: list[int]) -> Iterator[str]:
    """A loopback site whose every ``/page…`` is ``body``, its subresources tiny and cacheable;
    ``hits[0]`` counts the requests it answers."""
    page = f"<!doctype html><title>many</title>{body}<p>done</p>".encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            hits[0] += 1
            kind = next((t for suffix, t in TYPES.items() if self.path.endswith(suffix)), "text/html")
            data = page if kind == "text/html" else b"/**/"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            if kind != "text/html":
                self.send_header("Cache-Control", "max-age=3600")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def _side(browser: Browser, base: str, side: str, hits: list[int]) -> tuple[float, float]:
    """Milliseconds a navigation, median of :data:`LOADS`, in a fresh context whose cache the
    page's first load has filled; and the requests that reached the site per navigation."""
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.goto(f"{base}/page-first")
        if side == "route":
            await ContextRoute(context).install()
        elif side == "cache off":
            session = await context.new_cdp_session(page)
            await session.send("Network.enable")  # without it, setCacheDisabled does nothing
            await session.send("Network.setCacheDisabled", {"cacheDisabled": True})
        hits[0] = 0
        times = []
        for i in range(LOADS):
            start = time.perf_counter()
            await page.goto(f"{base}/page-{i}")
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times), hits[0] / LOADS
    finally:
        await context.close()


async def main(rounds: int) -> None:
    sides = ["no route", "route", "cache off"]
    print("| page | no route | the kit's route | cache off, no route |\n|---|---|---|---|")
    hits = [0]
    async with async_playwright() as p:
        browser = await p.chromium.launch(**await launch_options(p, BrowserSettings.discover()))
        for name, body in PAGES.items():
            with _site(body, hits) as base:
                ms: dict[str, list[float]] = {side: [] for side in sides}
                sent: dict[str, list[float]] = {side: [] for side in sides}
                for r in range(rounds):
                    for side in sides if r % 2 == 0 else sides[::-1]:
                        took, requests = await _side(browser, base, side, hits)
                        ms[side].append(took)
                        sent[side].append(requests)
                cells = [
                    f"{statistics.median(v):.0f} ms ({min(v):.0f}-{max(v):.0f}); "
                    f"{statistics.median(sent[side]):.0f} to the site"
                    for side, v in ms.items()
                ]
                print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        await browser.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4))
