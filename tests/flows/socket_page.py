"""Test flow: one action opens a page that opens a WebSocket (the channel target's ``websocket``
page) and reads whether it opened. Recorded, its replay cannot answer the socket: the page's
socket never opens there, and the action goes on after a short wait."""

from __future__ import annotations

import contextlib
from urllib.parse import quote

from playwright.async_api import TimeoutError as PlaywrightTimeout
from pydantic import BaseModel

from browserworker import Flow, StepContext


class Inputs(BaseModel):
    base_url: str


flow: Flow[Inputs] = Flow("socket-page", inputs=Inputs)


@flow.step
async def open_page(ctx: StepContext[Inputs]) -> dict[str, str]:
    await ctx.page.goto(f"{ctx.inputs.base_url}/page/websocket?key={quote(ctx.run_id, safe='')}")
    with contextlib.suppress(PlaywrightTimeout):  # refused by a replay: it never opens
        await ctx.page.wait_for_function("document.title === 'open'", timeout=3000)
    return {"title": await ctx.page.title()}
