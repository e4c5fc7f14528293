"""How the executor's passes end (done, again, review, failed, cancelled, released, throttled,
approval) and the run state each leads to, through the real executor on fake Playwright
objects and a real SQLite store. No browser, no subprocess."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from browserworker.flow import Flow, StepContext
from browserworker.states import AttemptState, RunState
from browserworker.store.records import Owner
from tests.support.loop_fakes import (
    SITE,
    Answer,
    FakeContext,
    Heard,
    Loop,
    page,
    post,
)


def test_done_every_step_succeeded_the_run_succeeds_in_one_context(loop: Loop) -> None:
    """A pass whose every step succeeded ends "done": the run is SUCCEEDED (decision "all steps
    succeeded"), in one browser context, whose pages' renderers were stopped before it closed;
    the extensions hear the run finish."""
    flow = Flow("done")

    @flow.step
    async def open_form(ctx: StepContext[Any]) -> str:
        page(ctx).url = f"{SITE}/form"
        return "open"

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> str:
        await post(ctx)
        return "placed"

    heard = Heard()
    final = loop.run_to_end(flow, heard=heard)

    assert final.state == RunState.SUCCEEDED and final.error is None
    assert loop.decisions(final.id)[-1] == "all steps succeeded"
    assert [(a.step_id, a.state) for a in loop.attempts(final.id)] == [
        ("open_form", AttemptState.SUCCEEDED),
        ("submit", AttemptState.SUCCEEDED),
    ]
    [context] = loop.browser.contexts
    assert context.closed and [p.crashed for p in context.opened] == [True]
    assert [r.state for r in heard.finished] == [RunState.SUCCEEDED]


def test_a_pass_listens_to_each_request_event_of_its_context_once(loop: Loop, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard, the gap between steps and each effect's gate take turns at the context's
    request events, but the context is listened to once per event for the whole pass (each
    first listener or last one removed costs Playwright a message to its driver), and each
    holder still hears only what comes while it holds: the effects' gates saw their own POST
    and nothing of the actions between them."""
    flow = Flow("turns")
    added: list[str] = []
    removed: list[str] = []
    network = {"request", "response", "requestfinished", "requestfailed"}
    on, off = FakeContext.on, FakeContext.remove_listener

    def counted_on(self: FakeContext, event: str, listener: Any) -> None:
        added.append(event)
        on(self, event, listener)

    def counted_off(self: FakeContext, event: str, listener: Any) -> None:
        removed.append(event)
        off(self, event, listener)

    monkeypatch.setattr(FakeContext, "on", counted_on)
    monkeypatch.setattr(FakeContext, "remove_listener", counted_off)

    @flow.step
    async def first(ctx: StepContext[Any]) -> None:
        page(ctx).url = f"{SITE}/form"

    @flow.effect
    async def one(ctx: StepContext[Any]) -> None:
        await post(ctx, "/one")

    @flow.step
    async def between(ctx: StepContext[Any]) -> None:
        await page(ctx).send("POST", f"{SITE}/note")  # undeclared: warned, let through

    @flow.effect
    async def two(ctx: StepContext[Any]) -> None:
        await post(ctx, "/two")

    final = loop.run_to_end(flow)

    assert final.state == RunState.SUCCEEDED
    assert sorted(e for e in added if e in network) == sorted(network)  # each once
    assert not [e for e in removed if e in network]
    attempts = {a.step_id: a for a in loop.attempts(final.id)}
    assert [r["url"].split("?")[0] for r in attempts["one"].evidence["responses"]] == [f"{SITE}/one"]
    assert [r["url"].split("?")[0] for r in attempts["two"].evidence["responses"]] == [f"{SITE}/two"]
    assert attempts["between"].evidence == {"undeclared_requests": [f"POST {SITE}/note"]}


def test_again_a_failed_action_is_retried_in_a_new_pass(loop: Loop) -> None:
    """An action that raises, with retries left, ends the pass "again": the run goes on in a
    fresh browser context from the first step (the action is journaled FAILED, then SUCCEEDED)."""
    flow = Flow("again")
    contexts: list[Any] = []

    @flow.step(retries=1)
    async def flaky(ctx: StepContext[Any]) -> str:
        contexts.append(page(ctx).context)
        if len(contexts) == 1:
            raise ValueError("element detached")
        return "ok"

    final = loop.run_to_end(flow)

    assert final.state == RunState.SUCCEEDED
    assert [(a.state, a.decided_by) for a in loop.attempts(final.id, "flaky")] == [
        (AttemptState.FAILED, "exception"),
        (AttemptState.SUCCEEDED, "return"),
    ]
    assert len(loop.browser.contexts) == 2 and contexts == loop.browser.contexts


def test_a_succeeded_effect_is_skipped_on_a_later_pass_with_its_journaled_result_handed_on(loop: Loop) -> None:
    """When a later step sends the run into a new pass, an effect that SUCCEEDED is not run
    again: it is skipped (the extensions hear it), its journaled result is handed to the steps
    after it, and the site got its POST once."""
    flow = Flow("skip")
    handed: list[Any] = []

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> dict[str, int]:
        await post(ctx)
        return {"order": 7}

    @flow.step(retries=1)
    async def read_back(ctx: StepContext[Any]) -> None:
        handed.append(ctx.results["submit"])
        if len(handed) == 1:
            raise ValueError("confirmation not rendered yet")

    heard = Heard()
    final = loop.run_to_end(flow, heard=heard)

    assert final.state == RunState.SUCCEEDED
    assert len(loop.browser.contexts) == 2
    assert [a.state for a in loop.attempts(final.id, "submit")] == [AttemptState.SUCCEEDED]
    assert heard.skipped == ["submit"]
    assert handed == [{"order": 7}, {"order": 7}]
    assert len(loop.site.sent()) == 1


def test_a_resumed_run_with_nothing_left_succeeds_without_a_browser_context(loop: Loop) -> None:
    """A run resumed by a new owner whose every effect already SUCCEEDED (and no action after
    the last effect) is SUCCEEDED at once ("nothing left to do"): no context is opened, nothing
    is sent."""
    flow = Flow("nothing-left")

    @flow.step
    async def prepare(ctx: StepContext[Any]) -> None:
        raise AssertionError("not run: nothing is left for it to prepare")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        raise AssertionError("not run: it succeeded already")

    run = loop.new_run(flow)
    first = loop.claim(run.id, Owner("gone", "other-host", 4242))
    attempt = loop.store.begin_attempt(run.id, first.lease_epoch, "submit", "effect", f"{run.id}/submit", "fp")
    loop.store.finish_attempt(attempt, first.lease_epoch, AttemptState.SUCCEEDED, decided_by="return", result=1)
    resumed = loop.claim(run.id, takeover_epoch=first.lease_epoch)

    final = asyncio.run(loop.execute(flow, resumed))

    assert final.state == RunState.SUCCEEDED
    assert loop.decisions(run.id)[-1] == "nothing left to do"
    assert loop.browser.contexts == [] and loop.site.received == []


def test_review_journaled_steps_no_longer_in_the_flow(loop: Loop) -> None:
    """A run whose journal has a step the flow no longer has ends in review ("flow_changed")
    before any step runs: NEEDS_REVIEW, no context opened."""
    flow = Flow("changed")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        raise AssertionError("not run")

    run = loop.new_run(flow)
    first = loop.claim(run.id, Owner("gone", "other-host", 4242))
    loop.store.begin_attempt(run.id, first.lease_epoch, "pay", "effect", f"{run.id}/pay", "fp")
    resumed = loop.claim(run.id, takeover_epoch=first.lease_epoch)

    final = asyncio.run(loop.execute(flow, resumed))

    assert final.state == RunState.NEEDS_REVIEW
    assert "journaled steps no longer in the flow: pay" in (final.error or "")
    assert loop.decisions(run.id)[-1] == "flow_changed"
    assert loop.browser.contexts == []


def test_failed_an_action_out_of_retries_fails_the_run_and_nothing_after_it_runs(loop: Loop) -> None:
    """An action that raises with no retries left ends the pass "failed": the run is FAILED
    with the action's error, and the effect after it never runs (no intent, nothing sent)."""
    flow = Flow("failed")

    @flow.step
    async def fill(ctx: StepContext[Any]) -> None:
        raise ValueError("no such field")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)

    final = loop.run_to_end(flow)

    assert final.state == RunState.FAILED
    assert final.error == "step fill failed: ValueError: no such field"
    assert [(a.step_id, a.state) for a in loop.attempts(final.id)] == [("fill", AttemptState.FAILED)]
    assert loop.site.received == []


