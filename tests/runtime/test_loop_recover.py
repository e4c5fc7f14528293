"""Recovering an effect in doubt after its owner died (docs/guarantees.md, "Recovery: verify
before replay"), through the real executor and recovery on fake Playwright objects and a real
SQLite store. The previous owner's journal is written as its gate would have written it; the
settle time runs on a fake clock (``RunScope.clock`` / ``RunScope.sleep``), so nothing sleeps."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from browserworker.flow import Flow, StepContext, Verdict
from browserworker.runtime._kept import KeptState
from browserworker.runtime._settings import SessionSettings
from browserworker.states import AttemptState, RunState
from browserworker.store.records import AttemptRecord, Owner, RunRecord
from tests.support.loop_fakes import (
    SITE,
    FakeClock,
    FakeContext,
    Heard,
    Loop,
    page,
    post,
)

DEAD = Owner("dead-worker", "other-host", 4242)


def crashed(
    loop: Loop, flow: Flow[Any], *, dispatched: bool = True, answered: int | None = None
) -> tuple[RunRecord, AttemptRecord]:
    """A run whose previous owner committed the intent of ``submit`` and (``dispatched``) its
    gate's dispatch commit for the POST, which reached the site (and, with ``answered``, its
    answer), then died; returned as this process claims it (the owner proven gone) with that
    attempt."""
    run = loop.new_run(flow)
    first = loop.claim(run.id, DEAD)
    epoch, key = first.lease_epoch, f"{run.id}/submit"
    step = flow.get("submit")
    assert step is not None
    fp = flow.fingerprint(step, flow.validate_inputs({}), {})
    attempt = loop.store.begin_attempt(run.id, epoch, "submit", "effect", key, fp, worker=DEAD.worker)
    if dispatched:
        url = f"{SITE}/orders?key={key}"
        outbox_id = loop.store.mark_dispatched(attempt, epoch, "POST", url)
        loop.site.take("POST", url)
        if answered is not None:
            loop.store.record_response(outbox_id, answered, url, {})
    return loop.claim(run.id, takeover_epoch=epoch), loop.store.get_attempt(attempt.id)


def order_flow(
    name: str,
    verdicts: list[Any] | None = None,
    clock: FakeClock | None = None,
    *,
    cart_gone: bool = False,
    **options: Any,
) -> tuple[Flow[Any], list[float]]:
    """A flow whose effect ``submit`` POSTs an order; with ``verdicts``, its verifier returns
    (or raises) them in turn. Returns the flow and when (on ``clock``) the verifier was asked.
    With ``cart_gone``, an action ``checkout`` before it can no longer be run (the site emptied
    the cart once the order was placed)."""
    flow = Flow(name)
    asked: list[float] = []

    if cart_gone:

        @flow.step
        async def checkout(ctx: StepContext[Any]) -> None:
            raise RuntimeError("the cart is empty: no checkout form")

    @flow.effect(**options)
    async def submit(ctx: StepContext[Any]) -> str:
        await post(ctx)
        return "placed"

    if verdicts is not None:

        @submit.verify
        async def landed(ctx: StepContext[Any]) -> Any:
            assert ctx.request_key == f"{ctx.run_id}/submit"
            asked.append(clock() if clock is not None else time.time())
            await page(ctx).request.get(f"{SITE}/api/orders?key={ctx.request_key}")
            verdict = verdicts.pop(0)
            if isinstance(verdict, BaseException):
                raise verdict
            return verdict

    return flow, asked


def execute(
    loop: Loop, flow: Flow[Any], run: RunRecord, clock: FakeClock | None = None, heard: Heard | None = None
) -> RunRecord:
    """Execute the claimed run with the settle rule on ``clock`` (a fake one, standing still)."""
    return asyncio.run(loop.execute(flow, run, heard or Heard(), clock or FakeClock(time.time())))


def test_a_verifier_that_says_done_settles_the_attempt_with_no_second_dispatch(loop: Loop) -> None:
    """An attempt in doubt (dispatched, then its owner died) whose verifier says done is
    SUCCEEDED by the verifier with the verifier's result (and what it looked at), journaled
    "duplicate_prevented"; the effect is not run again: the site has the one POST it had."""
    clock = FakeClock(time.time())
    flow, asked = order_flow("verified-done", [Verdict.done({"order": 7})], clock)
    run, attempt = crashed(loop, flow)
    assert attempt.state == AttemptState.INTENT and attempt.dispatched_at is not None

    final = execute(loop, flow, run, clock)

    assert final.state == RunState.SUCCEEDED
    [after] = loop.attempts(run.id, "submit")
    assert (after.state, after.decided_by, after.result) == (AttemptState.SUCCEEDED, "verifier", {"order": 7})
    assert after.evidence["verdict"] == "done" and after.evidence["asked"] == 1
    assert after.evidence["checked"] == [f"GET {SITE}/api/orders?key={run.id}/submit -> 200"]
    assert "duplicate_prevented" in loop.decisions(run.id)
    assert len(asked) == 1 and clock.slept == []
    assert len(loop.site.sent()) == 1


def test_not_done_counts_only_after_the_settle_time_then_the_effect_is_replayed_once(loop: Loop) -> None:
    """A verifier's "not done" while the POST may still be in flight (no answer recorded) does
    not count: the loop waits until the old owner's stop plus the effect's settle time (30 s, on
    the fake clock), asks again, and only that "not done" makes the attempt NOT_DONE; the effect
    is then replayed once, with the same request key and fingerprint (one more POST)."""
    clock = FakeClock(time.time())
    verdicts = [Verdict.not_done("no order"), Verdict.not_done("still none")]
    flow, asked = order_flow("verified-not-done", verdicts, clock)
    run, _ = crashed(loop, flow)
    assert run.owner_stopped_at is not None
    deadline = run.owner_stopped_at + 30.0
    heard = Heard()

    final = execute(loop, flow, run, clock, heard)

    assert final.state == RunState.SUCCEEDED
    assert len(asked) == 2 and asked[0] < deadline and asked[1] == deadline
    assert clock.slept == [deadline - asked[0]]
    [waiting] = [n for n in heard.notices if n.startswith("verifier says not done")]
    assert "may still be in flight" in waiting and "(settle 30s)" in waiting
    first, replay = loop.attempts(run.id, "submit")
    assert (first.state, first.decided_by, first.evidence["asked"]) == (AttemptState.NOT_DONE, "verifier", 2)
    assert (replay.state, replay.result) == (AttemptState.SUCCEEDED, "placed")
    assert (replay.request_key, replay.request_fingerprint) == (first.request_key, first.request_fingerprint)
    assert loop.site.sent() == [f"{SITE}/orders?key={run.id}/submit"] * 2


def test_an_answer_recorded_for_every_dispatch_ends_the_settle_wait_at_once(loop: Loop) -> None:
    """When the outbox has an answer for every dispatched request (here a 200 that proves
    nothing by itself), nothing can still be in flight: the verifier's first "not done" counts
    at once, with no wait, and the effect is replayed once."""
    clock = FakeClock(time.time())
    flow, asked = order_flow("answered-not-done", [Verdict.not_done("no order")], clock)
    run, _ = crashed(loop, flow, answered=200)

    final = execute(loop, flow, run, clock)

    assert final.state == RunState.SUCCEEDED
    assert len(asked) == 1 and clock.slept == []
    assert [a.state for a in loop.attempts(run.id, "submit")] == [AttemptState.NOT_DONE, AttemptState.SUCCEEDED]
    assert len(loop.site.sent()) == 2


@pytest.mark.parametrize(
    ("verdict", "reason"),
    [
        (ConnectionError("orders API down"), "verifier raised ConnectionError: orders API down"),
        (Verdict.unknown("two orders match"), "two orders match"),
        ("done", "verifier returned 'done', not a Verdict"),
    ],
)
def test_a_verifier_that_raises_or_cannot_tell_parks_the_run_for_review(loop: Loop, verdict: Any, reason: str) -> None:
    """A verifier that raises, says unknown, or returns something that is not a Verdict proves
    nothing: the attempt stays UNKNOWN, "needs_review" is journaled with the reason, the run is
    NEEDS_REVIEW, and nothing is dispatched again."""
    flow, asked = order_flow("verifier-unsure", [verdict])
    run, _ = crashed(loop, flow)

    final = execute(loop, flow, run)

    assert final.state == RunState.NEEDS_REVIEW
    assert reason in (final.error or "")
    [attempt] = loop.attempts(run.id, "submit")
    assert (attempt.state, attempt.decided_by) == (AttemptState.UNKNOWN, "recovery:dispatched")
    [review] = [e for e in loop.events(run.id, ["decision"]) if e.decision == "needs_review"]
    assert review.detail["verdict"] == "unknown" and review.detail["reason"] == reason
    assert len(asked) == 1 and len(loop.site.sent()) == 1


def test_an_intent_with_no_dispatch_is_replayed_without_asking_the_verifier(loop: Loop) -> None:
    """An attempt whose owner died before its gate committed any dispatch sent nothing: it is
    FAILED_BEFORE_SEND ("recovery:no_dispatch") and replayed with the same key, and the verifier
    is never asked."""
    flow, asked = order_flow("no-dispatch", [])
    run, _ = crashed(loop, flow, dispatched=False)

    final = execute(loop, flow, run)

    assert final.state == RunState.SUCCEEDED
    first, replay = loop.attempts(run.id, "submit")
    assert (first.state, first.decided_by) == (AttemptState.FAILED_BEFORE_SEND, "recovery:no_dispatch")
    assert replay.state == AttemptState.SUCCEEDED and replay.request_key == first.request_key
    assert asked == [] and len(loop.site.sent()) == 1


def test_an_answer_that_confirms_the_effect_settles_it_without_the_verifier(loop: Loop) -> None:
    """An attempt in doubt whose recorded answer the effect's ``confirm`` judges done is
    SUCCEEDED by the outbox, with confirm's result, without asking the verifier or the site."""
    flow, asked = order_flow(
        "outbox-done", [], confirm=lambda r: Verdict.done({"status": r.status}) if r.status == 201 else None
    )
    run, _ = crashed(loop, flow, answered=201)

    final = execute(loop, flow, run)

    assert final.state == RunState.SUCCEEDED
    [attempt] = loop.attempts(run.id, "submit")
    assert (attempt.state, attempt.decided_by, attempt.result) == (
        AttemptState.SUCCEEDED,
        "outbox",
        {"status": 201},
    )
    assert asked == [] and len(loop.site.sent()) == 1


