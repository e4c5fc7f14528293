"""Benchmark flow for the PostgreSQL store: one step that holds while a file exists.

With ``hold`` empty (or naming no file) the step returns at once: a run that does nothing but
take a lease, journal one step and finish (the idle claim latency). With ``hold`` naming a file,
the step waits until the file is removed: a worker killed meanwhile dies holding the run's lease
(the recovery benchmark removes the file right after the kill, so the new owner's re-run ends).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel

from browserworker import Flow, StepContext


class Inputs(BaseModel):
    hold: str = ""


flow = Flow("hold", inputs=Inputs)


@flow.step
async def wait(ctx: StepContext[Inputs]) -> None:
    while ctx.inputs.hold and Path(ctx.inputs.hold).exists():
        await asyncio.sleep(0.02)
