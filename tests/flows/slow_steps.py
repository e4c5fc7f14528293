"""Test flow: several slow actions around one effect, so signals and cancels land between steps."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order, log_in, submit_order_form  # noqa: E402

flow = Flow("slow-steps", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@flow.step
async def think_1(ctx: StepContext[Order]) -> None:
    await ctx.page.wait_for_timeout(1500)  # stands for slow page work


@flow.step
async def think_2(ctx: StepContext[Order]) -> None:
    await ctx.page.wait_for_timeout(1500)


@flow.step
async def open_form(ctx: StepContext[Order]) -> None:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders/new")


@flow.effect(settle=3)
async def submit(ctx: StepContext[Order]) -> dict:
    return await submit_order_form(ctx)


@submit.verify
async def landed(ctx: StepContext[Order]) -> Verdict:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders?ref={quote(ctx.request_key, safe='')}")
    rows = ctx.page.locator(".order-row")
    if await rows.count():
        return Verdict.done({"order_id": await rows.first.get_attribute("data-id")})
    return Verdict.not_done()


@flow.step
async def think_3(ctx: StepContext[Order]) -> None:
    await ctx.page.wait_for_timeout(1500)
