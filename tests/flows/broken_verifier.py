"""An order flow whose verifier looks for the wrong thing: it always says "not done".

Recording it must report the verifier as broken (the self-test after the effect fails).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))

from _shop import Order, log_in  # noqa: E402

from browserworker import Flow, StepContext, Verdict  # noqa: E402

flow = Flow("broken-verifier", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@flow.effect(idempotent=True, settle=2)
async def submit(ctx: StepContext[Order]) -> dict:
    reply = await ctx.page.evaluate(
        """async ([item, reference]) => {
            const r = await fetch('/api/orders', {method: 'POST',
                headers: {'Content-Type': 'application/json', 'Idempotency-Key': reference},
                body: JSON.stringify({item, quantity: 1, reference})});
            return {status: r.status, body: await r.json()};
        }""",
        [ctx.inputs.item, ctx.request_key],
    )
    return {"order_id": str(reply["body"]["id"])}


@submit.verify
async def submit_landed(ctx: StepContext[Order]) -> Verdict:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders?ref=wrong-{ctx.request_key}")
    return Verdict.done() if await ctx.page.locator(".order-row").count() else Verdict.not_done()
