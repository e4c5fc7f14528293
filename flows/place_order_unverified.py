"""Place an order with no verifier and no confirm predicate.

If this flow dies after its submit was dispatched, nothing can prove whether the order
landed: the step becomes UNKNOWN and the run waits for a person (NEEDS_REVIEW, exit 3).
It is never silently retried.
"""

from __future__ import annotations

from _shop import Order, log_in, submit_order_form

from browserworker import Flow, StepContext

flow = Flow("place-order-unverified", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@flow.effect(settle=8)
async def submit(ctx: StepContext[Order]) -> dict:
    return await submit_order_form(ctx)