def test_cancelled_at_the_next_step_boundary(loop: Loop) -> None:
    """A cancel asked while a step runs is honoured at the next step boundary: the pass ends
    "cancelled", the run is CANCELLED, and the effect after the boundary never runs."""
    flow = Flow("cancelled")

    @flow.step
    async def fill(ctx: StepContext[Any]) -> None:
        assert loop.store.cancel(ctx.run_id, who="alice") == "requested"

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)

    final = loop.run_to_end(flow)

    assert final.state == RunState.CANCELLED
    assert loop.decisions(final.id)[-1] == "cancelled"
    assert [a.step_id for a in loop.attempts(final.id)] == ["fill"]
    assert loop.site.received == []


def test_released_a_stopping_worker_hands_the_run_back_at_the_next_boundary(loop: Loop) -> None:
    """A worker asked to stop while a step runs hands the run back at the next step boundary:
    the pass ends "released", the run is QUEUED again with no owner and a new epoch, and the
    effect after the boundary never runs."""
    flow = Flow("released")

    @flow.step
    async def fill(ctx: StepContext[Any]) -> None:
        loop.executors[-1].stop_requested = True

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)

    run = loop.claim(loop.new_run(flow).id)
    final = asyncio.run(loop.execute(flow, run))

    assert (final.state, final.owner, final.lease_epoch) == (RunState.QUEUED, None, run.lease_epoch + 1)
    assert loop.decisions(run.id)[-1] == "released"
    assert loop.executors[-1].throttled is False
    assert [a.step_id for a in loop.attempts(run.id)] == ["fill"]
    assert loop.site.received == []


