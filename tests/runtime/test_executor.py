"""The step loop (runtime/_executor.py) with real Chromium: a pass whose lease is lost while it
opens its page stops instead of hanging."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from browserworker.errors import LeaseLost
from browserworker.gate import ContextRoute
from browserworker.journal import Lease, LeaseSettings
from browserworker.runtime import BrowserProcess, BrowserSettings
from browserworker.runtime._executor import Executor

pytestmark = pytest.mark.browser


def test_lease_lost_while_a_page_opens_stops_the_run_instead_of_hanging() -> None:
    """A lease lost (e.g. a worker woken from SIGSTOP) while a pass is opening its page closes the
    context; the pass then stops with LeaseLost instead of waiting forever on Playwright."""

    async def scenario() -> None:
        async with BrowserProcess(BrowserSettings.discover()) as session, session.context() as context:
            lease = Lease(None, "r", 1, LeaseSettings(ttl=3))  # type: ignore[arg-type]
            closing = asyncio.ensure_future(context.close())  # what a lost lease does to the run's context
            lease.mark_lost(LeaseLost("taken over at epoch 2"))
            with pytest.raises(LeaseLost, match="epoch 2"):
                opening = Executor._new_page(SimpleNamespace(lease=lease), context, ContextRoute(context))  # type: ignore[arg-type]
                await asyncio.wait_for(opening, 30)
            await closing

    asyncio.run(scenario())
