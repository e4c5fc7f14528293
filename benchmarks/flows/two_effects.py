"""Benchmark flow (d): two effects with a slow action between them (where the kill lands)."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, SecretStr

from browserworker import Flow, StepContext, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import log_in  # noqa: E402


class Inputs(BaseModel):
    base_url: str
    username: str = "demo"
    password: SecretStr = SecretStr("demo")


flow = Flow("two-effects", inputs=Inputs)

POST = """async ([item, reference]) => {
    const r = await fetch('/api/orders', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                          body: JSON.stringify({item, quantity: 1, reference})});
    return r.status;
}"""
FIND = """async (reference) => (await (await fetch('/api/orders?reference=' + encodeURIComponent(reference))).json()).orders.length"""


@flow.step(sends=True)
async def login(ctx: StepContext[Inputs]) -> None:
    await log_in(ctx)  # type: ignore[arg-type]


async def _post(ctx: StepContext[Inputs]) -> dict:
    status = await ctx.page.evaluate(POST, ["bench", ctx.request_key])
    if status != 201:
        raise RuntimeError(f"HTTP {status}")
    return {"status": status}


async def _landed(ctx: StepContext[Inputs]) -> Verdict:
    return Verdict.done() if await ctx.page.evaluate(FIND, ctx.request_key) else Verdict.not_done()


@flow.effect(settle=2)
async def first(ctx: StepContext[Inputs]) -> dict:
    return await _post(ctx)


first.verify(_landed)


@flow.step
async def between(ctx: StepContext[Inputs]) -> None:
    await ctx.page.wait_for_timeout(1000)  # the worker dies in here


@flow.effect(settle=2)
async def second(ctx: StepContext[Inputs]) -> dict:
    return await _post(ctx)


second.verify(_landed)
