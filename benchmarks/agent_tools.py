"""(g) An agent's tool round trip: `snapshot` and `fill` through `browserworker mcp`'s tools (the
SDK's in-memory client, so the MCP round trip is counted) against the same Playwright calls made
directly (the same snapshot script, `locator.fill`) on a page of the same Chromium settings; and
what a journaled, gated `submit` adds to clicking the same button directly.

Each side makes its calls in blocks, alternating ABBA; the figure is the median time per call
over the blocks, the spread the blocks' min-max. Both sides are signed in to the sandbox shop and
on its order form; a submit places an order on each side (one block of a few orders).

The order form is a small page (a dozen lines of snapshot). ``snapshot`` is also timed on a page
of the size of a real site's (:data:`BIG_ROWS` rows of a product table, about 570 lines, under the
snapshot's limit of 600), served on loopback by this script, where the snapshot's own work dominates.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from figures import abba

from browserworker.agent import AgentService, click_and_settle
from browserworker.agent._snapshot import take_snapshot
from browserworker.runtime import BrowserProcess, BrowserSettings
from browserworker.store import open_store

CALLS = 40  # per block
BIG_CALLS = 10  # per block, on the big page
BLOCKS = 8
SUBMITS = 6
BIG_ROWS = 70

BIG_PAGE = (
    "<!doctype html><title>Catalogue</title><h1>Catalogue</h1><table><tr><th>Product</th><th>Price</th>"
    "<th>Quantity</th><th></th></tr>"
    + "".join(
        f'<tr><td><a href="/p/{i}">Product {i}</a></td><td>{i % 90 + 10}.99</td>'
        f'<td><input name="qty-{i}" aria-label="Quantity of product {i}"></td><td><button>Add {i}</button></td></tr>'
        for i in range(BIG_ROWS)
    )
    + "</table>"
).encode()


@contextmanager
def _big_page() -> Iterator[str]:
    """The URL of :data:`BIG_PAGE`, served on loopback while the block runs."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(BIG_PAGE)))
            self.end_headers()
            self.wfile.write(BIG_PAGE)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def _time_block(call: Callable[[], Awaitable[Any]], n: int) -> float:
    """Median milliseconds per call of ``n`` calls."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def _sign_in_directly(page: Any, base_url: str) -> None:
    await page.goto(f"{base_url}/login?next=/orders/new")
    await page.fill("#username", "demo")
    await page.fill("#password", "demo")
    await page.click("#login")
    await page.wait_for_url("**/orders/new")


def _plain_server(page: Any, refs: dict[str, int]) -> Any:
    """A browser MCP server with no journal: its tools call Playwright and return (what a plain
    browser MCP server does), for the share of the MCP round trip itself."""
    from mcp.server.mcpserver import MCPServer

    plain: Any = MCPServer("plain")

    @plain.tool(structured_output=False)
    async def snapshot() -> str:
        shot = await take_snapshot(page, refs["next"])
        refs["next"] = shot.next_ref
        return shot.text

    @plain.tool()
    async def fill(selector: str, value: str) -> dict[str, Any]:
        await page.locator(selector).fill(value)
        return {"url": page.url}

    return plain


async def _measure(base_url: str) -> dict[str, Any]:
    from mcp import Client

    from browserworker.mcp import build_server

    settings = BrowserSettings.discover()
    with tempfile.TemporaryDirectory() as tmp:
        service = AgentService(open_store(Path(tmp) / "g.db"), browser=settings)
        try:
            async with Client(build_server(service)) as client, BrowserProcess(settings) as direct:
                return await _compare(client, direct, base_url)
        finally:
            await service.aclose()


async def _compare(client: Any, direct: BrowserProcess, base_url: str) -> dict[str, Any]:
    from mcp import Client

    async def tool(name: str, **args: Any) -> Any:
        result = await client.call_tool(name, args)
        assert not result.is_error, result.content
        return result.structured_content

    opened = await tool("open_session", site=f"{base_url}/login?next=/orders/new")
    # an agent names elements by the refs of its last snapshot
    run_id = opened["run_id"]
    await tool("fill", run_id=run_id, selector="#username", value="demo")
    await tool("fill", run_id=run_id, selector="#password", value="demo")
    await tool("submit", run_id=run_id, selector="#login", idempotent=True)
    async with direct.context() as context:
        page = await context.new_page()
        await _sign_in_directly(page, base_url)
        refs = {"next": 1}

        async def snapshot_directly() -> None:
            shot = await take_snapshot(page, refs["next"])
            refs["next"] = shot.next_ref

        last: dict[str, Any] = {}

        async def snapshot_ours() -> None:
            answer = last["answer"] = await client.call_tool("snapshot", {"run_id": run_id})
            assert not answer.is_error, answer.content

        async with Client(_plain_server(page, refs)) as plain:
            out: dict[str, Any] = {
                "snapshot": await _blocks(
                    [
                        ("ours", snapshot_ours),
                        ("playwright", snapshot_directly),
                        ("plain_mcp", lambda: plain.call_tool("snapshot", {})),
                    ]
                )
            }
            # the fills name the Item field by a ref of ours' latest snapshot (read after the
            # timed calls: neither other side reads its snapshot's text either)
            item_ref = _ref_of(last["answer"].content[0].text, 'textbox "Item"')
            out["fill"] = await _blocks(
                [
                    ("ours", lambda: tool("fill", run_id=run_id, ref=item_ref, value="tea")),
                    ("playwright", lambda: page.locator("#item").fill("tea")),
                    ("plain_mcp", lambda: plain.call_tool("fill", {"selector": "#item", "value": "tea"})),
                ]
            )
            with _big_page() as big:
                await tool("navigate", run_id=run_id, url=big)
                await page.goto(big)
                out["big_snapshot"] = await _blocks(
                    [
                        ("ours", snapshot_ours),
                        ("playwright", snapshot_directly),
                        ("plain_mcp", lambda: plain.call_tool("snapshot", {})),
                    ],
                    calls=BIG_CALLS,
                )
                out["big_snapshot"]["lines"] = len(last["answer"].content[0].text.splitlines())
        out["submit"] = await _submits(tool, run_id, page, base_url)
    return out


def _ref_of(snapshot: str, element: str) -> str:
    """The ref a snapshot gives ``element`` (its role and name, e.g. ``textbox "Item"``)."""
    line = next(line for line in snapshot.splitlines() if element in line)
    return line.split("[ref=")[1].split("]")[0]


async def _blocks(sides: list[tuple[str, Callable[[], Awaitable[Any]]]], calls: int = CALLS) -> dict[str, Any]:
    """Blocks of ``calls`` calls of each side in ABBA order; medians, and our ratio to each other
    side per round."""
    blocks: dict[str, list[float]] = {side: [] for side, _ in sides}
    for _ in range(2):  # warm every side
        for _, call in sides:
            await call()
    for rep in range(BLOCKS):
        for side, call in abba(sides, rep):
            blocks[side].append(await _time_block(call, calls))
    out: dict[str, Any] = {f"{side}_ms": statistics.median(times) for side, times in blocks.items()}
    for other in ("playwright", "plain_mcp"):
        out[f"ratio_{other}"], out[f"ratio_{other}_range"] = _ratio(blocks["ours"], blocks[other])
    # the protocol's own share: a plain MCP tool over the same call made directly (no tool
    # server on this SDK's in-memory transport can be faster than that)
    out["plain_mcp_over_playwright"], out["plain_mcp_over_playwright_range"] = _ratio(
        blocks["plain_mcp"], blocks["playwright"]
    )
    out["blocks"] = blocks
    return out


def _ratio(over: list[float], under: list[float]) -> tuple[float, list[float]]:
    """The median of the rounds' ratios ``over / under``, and their min-max."""
    ratios = [o / u for o, u in zip(over, under, strict=True)]
    return statistics.median(ratios), [min(ratios), max(ratios)]


