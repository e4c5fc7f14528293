"""Test flow: log in, then an effect that holds its order until the test says go.

The effect's intent is committed and its gate armed before it waits, so a test can break
the journal's database at the very moment an effect is about to dispatch: it creates the
file named by ``go_file`` and the effect POSTs the order from the page (no Idempotency-Key:
a second POST would be a second order). The verifier finds the order by its reference.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order  # noqa: E402


class HeldOrder(Order):
    """An order, and the file whose existence releases it."""

    go_file: str


flow = Flow("held-order", inputs=HeldOrder)

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
async def login(ctx: StepContext[HeldOrder]) -> None:
    """Sign in over HTTP (the context's cookie jar), then open a light page on the shop."""
    base = ctx.inputs.base_url
    form = await ctx.page.request.get(f"{base}/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', await form.text())
    assert token, "no CSRF token on the login page"
    await ctx.page.request.post(f"{base}/login", form={
        "csrf_token": token.group(1), "username": ctx.inputs.username,
        "password": ctx.inputs.password.get_secret_value(), "next": "/healthz"})
    await ctx.page.goto(f"{base}/healthz")


@flow.effect(settle=2)
async def submit(ctx: StepContext[HeldOrder]) -> dict:
    """Wait for the go file, then POST the order from the page."""
    go = Path(ctx.inputs.go_file)
    while not go.exists():
        await asyncio.sleep(0.05)
    reply = await ctx.page.evaluate(POST_ORDER, [ctx.inputs.item, ctx.inputs.quantity, ctx.request_key])
    if reply["status"] != 201:
        raise RuntimeError(f"order API answered {reply['status']}")
    return {"order_id": str(reply["body"]["id"])}


@submit.verify
async def landed(ctx: StepContext[HeldOrder]) -> Verdict:
    orders = await ctx.page.evaluate(FIND_ORDER, ctx.request_key)
    return Verdict.done({"order_id": str(orders[0]["id"])}) if orders else Verdict.not_done()