@pytest.mark.parametrize("idempotent", [True, False])
def test_without_a_verifier_idempotent_replays_and_otherwise_the_run_waits_for_review(
    loop: Loop, idempotent: bool
) -> None:
    """An attempt in doubt with no verifier: an ``idempotent=True`` effect is replayed with the
    same request key ("idempotent_replay"; the site dedupes on it); any other is parked for a
    person (NEEDS_REVIEW) and never dispatched again."""
    flow, _ = order_flow(f"no-verifier-{idempotent}", None, idempotent=idempotent)
    run, _ = crashed(loop, flow)

    final = execute(loop, flow, run)

    states = [a.state for a in loop.attempts(run.id, "submit")]
    if idempotent:
        assert final.state == RunState.SUCCEEDED
        assert states == [AttemptState.UNKNOWN, AttemptState.SUCCEEDED]
        assert "idempotent_replay" in loop.decisions(run.id)
        assert loop.site.sent() == [f"{SITE}/orders?key={run.id}/submit"] * 2
    else:
        assert final.state == RunState.NEEDS_REVIEW
        assert states == [AttemptState.UNKNOWN]
        assert "needs_review" in loop.decisions(run.id)
        assert len(loop.site.sent()) == 1


def test_a_replay_whose_fingerprint_changed_is_never_dispatched(loop: Loop) -> None:
    """A dispatched attempt proven not done is replayed only if the replay would send what was
    dispatched: when the fingerprint changed (here the flow's inputs model now yields other
    inputs), the replay is journaled UNKNOWN ("fingerprint_mismatch") and the run waits for
    review, with nothing sent."""
    flow, _ = order_flow("fingerprint", [Verdict.not_done("no order")])
    run, _ = crashed(loop, flow, answered=200)
    changed, _ = order_flow("fingerprint", [Verdict.not_done("no order")], fingerprint=lambda inputs, results: 2)

    final = execute(loop, changed, run)

    assert final.state == RunState.NEEDS_REVIEW
    first, refused = loop.attempts(run.id, "submit")
    assert first.state == AttemptState.NOT_DONE
    assert (refused.state, refused.decided_by, refused.dispatched_at) == (
        AttemptState.UNKNOWN,
        "fingerprint_mismatch",
        None,
    )
    assert len(loop.site.sent()) == 1


