"""A one-step flow against an HTTPS site that answers its form POST with 303 → a GET (the
redirect hop of a replay goes through the replay proxy, over TLS)."""

from __future__ import annotations

from pydantic import BaseModel

from browserworker import Flow, StepContext


class Inputs(BaseModel):
    base_url: str


flow = Flow("https-form", inputs=Inputs)


@flow.effect(settle=0)
async def submit(ctx: StepContext[Inputs]) -> dict:
    await ctx.page.goto(f"{ctx.inputs.base_url}/form")
    async with ctx.page.expect_navigation():
        await ctx.page.click("#go")
    return {"url": ctx.page.url, "text": await ctx.page.text_content("#done")}
