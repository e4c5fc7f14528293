"""Test flow: a short real order whose effect breaks before it sends while a marker file exists.

``idempotent=True, retries=0``: one failure ends the run FAILED. Deleting the marker is the
fix a person makes before requeueing the run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from browserworker import Flow, StepContext

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order, log_in_over_http  # noqa: E402

flow = Flow("fixable-order", inputs=Order)

POST_ORDER = """async ([item, quantity, reference]) => {
    const r = await fetch('/api/orders', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                          body: JSON.stringify({item, quantity, reference})});
    return {status: r.status, body: await r.json()};
}"""


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in_over_http(ctx)
    await ctx.page.goto(f"{ctx.inputs.base_url}/healthz")


@flow.effect(idempotent=True, retries=0)
async def submit(ctx: StepContext[Order]) -> dict:
    if Path(os.environ["FIXABLE_BROKEN"]).exists():
        raise RuntimeError("broken until the marker is deleted")
    reply = await ctx.page.evaluate(POST_ORDER, [ctx.inputs.item, ctx.inputs.quantity, ctx.request_key])
    if reply["status"] != 201:
        raise RuntimeError(f"order API answered {reply['status']}")
    return {"order_id": str(reply["body"]["id"])}