@pytest.mark.parametrize("verifier", [True, False])
def test_a_run_restored_from_a_backup_is_reconciled_as_if_its_effect_had_been_sent(loop: Loop, verifier: bool) -> None:
    """After a restore from a backup, "no ``dispatched_at``" proves nothing: an effect left in
    INTENT with no dispatch is not replayed blindly. With a verifier, its "not done" counts
    only from the restore plus the settle time (waited out on the fake clock), then the effect
    is replayed once; with none, the run waits for review and nothing is sent."""
    clock = FakeClock(time.time())
    flow, asked = order_flow(f"restored-{verifier}", [Verdict.not_done("no order")] * 2 if verifier else None, clock)
    run, attempt = crashed(loop, flow, dispatched=False)
    loop.store.fence_restored(stop_workers=False)
    restored = loop.claim(run.id)
    restored_at = loop.store.restored_at(run.id)
    assert restored_at is not None and attempt.dispatched_at is None

    final = execute(loop, flow, restored, clock)

    [first, *rest] = loop.attempts(run.id, "submit")
    if verifier:
        assert final.state == RunState.SUCCEEDED
        assert asked[-1] == restored_at + 30.0 and len(asked) == 2
        assert (first.state, first.decided_by) == (AttemptState.NOT_DONE, "verifier")
        assert [a.state for a in rest] == [AttemptState.SUCCEEDED]
        assert len(loop.site.sent()) == 1
    else:
        assert final.state == RunState.NEEDS_REVIEW
        assert (first.state, first.decided_by, rest) == (AttemptState.UNKNOWN, "restore:unproven", [])
        assert loop.site.sent() == []


