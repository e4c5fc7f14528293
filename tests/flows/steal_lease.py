"""Test flow: another owner takes the run over just before the effect clicks submit."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from browserworker import Flow, StepContext
from browserworker.store import Owner, open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "flows"))
from _shop import Order, log_in, submit_order_form  # noqa: E402

flow = Flow("steal-lease", inputs=Order)


@flow.step(sends=True)
async def login(ctx: StepContext[Order]) -> None:
    await log_in(ctx)


@flow.effect(settle=1)
async def submit(ctx: StepContext[Order]) -> dict:
    store = open_store(os.environ["BW_TEST_DB"])
    run = store.get_run(ctx.run_id)
    assert run is not None
    thief = Owner("thief", "elsewhere", 1)
    assert store.claim_run(ctx.run_id, thief, ttl=300, takeover_epoch=run.lease_epoch) is not None
    store.close()
    return await submit_order_form(ctx)
