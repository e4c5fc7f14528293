"""The shop's order form behind a person's approval: ``approve=True`` on the effect. The item
is a secret input (it must show masked in the approval, never in the store)."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import Field

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order, log_in, submit_order_form  # noqa: E402


class SecretItemOrder(Order):
    item: str = Field(json_schema_extra={"secret": True})


flow = Flow("approved-order", inputs=SecretItemOrder)


@flow.step(sends=True)
async def login(ctx: StepContext[SecretItemOrder]) -> None:
    await log_in(ctx)


@flow.effect(approve=True, dispatch="POST */orders")
async def submit(ctx: StepContext[SecretItemOrder]) -> dict:
    return await submit_order_form(ctx)


@submit.verify
async def submit_landed(ctx: StepContext[SecretItemOrder]) -> Verdict:
    reply = await ctx.page.request.get(f"{ctx.inputs.base_url}/api/orders?reference={ctx.request_key}")
    return Verdict.done() if (await reply.json())["orders"] else Verdict.not_done()