def test_an_effect_in_doubt_whose_earlier_steps_cannot_run_again_is_decided_by_its_verifier(loop: Loop) -> None:
    """The order was sent, then its owner died; the new pass cannot run the step before it (the
    checkout is gone once the order is placed), so recovery never reaches the effect. Its
    verifier is asked all the same and finds it done: SUCCEEDED by the verifier, and the run too
    (nothing is left to do); no second POST."""
    flow, asked = order_flow("stranded-done", [Verdict.done({"order": 7})], cart_gone=True)
    run, _ = crashed(loop, flow)

    final = execute(loop, flow, run)

    assert final.state == RunState.SUCCEEDED, final.error
    [after] = loop.attempts(run.id, "submit")
    assert (after.state, after.decided_by, after.result) == (AttemptState.SUCCEEDED, "verifier", {"order": 7})
    assert "could not be run again" in after.evidence["reason"]
    assert len(asked) == 1 and "duplicate_prevented" in loop.decisions(run.id)
    assert len(loop.site.sent()) == 1


@pytest.mark.parametrize("verdict", [Verdict.not_done("no order"), Verdict.unknown("the API is down"), None])
def test_an_effect_in_doubt_whose_earlier_steps_cannot_run_again_goes_to_a_person_unless_found_done(
    loop: Loop, verdict: Verdict | None
) -> None:
    """The same, where the verifier does not find the order (or there is none): the effect stays
    in doubt and the run goes to review with both reasons, not to FAILED (a failed run would
    hold an effect nobody decides), and nothing is sent again."""
    flow, _ = order_flow("stranded-review", None if verdict is None else [verdict], cart_gone=True)
    run, _ = crashed(loop, flow)

    final = execute(loop, flow, run)

    assert final.state == RunState.NEEDS_REVIEW
    assert final.error is not None and "submit is in doubt" in final.error and "the cart is empty" in final.error
    [after] = loop.attempts(run.id, "submit")
    assert after.state in (AttemptState.INTENT, AttemptState.UNKNOWN)
    assert "needs_review" in loop.decisions(run.id)
    assert len(loop.site.sent()) == 1


def test_a_failure_before_an_effect_never_sent_stays_a_failure(loop: Loop) -> None:
    """An effect whose intent was journaled but never sent is not in doubt: a pass failing
    before it fails the run as any failure does, and its verifier is not asked."""
    flow, asked = order_flow("unsent", [Verdict.done({"order": 7})], cart_gone=True)
    run, _ = crashed(loop, flow, dispatched=False)

    final = execute(loop, flow, run)

    assert final.state == RunState.FAILED and asked == []
    assert loop.site.sent() == []


