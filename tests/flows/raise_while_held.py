"""Test flow: the effect starts the order POST, then fails while the gate still holds that POST.

Another process holds the journal's write lock for a moment (``BW_TEST_DB``), so the gate's
dispatch commit has to wait: the POST is held in the browser when the effect function has
already raised. The gate must still decide that POST itself (journal it, then release it); it
must never be let go by taking the route off.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from pathlib import Path

from browserworker import Flow, StepContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from short_order import Order, landed, login  # noqa: E402

flow = Flow("raise-while-held", inputs=Order)
flow.step(sends=True)(login.fn)

FIRE = """([item, quantity, reference]) => {
    fetch('/api/orders', {method: 'POST', headers: {'Content-Type': 'application/json'},
                          body: JSON.stringify({item, quantity, reference})});
}"""


@flow.effect(settle=2)
async def submit(ctx: StepContext[Order]) -> dict:
    if ctx.attempt_no > 1:  # a replay would place a second order: the test counts them
        raise RuntimeError("replayed")
    lock = sqlite3.connect(os.environ["BW_TEST_DB"], isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN IMMEDIATE")  # the gate's dispatch commit now waits
    threading.Timer(1.5, lock.rollback).start()
    async with ctx.page.expect_request("**/api/orders"):
        await ctx.page.evaluate(FIRE, [ctx.inputs.item, ctx.inputs.quantity, ctx.request_key])
    raise RuntimeError("the page showed something unexpected")


submit.verify(landed)
