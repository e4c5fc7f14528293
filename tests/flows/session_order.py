"""Test flow: an order placed behind a login that is saved and reused across runs.

The session key is the username: every run for one user, on any worker, starts signed in
from the saved session; only the first (or one after the shop signed the user out) logs in.
Set ``SESSION_ORDER_REUSE=0`` to log in on every run (the same flow without a session).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import quote

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order, log_in  # noqa: E402

REUSE = os.environ.get("SESSION_ORDER_REUSE", "1") != "0"
flow = Flow("session-order", inputs=Order, session=(lambda inputs: inputs.username) if REUSE else None)

if REUSE:

    @flow.login
    async def login(ctx: StepContext[Order]) -> None:
        await log_in(ctx)

    @login.check
    async def signed_in(ctx: StepContext[Order]) -> bool:
        await ctx.page.goto(f"{ctx.inputs.base_url}/orders/new")
        return await ctx.page.locator("#order-form").count() == 1
else:

    @flow.step(sends=True)
    async def login(ctx: StepContext[Order]) -> None:
        await log_in(ctx)


POST_ORDER = """async ([item, quantity, reference]) => {
    const r = await fetch('/api/orders', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                          body: JSON.stringify({item, quantity, reference})});
    return {status: r.status, body: await r.json()};
}"""


@flow.effect(settle=8)
async def submit(ctx: StepContext[Order]) -> dict:
    reply = await ctx.page.evaluate(POST_ORDER, [ctx.inputs.item, ctx.inputs.quantity, ctx.request_key])
    if reply["status"] != 201:
        raise RuntimeError(f"order API answered {reply['status']}")
    return {"order_id": str(reply["body"]["id"])}


@submit.verify
async def landed(ctx: StepContext[Order]) -> Verdict:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders?ref={quote(ctx.request_key)}")
    row = ctx.page.locator(".order-row")
    if await row.count():
        return Verdict.done({"order_id": await row.first.get_attribute("data-id")})
    return Verdict.not_done()