def test_a_pass_after_a_crash_starts_from_the_browser_state_a_done_effect_left(loop: Loop) -> None:
    """``add_to_cart`` was done by the owner that died (the site's answer set the cart's cookie,
    which it kept, sealed, in the journal), and its order was in doubt. The new owner's pass skips
    the done effect, so only the kept state brings the cart back: its context starts from it,
    ``checkout`` finds the cart, and the order, verified not done, is placed again once."""
    flow = Flow("cart")

    @flow.effect
    async def add_to_cart(ctx: StepContext[Any]) -> None:
        raise AssertionError("done before the crash: never run again")

    @flow.step
    async def checkout(ctx: StepContext[Any]) -> None:
        if not any(c["name"] == "cart" for c in page(ctx).context.cookies):
            raise RuntimeError("the cart is empty: no checkout form")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> str:
        await post(ctx)
        return "placed"

    @submit.verify
    async def landed(ctx: StepContext[Any]) -> Verdict:
        return Verdict.not_done("no order")

    run = loop.new_run(flow)
    dead = loop.claim(run.id, DEAD)
    fp = flow.fingerprint(flow.get("add_to_cart"), flow.validate_inputs({}), {})  # type: ignore[arg-type]
    added = loop.store.begin_attempt(run.id, dead.lease_epoch, "add_to_cart", "effect", f"{run.id}/a", fp)
    loop.store.finish_attempt(added, dead.lease_epoch, AttemptState.SUCCEEDED, decided_by="return")
    left = FakeContext(loop.site)
    left.cookies = [{"name": "cart", "value": "tea", "domain": "shop.test", "path": "/"}]
    asyncio.run(KeptState(loop.journal(dead, DEAD), SessionSettings()).keep(left, "add_to_cart"))  # type: ignore[arg-type]
    [kept] = [e.detail for e in loop.store.events(run.id) if e.kind == "state_kept"]
    assert set(kept) == {"sealed"} and "tea" not in str(kept), "sealed, never in clear"
    key = f"{run.id}/submit"
    fp = flow.fingerprint(flow.get("submit"), flow.validate_inputs({}), {})  # type: ignore[arg-type]
    doubt = loop.store.begin_attempt(run.id, dead.lease_epoch, "submit", "effect", key, fp, worker=DEAD.worker)
    loop.store.mark_dispatched(doubt, dead.lease_epoch, "POST", f"{SITE}/orders?key={key}")
    loop.site.take("POST", f"{SITE}/orders?key={key}")
    run = loop.claim(run.id, takeover_epoch=dead.lease_epoch)

    final = execute(loop, flow, run)

    assert final.state == RunState.SUCCEEDED, final.error
    assert all(c.started_from is not None for c in loop.browser.contexts)
    assert [c["value"] for c in loop.browser.contexts[0].started_from["cookies"]] == ["tea"]  # type: ignore[index]
    first, replay = loop.attempts(run.id, "submit")
    assert (first.state, replay.state) == (AttemptState.NOT_DONE, AttemptState.SUCCEEDED)
    assert len(loop.site.sent()) == 2, "the one in doubt, then the replay once verified not done"


def test_a_state_that_cannot_be_read_after_an_effect_does_not_hold_the_run(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page too busy to give its storage (a script that never yields) does not hold the run
    after an effect: the state is read for at most ``READ_TIMEOUT`` seconds, then the run goes
    on, with what was kept before (nothing here)."""
    from browserworker.runtime import _kept

    async def never(self: FakeContext, indexed_db: bool = False) -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(_kept, "READ_TIMEOUT", 0.05)
    monkeypatch.setattr(FakeContext, "storage_state", never)
    flow = Flow("busy")

    @flow.effect
    async def submit(ctx: StepContext[Any]) -> str:
        await post(ctx)
        return "placed"

    @flow.step
    async def after(ctx: StepContext[Any]) -> None:
        pass

    final = loop.run_to_end(flow)

    assert final.state == RunState.SUCCEEDED
    assert not [e for e in loop.store.events(final.id) if e.kind == "state_kept"]
