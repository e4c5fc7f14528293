"""Test flow: every request through ``page.request`` — log in, POST the order, and a verifier and
a count probe that look the order up by reference over HTTP (never in the page)."""

from __future__ import annotations

import sys
from pathlib import Path

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order, log_in_over_http  # noqa: E402

flow = Flow("api-verifier", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in_over_http(ctx)


@flow.effect(settle=8)
async def submit(ctx: StepContext[Order]) -> dict:
    reply = await ctx.page.request.post(
        f"{ctx.inputs.base_url}/api/orders",
        data={"item": ctx.inputs.item, "quantity": ctx.inputs.quantity, "reference": ctx.request_key},
    )
    if reply.status != 201:
        raise RuntimeError(f"order API answered {reply.status}")
    return {"order_id": str((await reply.json())["id"])}


async def _orders(ctx: StepContext[Order]) -> list[dict]:
    reply = await ctx.page.request.get(f"{ctx.inputs.base_url}/api/orders", params={"reference": ctx.request_key})
    if reply.status != 200:
        raise RuntimeError(f"order lookup answered {reply.status}")
    return (await reply.json())["orders"]


@submit.verify
async def landed(ctx: StepContext[Order]) -> Verdict:
    orders = await _orders(ctx)
    return Verdict.done({"order_id": str(orders[0]["id"])}) if orders else Verdict.not_done()


@submit.count
async def placed(ctx: StepContext[Order]) -> int:
    return len(await _orders(ctx))
