"""Test flow: log in, then an effect that holds its order until the test says go.

The effect's intent is committed and its gate armed before it waits, so a test can break
the journal's database at the very moment an effect is about to dispatch: it creates the
file named by ``go_file`` and the effect POSTs the order from the page (no Idempotency-Key:
a second POST would be a second order). The verifier finds the order by its reference.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from browserworker import Flow, StepContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from short_order import Order, landed, login  # noqa: E402
from short_order import submit as place_order  # noqa: E402


class HeldOrder(Order):
    """An order, and the file whose existence releases it."""

    go_file: str


flow = Flow("held-order", inputs=HeldOrder)
flow.step(sends=True)(login.fn)


@flow.effect(settle=2)
async def submit(ctx: StepContext[HeldOrder]) -> dict:
    """Wait for the go file, then POST the order from the page (as short_order.py does)."""
    go = Path(ctx.inputs.go_file)
    while not go.exists():
        await asyncio.sleep(0.05)
    return await place_order.fn(ctx)


submit.verify(landed)  # finds the order by its reference