async def _submits(tool: Callable[..., Awaitable[Any]], run_id: str, page: Any, base_url: str) -> dict[str, Any]:
    """A submit through the tool (verify read before and after, intent, gate, outcome, screenshot) against clicking the same
    button directly and waiting the same way (``click_and_settle``); each places an order."""
    ours, plain = [], []
    for i in range(SUBMITS):
        for side in abba(["ours", "playwright"], i):
            reference = f"g-{side}-{i}-{os.getpid()}-{time.time_ns()}"
            if side == "ours":
                await tool("navigate", run_id=run_id, url=f"{base_url}/orders/new")
                await tool("fill", run_id=run_id, selector="#item", value="tea")
                await tool("fill", run_id=run_id, selector="#reference", value=reference)
                start = time.perf_counter()
                answer = await tool(
                    "submit",
                    run_id=run_id,
                    selector="#submit",
                    effect_key=reference,
                    verify={"get": f"/api/orders?reference={reference}", "path": "orders"},
                )
                ours.append((time.perf_counter() - start) * 1000)
                assert answer["status"] == "committed", answer
            else:
                await page.goto(f"{base_url}/orders/new")
                await page.fill("#item", "tea")
                await page.fill("#reference", reference)
                start = time.perf_counter()
                await click_and_settle(page, "#submit")
                plain.append((time.perf_counter() - start) * 1000)
    return {
        "ours_ms": statistics.median(ours),
        "playwright_ms": statistics.median(plain),
        "added_ms": statistics.median(ours) - statistics.median(plain),
        "ours_all": ours,
        "playwright_all": plain,
    }


