"""Journal fencing (docs/guarantees.md, "Leases and fencing"): a :class:`RunJournal` write after
another claim, or a dispatch without the dispatch margin left, is refused and writes nothing;
the gate aborts what the store refused, and a lost lease shuts the run's context. A real SQLite
store; the executor on fake Playwright objects. No browser, no subprocess."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from browserworker.errors import LeaseLost
from browserworker.flow import Extensions, Flow, StepContext
from browserworker.journal import LeaseSettings, RunJournal
from browserworker.states import AttemptState, RunState
from browserworker.store.records import AttemptRecord, Owner
from browserworker.store.testing import backdate
from tests.support.loop_fakes import (
    SITE,
    Heard,
    Loop,
    page,
    post,
)

THIEF = Owner("thief", "other-host", 4242)
URL = f"{SITE}/orders"

Write = Callable[[RunJournal, AttemptRecord, int], Awaitable[Any]]

WRITES: dict[str, Write] = {
    "start": lambda j, a, approval: j.start(),
    "begin": lambda j, a, approval: j.begin("pay", "effect", "fp-pay"),
    "finish": lambda j, a, approval: j.finish(a, AttemptState.SUCCEEDED, decided_by="return", result=1),
    "decide": lambda j, a, approval: j.decide(a, "needs_review", {"reason": "test"}),
    "end": lambda j, a, approval: j.end(RunState.SUCCEEDED, None, "all steps succeeded"),
    "release": lambda j, a, approval: j.release(),
    "request_approval": lambda j, a, approval: j.request_approval(a, "fp-other", {"method": "PUT"}, None, 60.0),
    "park": lambda j, a, approval: j.park(approval),
    "dispatch": lambda j, a, approval: j.dispatch(a, "POST", URL, channel="held"),
}


def rows(loop: Loop, run_id: str) -> tuple[Any, ...]:
    """Everything the store holds of a run: the run row, its attempts, their outbox, its events,
    its approvals."""
    attempts = loop.store.attempts(run_id)
    return (
        loop.store.get_run(run_id),
        attempts,
        [loop.store.outbox(a.id) for a in attempts],
        loop.store.events(run_id),
        loop.store.approvals.of_run(run_id),
    )


def counting(loop: Loop) -> list[str]:
    """Count the calls that reach the store from now on (by the store method's name)."""
    calls: list[str] = []
    real = loop.astore.call

    async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    loop.astore.call = call  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_journal_write_after_another_claim_raises_lease_lost_and_writes_nothing(loop: Loop, write: str) -> None:
    """Once another owner has claimed the run (its epoch moved on), each fenced write of the old
    journal raises LeaseLost and changes no row of the store. The lease is then known lost (the
    extensions hear it) and the next write is refused without reaching the store; only the
    gate's dispatch commit leaves that to the executor (it refuses and the executor decides)."""
    run = loop.claim(loop.new_run(Flow("fenced")).id)
    heard = Heard()
    journal = loop.journal(run, extensions=Extensions([heard]))

    async def main() -> None:
        attempt = await journal.begin("submit", "effect", "fp")
        approval = await journal.request_approval(attempt, "fp-post", {"method": "POST"}, None, 60.0)
        loop.claim(run.id, THIEF, takeover_epoch=run.lease_epoch)
        before = rows(loop, run.id)
        with pytest.raises(LeaseLost, match=f"now at lease epoch {run.lease_epoch + 1} \\(owner thief\\)"):
            await WRITES[write](journal, attempt, approval.id)
        assert rows(loop, run.id) == before
        if write == "dispatch":
            assert journal.alive and heard.lost == []
            return
        assert not journal.alive and len(heard.lost) == 1
        calls = counting(loop)
        with pytest.raises(LeaseLost):
            await journal.begin("again", "action", "fp")
        assert calls == [] and rows(loop, run.id) == before

    asyncio.run(main())
    assert loop.store.get_run(run.id).owner == "thief"  # type: ignore[union-attr]


def test_intents_and_dispatches_need_the_dispatch_margin_left(loop: Loop) -> None:
    """With less than the dispatch margin left on the lease (4 s of a 30 s lease, margin 5 s),
    the gate's dispatch commit is refused (LeaseLost; no ``dispatched_at``, no outbox row) and so
    is an effect's intent (no attempt row; the lease is then known lost); an action's attempt,
    and a dispatch already seen leaving (journaled with no margin), are still written."""
    loop.lease = LeaseSettings(ttl=30.0, margin=5.0)
    run = loop.claim(loop.new_run(Flow("margin")).id)
    journal = loop.journal(run)

    async def main() -> None:
        attempt = await journal.begin("submit", "effect", "fp")
        backdate(loop.store, run.id, 26.0)

        with pytest.raises(LeaseLost, match="less than the 5.0s margin"):
            await journal.dispatch(attempt, "POST", URL, channel="held")
        assert loop.store.get_attempt(attempt.id).dispatched_at is None
        assert loop.store.outbox(attempt.id) == []
        assert journal.alive

        await journal.dispatch(attempt, "PAGEHIDE", URL, channel="detected", margin=0.0)
        assert [r.channel for r in loop.store.outbox(attempt.id)] == ["detected"]
        action = await journal.begin("prepare", "action", "fp")
        assert action.state == AttemptState.RUNNING

        with pytest.raises(LeaseLost, match="margin"):
            await journal.begin("pay", "effect", "fp")
        assert [a.step_id for a in loop.store.attempts(run.id)] == ["submit", "prepare"]
        assert not journal.alive

    asyncio.run(main())


@pytest.mark.parametrize("how", ["taken over", "margin"])
def test_the_gate_aborts_a_dispatch_the_store_refuses_and_the_run_stops(loop: Loop, how: str) -> None:
    """When the run is taken over, or the lease has less than the dispatch margin left, while an
    effect runs, its POST is aborted in the browser (the site never sees it), the attempt stays
    INTENT with no ``dispatched_at`` (a later owner replays it without asking: nothing left),
    the context is shut (its page's renderer stopped) and closed, and the run stops with
    LeaseLost."""
    loop.lease = LeaseSettings(ttl=30.0, margin=5.0)
    flow = Flow("refused")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        if how == "taken over":
            loop.claim(ctx.run_id, THIEF, takeover_epoch=1)
        else:
            backdate(loop.store, ctx.run_id, 26.0)
        await post(ctx)

    run = loop.claim(loop.new_run(flow).id)
    with pytest.raises(LeaseLost):
        asyncio.run(loop.execute(flow, run))

    assert loop.site.received == []
    [attempt] = loop.attempts(run.id, "submit")
    assert (attempt.state, attempt.dispatched_at) == (AttemptState.INTENT, None)
    assert loop.store.outbox(attempt.id) == []
    [context] = loop.browser.contexts
    assert context.closed and [p.crashed for p in context.opened] == [True]
    assert isinstance(loop.executors[-1].lease.lost, LeaseLost)  # the lease is marked lost, as what stopped the run


def test_a_lease_that_ran_out_locally_after_the_dispatch_commit_sends_nothing(loop: Loop) -> None:
    """A worker whose lease ran out by its own clock between the gate's dispatch commit and the
    release (paused) does not release the request: the site never sees it, the run stops with
    LeaseLost, and the journal says dispatched, so a later owner verifies before any replay."""
    flow = Flow("paused")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        lease = loop.executors[-1].lease
        lease.valid_until = time.monotonic() + 1.0  # less than half the 5 s margin left, by this clock
        await post(ctx)

    run = loop.claim(loop.new_run(flow).id)
    with pytest.raises(LeaseLost, match="between the dispatch commit and the release"):
        asyncio.run(loop.execute(flow, run))

    assert loop.site.received == []
    [attempt] = loop.attempts(run.id, "submit")
    assert attempt.state == AttemptState.INTENT and attempt.dispatched_at is not None
    [row] = loop.store.outbox(attempt.id)
    assert row.method == "POST" and row.status is None


def test_a_lease_lost_while_a_step_runs_shuts_the_context_at_once(loop: Loop) -> None:
    """When a heartbeat finds the run taken over while an action runs, the lease is marked lost
    and the run's context is shut and closed at once, while the action is still running (it
    sees its page close); the run then stops with LeaseLost at the step boundary, and the
    effect after it never runs."""
    loop.lease = LeaseSettings(ttl=3.0)  # a heartbeat every second
    flow = Flow("lost")
    seen: list[str] = []

    @flow.step
    async def wait_on_page(ctx: StepContext[Any]) -> None:
        closed = asyncio.Event()
        page(ctx).on("close", lambda _: closed.set())
        loop.claim(ctx.run_id, THIEF, takeover_epoch=1)
        await asyncio.wait_for(closed.wait(), timeout=20)
        seen.append("page closed")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)

    heard = Heard()
    run = loop.claim(loop.new_run(flow).id)
    with pytest.raises(LeaseLost):
        asyncio.run(loop.execute(flow, run, heard))

    assert seen == ["page closed"]
    assert len(heard.lost) == 1 and "owner thief" in heard.lost[0]
    [context] = loop.browser.contexts
    assert context.closed and [p.crashed for p in context.opened] == [True]
    assert [a.step_id for a in loop.attempts(run.id)] == ["wait_on_page"]
    assert loop.site.received == []
