"""What the browser held after a run's last done effect, kept for the run's later passes.

A new pass skips an effect that SUCCEEDED, and what the site's answer to it left in the browser
went with the old pass's context: the cart an "Add to cart" filled, the session cookie of a
sign-in made as an effect, the token a page stored from it. So after each effect done in a pass
(but a flow's last step: no pass needs what that one left), the context's storage state (cookies,
local storage, IndexedDB) is kept when it holds anything new, and every later pass of the run
starts from it. It is journaled sealed (the ``state_kept`` event, with the key of saved
logins: :func:`~browserworker.runtime._login_sessions.sealer_for`), so that a pass in another
process after a crash starts from it too; with no key to seal it with (PostgreSQL without
``BROWSERWORKER_SESSION_KEY``) it is kept by this process only.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from playwright.async_api import BrowserContext
from playwright.async_api import Error as PlaywrightError

from ..errors import SessionKeyError
from ..journal import RunJournal
from ..logs import get_logger
from ._login_sessions import Sealer, SessionUnreadable, sealer_for
from ._settings import SessionSettings

__all__ = ["KEPT", "READ_TIMEOUT", "KeptState"]

READ_TIMEOUT = 10.0
"""Seconds the state may take to read (a page whose script never yields holds its storage)."""
KEPT = "state_kept"
"""The event a kept state is journaled as (``{"sealed": base64}``)."""
_SEALED_FOR = "browser state of run "  # what it is sealed for: never opened as a saved login or a typed secret

log = get_logger("browserworker")


class KeptState:
    """The storage state a run's passes start from: the one its last done effect left."""

    def __init__(self, journal: RunJournal, sessions: SessionSettings) -> None:
        self.journal = journal
        self.sessions = sessions
        self.state: dict[str, Any] | None = None
        self._sealer: asyncio.Future[Sealer | None] | None = None  # the sealing key, once looked for

    def options(self) -> dict[str, Any]:
        """The context options of a new pass: its storage state, if one is kept."""
        return {} if self.state is None else {"storage_state": self.state}

    async def keep(self, context: BrowserContext, step_id: str) -> None:
        """Keep ``context``'s state, as effect ``step_id`` (done in it) left it."""
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                state = dict(await context.storage_state(indexed_db=True))
        except (PlaywrightError, TimeoutError):  # gone meanwhile, or a page too busy: the state kept before stands
            log.warning("the browser state after an effect could not be read", step_id=step_id)
            return
        if state == self.state or (self.state is None and not (state.get("cookies") or state.get("origins"))):
            return  # nothing new to start from (nothing at all, for a run's first)
        self.state = state
        sealer = await self._sealing()
        if sealer is not None:
            sealed = sealer.seal(state, _SEALED_FOR + self.journal.run_id)
            await self.journal.record(KEPT, step_id=step_id, detail={"sealed": base64.b64encode(sealed).decode()})

    async def load(self) -> None:
        """Start from the state the run's journal keeps (a run resumed, in this process or
        another), if there is one and this process's key opens it."""
        events = await self.journal.astore.call(self.journal.store.events, self.journal.run_id)
        kept = [e.detail["sealed"] for e in events if e.kind == KEPT and isinstance(e.detail, dict)]
        if not kept or (sealer := await self._sealing()) is None:
            return
        try:
            self.state = sealer.open(base64.b64decode(kept[-1]), _SEALED_FOR + self.journal.run_id)
        except (SessionUnreadable, ValueError):
            log.warning("the browser state kept for this run is sealed with another key", run_id=self.journal.run_id)

    def look_ahead(self) -> asyncio.Future[Sealer | None]:
        """Start looking for the sealing key now, in the background, for the first :meth:`keep`
        (a run whose effects leave a state): reading the key and loading the cipher take about
        10 ms, which the steps before that effect hide. The key is looked for once."""
        if self._sealer is None:
            self._sealer = asyncio.ensure_future(self._find_sealer())
            # a failure is raised where the sealer is asked for; never asked for, it is dropped
            self._sealer.add_done_callback(lambda found: found.cancelled() or found.exception())
        return self._sealer

    async def _sealing(self) -> Sealer | None:
        return await asyncio.shield(self.look_ahead())

    async def _find_sealer(self) -> Sealer | None:
        try:
            return await asyncio.to_thread(sealer_for, self.journal.store, self.sessions)
        except SessionKeyError:
            return None
