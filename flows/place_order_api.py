"""Place an order through the shop's JSON API with an Idempotency-Key header.

The API dedupes on that key, so the effect is declared ``idempotent=True``: after a
crash it is replayed with the same request key and the shop returns the existing order.
"""

from __future__ import annotations

from _shop import Order, log_in

from browserworker import Flow, StepContext

flow = Flow("place-order-api", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@flow.effect(idempotent=True, settle=8)
async def submit(ctx: StepContext[Order]) -> dict:
    reply = await ctx.page.evaluate(
        """async ([item, quantity, reference]) => {
            const r = await fetch('/api/orders', {
                method: 'POST',
                headers: {'Content-Type': 'application/json', 'Idempotency-Key': reference},
                body: JSON.stringify({item, quantity, reference}),
            });
            return {status: r.status, body: await r.json()};
        }""",
        [ctx.inputs.item, ctx.inputs.quantity, ctx.request_key],
    )
    if reply["status"] not in (200, 201):
        raise RuntimeError(f"order API answered {reply['status']}: {reply['body']}")
    return {"order_id": str(reply["body"]["id"])}
