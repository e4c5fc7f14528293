"""Test flow: open the order form before signing in, as an agent's exported session does (the
shop sends the page to its sign-in form), sign in there, then place the order, with a verifier.
The same address (the order form) is answered twice while recording: with the sign-in form
first, with the order form after signing in."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order, submit_order_form  # noqa: E402

flow = Flow("signin-first", inputs=Order)


@flow.step
async def open_form(ctx: StepContext[Order]) -> None:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders/new")
    await ctx.page.wait_for_selector("#username")  # not signed in: the sign-in form


@flow.step(sends=True)
async def sign_in(ctx: StepContext[Order]) -> None:
    await ctx.page.fill("#username", ctx.inputs.username)
    await ctx.page.fill("#password", ctx.inputs.password.get_secret_value())
    await ctx.page.click("#login")
    await ctx.page.wait_for_url("**/orders/new")


@flow.effect(settle=8)
async def submit(ctx: StepContext[Order]) -> dict:
    return await submit_order_form(ctx)


@submit.verify
async def landed(ctx: StepContext[Order]) -> Verdict:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders?ref={quote(ctx.request_key)}")
    row = ctx.page.locator(".order-row")
    if await row.count():
        return Verdict.done({"order_id": await row.first.get_attribute("data-id")})
    return Verdict.not_done()
