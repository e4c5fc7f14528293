"""An effect's outcome, classified by the real step loop (executor, gate, journal) on fake
Playwright objects and a real SQLite store: docs/guarantees.md, "How a finished attempt is
classified" and "Recovery". No browser, no subprocess."""

from __future__ import annotations

from typing import Any

import pytest

from browserworker.flow import Flow, RecordedResponse, StepContext, Verdict
from browserworker.states import AttemptState, RunState
from tests.support.loop_fakes import (
    SITE,
    Answer,
    Loop,
    page,
    post,
)


def test_an_effect_that_returns_succeeds_with_its_journaled_result(loop: Loop) -> None:
    """An effect that dispatched and returned is SUCCEEDED, decided by its return; its value is
    the attempt's journaled result, the answer is in its outbox row, and the next step is handed
    the result."""
    flow = Flow("returns")
    seen: list[Any] = []

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> dict[str, int]:
        response = await post(ctx)
        return {"order": 7, "status": response.status}

    @flow.step
    async def after(ctx: StepContext[Any]) -> None:
        seen.append(ctx.results["submit"])

    loop.site.answers = [Answer(201)]
    final = loop.run_to_end(flow)

    assert final.state == RunState.SUCCEEDED
    [attempt] = loop.attempts(final.id, "submit")
    assert (attempt.state, attempt.decided_by, attempt.result) == (
        AttemptState.SUCCEEDED,
        "return",
        {"order": 7, "status": 201},
    )
    assert attempt.dispatched_at is not None and attempt.request_key == f"{final.id}/submit"
    [row] = loop.store.outbox(attempt.id)
    assert (row.method, row.status, row.channel) == ("POST", 201, "held")
    assert seen == [{"order": 7, "status": 201}]
    assert loop.site.sent() == [f"{SITE}/orders?key={final.id}/submit"]


def test_a_dispatch_reaches_the_site_only_after_its_intent_and_dispatch_are_committed(loop: Loop) -> None:
    """The gate holds an effect's POST until the store has the attempt's intent, its
    ``dispatched_at`` and an outbox row for it: when the site receives it, all three are
    committed. A GET the effect makes is not a dispatch: it passes without an outbox row."""
    flow = Flow("held")
    at_the_site: list[tuple[AttemptState, bool, int]] = []
    run_ids: list[str] = []

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> None:
        run_ids.append(ctx.run_id)
        await page(ctx).send("GET", f"{SITE}/cart")
        await post(ctx)

    def receive(method: str, url: str) -> Answer:
        if method == "POST":
            [attempt] = loop.attempts(run_ids[0], "submit")
            at_the_site.append((attempt.state, attempt.dispatched_at is not None, len(loop.store.outbox(attempt.id))))
        return Answer(200)

    loop.site.respond = receive
    final = loop.run_to_end(flow)

    assert final.state == RunState.SUCCEEDED
    assert at_the_site == [(AttemptState.INTENT, True, 1)]
    [attempt] = loop.attempts(final.id, "submit")
    assert [r.method for r in loop.store.outbox(attempt.id)] == ["POST"]
    assert [m for m, _ in loop.site.received] == ["GET", "POST"]


def test_a_page_request_call_in_an_effect_is_journaled_before_it_is_sent(loop: Loop) -> None:
    """A ``page.request`` POST (made by Playwright's driver: no route sees it) passes the gate
    too: when it reaches the site the attempt's ``dispatched_at`` is committed, its outbox row
    (channel "api") gets the answer, and the effect is SUCCEEDED."""
    flow = Flow("api")
    committed: list[bool] = []
    run_ids: list[str] = []

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> int:
        run_ids.append(ctx.run_id)
        response = await page(ctx).request.post(f"{SITE}/api/orders?key={ctx.request_key}")
        return response.status

    def receive(method: str, url: str) -> Answer:
        [attempt] = loop.attempts(run_ids[0], "submit")
        committed.append(attempt.dispatched_at is not None)
        return Answer(201)

    loop.site.respond = receive
    final = loop.run_to_end(flow)

    assert final.state == RunState.SUCCEEDED and committed == [True]
    [attempt] = loop.attempts(final.id, "submit")
    assert (attempt.state, attempt.result) == (AttemptState.SUCCEEDED, 201)
    [row] = loop.store.outbox(attempt.id)
    assert (row.method, row.channel, row.status) == ("POST", "api", 201)


