"""Test flow: an action (not declared as an effect) places an order from the page.

``BW_TEST_UNDECLARED`` picks the flow's ``undeclared_effects`` mode: ``warn`` or ``fail``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from browserworker import Flow, StepContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from short_order import POST_ORDER, Order, login  # noqa: E402

flow = Flow("undeclared-post", inputs=Order, undeclared_effects=os.environ["BW_TEST_UNDECLARED"])  # type: ignore[arg-type]
flow.step(sends=True)(login.fn)


@flow.step
async def sneaky(ctx: StepContext[Order]) -> dict:
    return await ctx.page.evaluate(POST_ORDER, [ctx.inputs.item, ctx.inputs.quantity, ctx.request_key])
