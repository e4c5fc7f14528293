"""Place an order through the shop's HTML form, with a verifier.

    browserworker run flows/place_order.py --input base_url=http://127.0.0.1:8800 --input item=tea

The order's reference is the request key, so a verifier can look the order up after a
crash and the effect is never placed twice.
"""

from __future__ import annotations

from urllib.parse import quote

from _shop import ORDER_PAGE, Order, log_in, submit_order_form

from browserworker import Flow, RecordedResponse, StepContext, Verdict

flow = Flow("place-order", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@flow.step
async def open_form(ctx: StepContext[Order]) -> None:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders/new")
    await ctx.page.wait_for_selector("#order-form")


def order_created(response: RecordedResponse) -> Verdict | None:
    """A 303 to /orders/<id> proves the order exists; a 200 is the form re-rendered with errors."""
    if response.status == 303 and response.location and ORDER_PAGE.search(response.location):
        return Verdict.done({"order_id": response.location.rsplit("/", 1)[1]})
    if response.status == 200:
        return Verdict.not_done("the form was re-rendered with errors")
    return None


@flow.effect(settle=8, confirm=order_created)
async def submit(ctx: StepContext[Order]) -> dict:
    return await submit_order_form(ctx)


@submit.verify
async def submit_landed(ctx: StepContext[Order]) -> Verdict:
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders?ref={quote(ctx.request_key)}")
    row = ctx.page.locator(".order-row")
    if await row.count():
        return Verdict.done({"order_id": await row.first.get_attribute("data-id")})
    return Verdict.not_done()


@submit.count
async def orders_placed(ctx: StepContext[Order]) -> int:
    """How many orders carry this request key: 1 is right, 2 would be a duplicate."""
    reply = await ctx.page.request.get(f"{ctx.inputs.base_url}/api/orders?reference={quote(ctx.request_key, safe='')}")
    return len((await reply.json())["orders"])


@flow.step
async def read_confirmation(ctx: StepContext[Order]) -> dict:
    order_id = ctx.results["submit"]["order_id"]
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders/{order_id}")
    return {"reference": await ctx.page.text_content("#order-reference")}