@pytest.mark.parametrize("retries", [0, 1])
def test_an_effect_that_raises_before_sending_is_failed_before_send_and_retried_per_retries(
    loop: Loop, retries: int
) -> None:
    """An effect that raises with nothing dispatched is FAILED_BEFORE_SEND (decided by the gate:
    no dispatch), safe to replay: it is attempted again with the same request key, ``retries=``
    times, then the run FAILED. Nothing reached the site."""
    flow = Flow("raises-before")
    keys: list[str] = []

    @flow.effect(retries=retries)
    async def submit(ctx: StepContext[Any]) -> None:
        keys.append(ctx.request_key)
        raise RuntimeError("the button is not there")

    final = loop.run_to_end(flow)

    assert final.state == RunState.FAILED
    assert "RuntimeError: the button is not there" in (final.error or "")
    attempts = loop.attempts(final.id, "submit")
    assert [(a.state, a.decided_by, a.dispatched_at) for a in attempts] == [
        (AttemptState.FAILED_BEFORE_SEND, "gate:no_dispatch", None)
    ] * (retries + 1)
    assert [a.error for a in attempts] == ["RuntimeError: the button is not there"] * (retries + 1)
    assert keys == [f"{final.id}/submit"] * (retries + 1)
    assert len(loop.browser.contexts) == retries + 1  # each replay in a fresh context
    assert loop.site.received == []


def test_a_replay_after_failed_before_send_succeeds_with_the_same_key(loop: Loop) -> None:
    """An effect that failed before sending and then succeeds on its replay: two attempts
    (FAILED_BEFORE_SEND, SUCCEEDED) of one request key, and exactly one POST at the site."""
    flow = Flow("raises-once")
    calls: list[int] = []

    @flow.effect(retries=1)
    async def submit(ctx: StepContext[Any]) -> str:
        calls.append(ctx.attempt_no)
        if len(calls) == 1:
            raise TimeoutError("slow page")
        await post(ctx)
        return "placed"

    final = loop.run_to_end(flow)

    assert final.state == RunState.SUCCEEDED
    attempts = loop.attempts(final.id, "submit")
    assert [a.state for a in attempts] == [AttemptState.FAILED_BEFORE_SEND, AttemptState.SUCCEEDED]
    assert {a.request_key for a in attempts} == {f"{final.id}/submit"}
    assert attempts[1].result == "placed"
    assert loop.site.sent() == [f"{SITE}/orders?key={final.id}/submit"]


def test_an_effect_that_raises_after_its_dispatch_is_unknown_and_not_replayed_whatever_its_retries(
    loop: Loop,
) -> None:
    """An effect whose POST reached the site but whose answer was lost raises after the
    dispatch was journaled: the attempt is UNKNOWN (exception after dispatch), its context is
    shut (its page's renderer stopped) and closed, and the next pass reconciles it. With no
    verifier and not idempotent the run goes to NEEDS_REVIEW; ``retries=3`` does not make it
    replay: the site got exactly one POST."""
    flow = Flow("raises-after")

    @flow.effect(retries=3)
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)

    loop.site.answers = [Answer(reset=True)]
    final = loop.run_to_end(flow)

    assert final.state == RunState.NEEDS_REVIEW
    [attempt] = loop.attempts(final.id, "submit")
    assert (attempt.state, attempt.decided_by) == (AttemptState.UNKNOWN, "exception_after_dispatch")
    assert attempt.dispatched_at is not None and "ERR_CONNECTION_RESET" in (attempt.error or "")
    assert isinstance(attempt.evidence["stopped_at"], float)
    [row] = loop.store.outbox(attempt.id)
    assert row.status is None and row.failure == "net::ERR_CONNECTION_RESET"
    assert loop.decisions(final.id)[-2:] == ["needs_review", "needs_review"]  # the attempt's, then the run's
    assert len(loop.site.sent()) == 1
    first = loop.browser.contexts[0]
    assert first.closed and [p.crashed for p in first.opened] == [True]


