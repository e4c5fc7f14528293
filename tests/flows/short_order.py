"""Test flow: a short real order — log in, POST the order from the page, verify by reference.

The POST carries no Idempotency-Key, so the shop would take a replay as a second order:
only the journal and the verifier stand between a crash and a duplicate.
"""

from __future__ import annotations

import sys
from pathlib import Path

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order, log_in_over_http  # noqa: E402

flow = Flow("short-order", inputs=Order)

POST_ORDER = """async ([item, quantity, reference]) => {
    const r = await fetch('/api/orders', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                          body: JSON.stringify({item, quantity, reference})});
    return {status: r.status, body: await r.json()};
}"""
FIND_ORDER = """async (reference) => {
    const r = await fetch('/api/orders?reference=' + encodeURIComponent(reference));
    return (await r.json()).orders;
}"""


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    """Sign in over HTTP (the context's cookie jar), then open a light page on the shop."""
    await log_in_over_http(ctx)
    await ctx.page.goto(f"{ctx.inputs.base_url}/healthz")


@flow.effect(settle=8)  # generous: the shop may be slow when the test machine is loaded
async def submit(ctx: StepContext[Order]) -> dict:
    reply = await ctx.page.evaluate(POST_ORDER, [ctx.inputs.item, ctx.inputs.quantity, ctx.request_key])
    if reply["status"] != 201:
        raise RuntimeError(f"order API answered {reply['status']}")
    return {"order_id": str(reply["body"]["id"])}


@submit.verify
async def landed(ctx: StepContext[Order]) -> Verdict:
    orders = await ctx.page.evaluate(FIND_ORDER, ctx.request_key)
    return Verdict.done({"order_id": str(orders[0]["id"])}) if orders else Verdict.not_done()
