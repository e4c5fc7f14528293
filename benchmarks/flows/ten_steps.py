"""Benchmark flow (a): 6 actions and 4 effects against the sandbox shop."""

from __future__ import annotations

import re

from pydantic import BaseModel

from browserworker import Flow, StepContext

ORDER_PAGE = re.compile(r"/orders/\d+$")


class Inputs(BaseModel):
    base_url: str


flow = Flow("ten-steps", inputs=Inputs)


async def _open(ctx: StepContext[Inputs]) -> None:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders/new")


async def _order(ctx: StepContext[Inputs], n: int) -> dict:
    page = ctx.page
    await page.fill("#item", f"item-{n}")
    await page.fill("#reference", ctx.request_key)
    async with page.expect_navigation(url=ORDER_PAGE):
        await page.click("#submit")
    return {"order_id": await page.text_content("#order-id")}


@flow.step(sends=True)
async def login(ctx: StepContext[Inputs]) -> None:
    page = ctx.page
    await page.goto(f"{ctx.inputs.base_url}/login?next=/orders/new")
    await page.fill("#username", "demo")
    await page.fill("#password", "demo")
    async with page.expect_navigation(url="**/orders/new"):
        await page.click("#login")


@flow.effect
async def order_1(ctx: StepContext[Inputs]) -> dict:
    return await _order(ctx, 1)


@flow.step
async def open_2(ctx: StepContext[Inputs]) -> None:
    await _open(ctx)


@flow.effect
async def order_2(ctx: StepContext[Inputs]) -> dict:
    return await _order(ctx, 2)


@flow.step
async def open_3(ctx: StepContext[Inputs]) -> None:
    await _open(ctx)


@flow.effect
async def order_3(ctx: StepContext[Inputs]) -> dict:
    return await _order(ctx, 3)


@flow.step
async def open_4(ctx: StepContext[Inputs]) -> None:
    await _open(ctx)


@flow.effect
async def order_4(ctx: StepContext[Inputs]) -> dict:
    return await _order(ctx, 4)


@flow.step
async def list_orders(ctx: StepContext[Inputs]) -> None:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders")


@flow.step
async def home(ctx: StepContext[Inputs]) -> None:
    await ctx.page.goto(f"{ctx.inputs.base_url}/")