@pytest.mark.parametrize("kind", ["neither", "idempotent", "verifier"])
def test_after_an_unknown_outcome_the_effects_options_decide(loop: Loop, kind: str) -> None:
    """An effect UNKNOWN after a dispatch (its answer lost) is reconciled in the next pass:
    with neither a verifier nor ``idempotent=True`` it is parked for review (one POST); an
    idempotent one is replayed with the same request key (two POSTs, one key); one with a
    verifier that finds it done is SUCCEEDED by the verifier (one POST, no replay)."""
    flow = Flow(f"unknown-{kind}")
    asked: list[str] = []

    @flow.effect(idempotent=kind == "idempotent", retries=1 if kind == "idempotent" else 0)
    async def submit(ctx: StepContext[Any]) -> str:
        await post(ctx)
        return "placed"

    if kind == "verifier":

        @submit.verify
        async def landed(ctx: StepContext[Any]) -> Verdict:
            asked.append(ctx.request_key)
            return Verdict.done({"found": ctx.request_key})

    loop.site.answers = [Answer(reset=True)]
    final = loop.run_to_end(flow)

    key = f"{final.id}/submit"
    attempts = loop.attempts(final.id, "submit")
    if kind == "neither":
        assert final.state == RunState.NEEDS_REVIEW
        assert [a.state for a in attempts] == [AttemptState.UNKNOWN]
        assert loop.site.sent() == [f"{SITE}/orders?key={key}"]
    elif kind == "idempotent":
        assert final.state == RunState.SUCCEEDED
        assert [a.state for a in attempts] == [AttemptState.UNKNOWN, AttemptState.SUCCEEDED]
        assert "idempotent_replay" in loop.decisions(final.id)
        assert loop.site.sent() == [f"{SITE}/orders?key={key}"] * 2
    else:
        assert final.state == RunState.SUCCEEDED
        [attempt] = attempts
        assert (attempt.state, attempt.decided_by, attempt.result) == (
            AttemptState.SUCCEEDED,
            "verifier",
            {"found": key},
        )
        assert asked == [key]
        assert "duplicate_prevented" in loop.decisions(final.id)
        assert loop.site.sent() == [f"{SITE}/orders?key={key}"]


def _created(response: RecordedResponse) -> Verdict | None:
    return Verdict.done({"status": response.status}) if response.status == 201 else None


@pytest.mark.parametrize(
    ("status", "confirm", "state", "decided_by", "run_state"),
    [
        (422, None, AttemptState.FAILED, "outbox", RunState.FAILED),
        (201, _created, AttemptState.SUCCEEDED, "outbox", RunState.SUCCEEDED),
        (200, None, AttemptState.UNKNOWN, "exception_after_dispatch", RunState.NEEDS_REVIEW),
    ],
)
def test_a_recorded_answer_decides_an_effect_that_raised_after_dispatch(
    loop: Loop, status: int, confirm: Any, state: AttemptState, decided_by: str, run_state: RunState
) -> None:
    """An effect that raised after its POST was answered is decided by the recorded answer,
    never by the exception alone: a definitive 4xx is FAILED (the run fails, nothing is
    replayed), an answer its ``confirm`` judges done is SUCCEEDED with confirm's result, and an
    answer that proves nothing (200, no confirm) leaves it UNKNOWN (review)."""
    flow = Flow("answered")

    @flow.effect(confirm=confirm)
    async def submit(ctx: StepContext[Any]) -> None:
        await post(ctx)
        raise RuntimeError("the confirmation page did not render")

    loop.site.answers = [Answer(status)]
    final = loop.run_to_end(flow)

    assert final.state == run_state
    [attempt] = loop.attempts(final.id, "submit")
    assert (attempt.state, attempt.decided_by) == (state, decided_by)
    if state == AttemptState.SUCCEEDED:
        assert attempt.result == {"status": 201}
    assert len(loop.site.sent()) == 1


def test_confirm_rejecting_the_answer_fails_an_effect_that_returned(loop: Loop) -> None:
    """An effect that returned normally is SUCCEEDED unless its ``confirm`` rejects the recorded
    answer: then it is FAILED (decided by confirm) and counts against ``retries=``; out of
    retries (0 here) the run fails after one POST. (Should it be replayed instead, the test stops
    the run at the second POST, so that it ends, QUEUED, and fails.)"""
    flow = Flow("confirm-rejects")

    @flow.effect(confirm=lambda response: response.status == 201)
    async def submit(ctx: StepContext[Any]) -> str:
        await post(ctx)
        return "looked fine"

    def answer(method: str, url: str) -> Answer:
        if len(loop.site.sent()) > 1:  # replayed: hand the run back at the next step boundary
            loop.executors[-1].stop_requested = True
        return Answer(200)

    loop.site.respond = answer
    final = loop.run_to_end(flow)

    assert [(a.state, a.decided_by) for a in loop.attempts(final.id, "submit")][:1] == [
        (AttemptState.FAILED, "confirm")
    ]
    assert final.state == RunState.FAILED
    assert len(loop.site.sent()) == 1
