"""Asking a person about a submit held for approval, beside the console: the person's answer
(:class:`PersonDecision`) journaled as the approval's decision, as the console journals one.

:func:`asked` waits for the request a run holds for a person, puts it to an :data:`AskPerson`
(``browserworker mcp --approve-in-client`` asks the person in the agent's MCP client) and
journals the answer; :func:`held_approval` and :func:`decide_approval` are its two halves, for a
client that answers in a later call; :func:`holding` sets how long one submit holds its request
for a person before its session parks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial

from ..control import approve, reject
from ..errors import UsageError
from ..logs import get_logger
from ..runtime import LiveRun
from ..store.aio import AsyncStore
from ..store.base import Store
from ..store.manager import read_only
from ..store.records import ApprovalRecord

__all__ = ["ASK_FOR", "AskPerson", "PersonDecision", "asked", "decide_approval", "held_approval", "holding"]

log = get_logger("browserworker.agent")

ASK_FOR = 300.0
"""The longest a submit waits for a person asked in the agent's client (``ask``), in seconds; then
it is answered ``awaiting_approval`` and the console decides."""

_ASK_POLL = 0.2  # seconds between looks for the request a submit holds for a person


@dataclass(frozen=True)
class PersonDecision:
    """What a person asked about a submit held for approval answered (see ``ask`` of
    :meth:`~browserworker.agent.AgentService.submit`): send it or not, who answered (journaled
    as the approval's ``decided_by``), and why not."""

    approve: bool
    who: str
    reason: str | None = None


AskPerson = Callable[[ApprovalRecord, str], Awaitable[PersonDecision | None]]
"""Puts a held request (its approval: the request as a person is shown it, masked; its
screenshot) and the console's link for it to a person; None if no one decided."""


async def held_approval(astore: AsyncStore, store: Store, run_id: str) -> ApprovalRecord | None:
    """The newest request of ``run_id`` that waits for a person (not expired), if any: one call
    on the store's thread (:func:`asked` looks every :data:`_ASK_POLL` seconds while a submit runs)."""
    return await astore.call(_held, store, run_id)


@read_only
def _held(store: Store, run_id: str) -> ApprovalRecord | None:
    now = store.now()
    waiting = [a for a in store.approvals.of_run(run_id) if a.state == "PENDING" and a.expires_at > now]
    return waiting[-1] if waiting else None


async def decide_approval(astore: AsyncStore, store: Store, run_id: str, decision: PersonDecision) -> bool:
    """Journal ``decision`` as the decision of the request ``run_id`` holds for a person, as the
    console would; True if there was one to decide (one decided meanwhile by someone else counts:
    the submit's next call answers by that decision)."""
    held = await held_approval(astore, store, run_id)
    if held is None:
        return False
    decide = approve if decision.approve else partial(reject, reason=decision.reason)
    with contextlib.suppress(UsageError):  # decided meanwhile (the console), or expired just now
        await astore.call(decide, store, run_id, held.step_id, who=decision.who)
    return True


async def asked(astore: AsyncStore, store: Store, run_id: str, ask: AskPerson, link: str) -> bool:
    """Wait until ``run_id`` holds a request for a person, put it to ``ask`` (with the console's
    ``link``) and journal the decision; True if one was journaled. No answer within
    :data:`ASK_FOR`, a failing ``ask`` or None: False, the console decides."""
    while (held := await held_approval(astore, store, run_id)) is None:
        await asyncio.sleep(_ASK_POLL)
    try:
        async with asyncio.timeout(ASK_FOR):
            decision = await ask(held, link)
    except Exception as exc:  # no answer in time, or the client could not ask: the console decides
        log.info("a person was not asked, or did not answer", run_id=run_id, error=str(exc) or type(exc).__name__)
        return False
    return decision is not None and await decide_approval(astore, store, run_id, decision)


@contextlib.contextmanager
def holding(live: LiveRun, hold: float | None) -> Iterator[None]:
    """``live``'s approval hold set to ``hold`` seconds while one submit runs (None: as it is)."""
    scope = live.scope
    kept = scope.approvals
    if hold is not None:
        scope.approvals = replace(kept, hold=hold)
    try:
        yield
    finally:
        scope.approvals = kept