def agent_tools(base_url: str) -> dict[str, Any]:
    """(g): the figures above, with the load during the measurement."""
    load_before = os.getloadavg()[0]
    out = asyncio.run(_measure(base_url))
    out["load"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return out


def _met(ratio: float, spread: list[float], target: float) -> str:
    return "yes, every round" if spread[1] <= target else ("the median only" if ratio <= target else "no")


def render(g: dict[str, Any]) -> str:
    """The table rows of (g): our tool against the same Playwright call made directly, and (for
    the share of the protocol itself) against a plain MCP tool making that call, with that tool's
    own ratio to the direct call (the floor any tool server on the SDK starts from); each ratio
    with the min-max of its rounds, and the load before and after."""
    rows = []
    lines = [("snapshot", "`snapshot` tool", CALLS), ("fill", "`fill` tool (by ref)", CALLS)]
    if "big_snapshot" in g:  # runs before 2026-12-06 21:00 UTC have no such line
        shown = f"`snapshot` tool on a page of {g['big_snapshot']['lines']} lines ({BIG_ROWS} table rows)"
        lines.insert(1, ("big_snapshot", shown, BIG_CALLS))
    for what, how, calls in lines:
        r = g[what]
        direct, plain = r["ratio_playwright"], r["ratio_plain_mcp"]
        dr, pr = r["ratio_playwright_range"], r["ratio_plain_mcp_range"]
        floor, fr = r["plain_mcp_over_playwright"], r["plain_mcp_over_playwright_range"]
        rows.append(
            f"| g | {how}, round trip through the MCP SDK (in memory), median of {BLOCKS} rounds of {calls}, "
            f"load {g['load'][0]:.1f}-{g['load'][1]:.1f} | {r['ours_ms']:.1f} ms | Playwright direct {r['playwright_ms']:.1f} ms; "
            f"a plain MCP tool {r['plain_mcp_ms']:.1f} ms ({floor:.2f}x direct, rounds {fr[0]:.2f}-{fr[1]:.2f}: the "
            f"protocol's own share) | {direct:.2f}x ({dr[0]:.2f}-{dr[1]:.2f}); "
            f"{plain:.2f}x ({pr[0]:.2f}-{pr[1]:.2f}) | <= 1.2x Playwright direct | {_met(direct, dr, 1.2)} "
            f"(against a plain MCP tool: {_met(plain, pr, 1.2)}) |"
        )
    s = g["submit"]
    rows.append(
        f"| g | `submit` (its verify read before and after, call and intent journaled, gated, outcome, screenshot), "
        f"median of {SUBMITS} orders | "
        f"{s['ours_ms']:.0f} ms | click and settle directly {s['playwright_ms']:.0f} ms | +{s['added_ms']:.0f} ms "
        f"| reported | - |"
    )
    return "\n".join(rows)


if __name__ == "__main__":  # python benchmarks/agent_tools.py URL
    import json
    import sys

    result = agent_tools(sys.argv[1])
    print(json.dumps(result, indent=2, default=str))
    print(render(result))
