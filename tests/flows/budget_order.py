"""Test flow: a short order whose limit key (and sandbox tag) comes from its inputs.

Every request of a run carries X-Sandbox-Tag (its limit key) and X-Sandbox-Visit (its item),
so the sandbox can tell how many runs of a key were at it at once (/api/visits).
"""

from __future__ import annotations

import sys
from pathlib import Path

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order  # noqa: E402
from short_order import FIND_ORDER, POST_ORDER, login  # noqa: E402


class SiteOrder(Order):
    site: str


flow = Flow(
    "budget-order",
    inputs=SiteOrder,
    limit=lambda inputs: inputs.site,
    context=lambda inputs: {"extra_http_headers": {"x-sandbox-tag": inputs.site, "x-sandbox-visit": inputs.item}},
)
flow.step(sends=True)(login.fn)


@flow.effect(settle=8)
async def submit(ctx: StepContext[SiteOrder]) -> dict:
    reply = await ctx.page.evaluate(POST_ORDER, [ctx.inputs.item, ctx.inputs.quantity, ctx.request_key])
    if reply["status"] != 201:
        raise RuntimeError(f"order API answered {reply['status']}")
    return {"order_id": str(reply["body"]["id"])}


@submit.verify
async def landed(ctx: StepContext[SiteOrder]) -> Verdict:
    orders = await ctx.page.evaluate(FIND_ORDER, ctx.request_key)
    return Verdict.done({"order_id": str(orders[0]["id"])}) if orders else Verdict.not_done()
