"""Test flow: an order placed on a page that builds itself after its load (see
``tests/recording/test_single_page_app.py``): it types the item (the page posts a preview of it,
an action may send that) and the run id as the reference, then orders; the verifier asks the
target's order API by reference."""

from __future__ import annotations

from pydantic import BaseModel

from browserworker import Flow, StepContext, Verdict


class Inputs(BaseModel):
    base_url: str
    item: str = "tea"


flow = Flow("spa-order", inputs=Inputs)


@flow.step
async def open_app(ctx: StepContext[Inputs]) -> None:
    await ctx.page.goto(f"{ctx.inputs.base_url}/", wait_until="load")
    await ctx.page.wait_for_function("window.building === true")  # its parts are on their way now


@flow.step(sends="POST */preview")
async def fill(ctx: StepContext[Inputs]) -> None:
    await ctx.page.fill("#item", ctx.inputs.item)
    await ctx.page.fill("#ref", ctx.run_id)
    await ctx.page.locator("#ref").blur()


@flow.effect(settle=2)
async def order(ctx: StepContext[Inputs]) -> dict[str, str]:
    await ctx.page.click("#go")
    await ctx.page.wait_for_function("document.querySelector('#out').textContent === 'placed'")
    return {"out": "placed"}


@order.verify
async def placed(ctx: StepContext[Inputs]) -> Verdict:
    answer = await ctx.page.request.get(f"{ctx.inputs.base_url}/orders/{ctx.run_id}")
    if answer.status == 404:
        return Verdict.not_done()
    if answer.ok:
        return Verdict.done(await answer.json())
    return Verdict.unknown(f"answered {answer.status}")
