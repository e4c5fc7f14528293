"""flows/place_order_unverified.py, edited after its recording to claim ``idempotent=True``.

The shop's form endpoint does not dedupe, so this claim is wrong; a replay of the recording
must refuse the second dispatch the edit causes instead of answering it twice.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))

from _shop import Order, log_in, submit_order_form  # noqa: E402

from browserworker import Flow, StepContext  # noqa: E402

flow = Flow("place-order-unverified", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@flow.effect(settle=8, idempotent=True)
async def submit(ctx: StepContext[Order]) -> dict:
    return await submit_order_form(ctx)