def test_throttled_a_429_with_retry_after_pauses_the_key_and_hands_the_run_back(loop: Loop) -> None:
    """An effect whose every dispatch was answered 429 with a Retry-After did not land: the
    attempt is FAILED (decided "throttled"), the run's limit key is paused, and the pass ends
    "throttled": the run is QUEUED again until the pause ends, marked throttled."""
    flow = Flow("throttled")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)

    loop.site.answers = [Answer(429, {"Retry-After": "30"})]
    run = loop.claim(loop.new_run(flow).id)
    final = asyncio.run(loop.execute(flow, run))

    assert final.state == RunState.QUEUED
    assert loop.decisions(run.id)[-1] == "throttled"
    assert loop.executors[-1].throttled is True
    [attempt] = loop.attempts(run.id, "submit")
    assert (attempt.state, attempt.decided_by) == (AttemptState.FAILED, "throttled")
    assert "HTTP 429" in (attempt.error or "")
    assert loop.store.limit_pauses() == {"throttled": 1}


def test_approval_an_approve_effect_parks_the_run_and_sends_nothing(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``approve=True`` effect's POST is held for a person; with no decision within the hold
    (0 s here) it is aborted unsent, the attempt is FAILED_BEFORE_SEND (approval pending), the
    pass ends "approval" and the run waits AWAITING_APPROVAL on a pending approval."""
    monkeypatch.setenv("BROWSERWORKER_APPROVAL_HOLD", "0")
    flow = Flow("approval")

    @flow.effect(approve=True)
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)

    run = loop.claim(loop.new_run(flow).id)
    final = asyncio.run(loop.execute(flow, run))

    assert final.state == RunState.AWAITING_APPROVAL
    [attempt] = loop.attempts(run.id, "submit")
    assert (attempt.state, attempt.decided_by, attempt.dispatched_at) == (
        AttemptState.FAILED_BEFORE_SEND,
        "approval_pending",
        None,
    )
    approval = loop.store.approvals.current(run.id, "submit")
    assert approval is not None and approval.state == "PENDING"
    assert approval.summary["url"].startswith(f"{SITE}/orders")
    assert loop.site.received == []


def test_review_an_effect_in_doubt_parks_the_run(loop: Loop) -> None:
    """An effect whose outcome cannot be proven (dispatched, answer lost, no verifier, not
    idempotent) ends the next pass "review": the run is NEEDS_REVIEW with the reason, and it
    was dispatched once."""
    flow = Flow("review")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)

    loop.site.answers = [Answer(reset=True)]
    final = loop.run_to_end(flow)

    assert final.state == RunState.NEEDS_REVIEW
    assert "no verifier and not idempotent" in (final.error or "")
    assert len(loop.browser.contexts) == 2 and len(loop.site.sent()) == 1


def test_an_undeclared_post_in_a_fail_mode_action_is_refused_and_fails_the_run(loop: Loop) -> None:
    """With ``undeclared_effects="fail"``, an action's POST (only an effect may send one) is
    aborted at the context's route before it leaves, and the run fails naming it: the site
    never sees it."""
    flow = Flow("undeclared", undeclared_effects="fail")

    @flow.step
    async def search(ctx: StepContext[Any]) -> None:
        await page(ctx).send("POST", f"{SITE}/newsletter")

    final = loop.run_to_end(flow)

    assert final.state == RunState.FAILED
    assert f"refused, not sent: POST {SITE}/newsletter" in (final.error or "")
    [attempt] = loop.attempts(final.id, "search")
    assert (attempt.state, attempt.decided_by) == (AttemptState.FAILED, "undeclared_effect")
    assert loop.site.received == []
