"""The shop's order form, with a verifier that looks for the wrong reference (it always says
"not done") and a count probe that counts right.

`browserworker chaos` must name the verifier as wrong (its self-test after the effect says
not done), and at `reply_lost` the probe must see the duplicate that verifier causes: the
order landed, the verifier says it did not, so recovery places it again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))

from _shop import Order, log_in, submit_order_form  # noqa: E402

from browserworker import Flow, StepContext, Verdict  # noqa: E402

flow = Flow("wrong-verifier-counted", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@flow.effect(settle=1)
async def submit(ctx: StepContext[Order]) -> dict:
    return await submit_order_form(ctx)


@submit.verify
async def looks_for_the_wrong_order(ctx: StepContext[Order]) -> Verdict:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders?ref={quote('wrong-' + ctx.request_key)}")
    return Verdict.done() if await ctx.page.locator(".order-row").count() else Verdict.not_done()


@submit.count
async def orders_placed(ctx: StepContext[Order]) -> int:
    reply = await ctx.page.request.get(f"{ctx.inputs.base_url}/api/orders?reference={quote(ctx.request_key, safe='')}")
    return len((await reply.json())["orders"])
