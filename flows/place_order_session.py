"""Place an order through the shop's form, signed in by a login session saved and reused across runs.

    browserworker run flows/place_order_session.py --input base_url=http://127.0.0.1:8800 --input item=tea

The first run for a user logs in and saves the browser's storage state (sealed) under the
user's name; the runs after it start signed in and skip the login while ``signed_in`` says
the page is signed in (``browserworker sessions`` lists what is saved).
"""

from __future__ import annotations

from datetime import timedelta

from _shop import Order, log_in, submit_order_form

from browserworker import Flow, StepContext

flow = Flow(
    "place-order-session", inputs=Order, session=lambda inputs: inputs.username, session_max_age=timedelta(hours=8)
)


@flow.login
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@login.check
async def signed_in(ctx: StepContext[Order]) -> bool:
    """The order form is only shown to a signed-in user (others are sent to /login)."""
    await ctx.page.goto(f"{ctx.inputs.base_url}/orders/new")
    return await ctx.page.locator("#order-form").count() == 1


@flow.effect(settle=8)
async def submit(ctx: StepContext[Order]) -> dict:
    return await submit_order_form(ctx)
