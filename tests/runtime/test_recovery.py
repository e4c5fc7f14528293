"""Classification and recovery decisions (docs/guarantees.md: states, recovery), without a browser."""

from __future__ import annotations

from typing import Any

import pytest

from browserworker.flow import RecordedResponse, Verdict
from browserworker.runtime._recovery_rules import (
    classify_attempt,
    default_judge,
    judge_outbox,
    own_failures,
    plan_recovery,
    settle_deadline,
)
from browserworker.states import AttemptState, RunState, check_attempt_transition, check_run_transition
from browserworker.store.records import AttemptRecord, OutboxRecord


def attempt(
    state: AttemptState = AttemptState.INTENT, dispatched: bool = True, error: str | None = None, step: str = "submit"
) -> AttemptRecord:
    return AttemptRecord(
        id=1,
        run_id="r",
        step_id=step,
        kind="effect",
        attempt_no=1,
        request_key=f"r/{step}",
        request_fingerprint="fp",
        state=state,
        lease_epoch=1,
        worker="w",
        intent_at=1.0,
        dispatched_at=2.0 if dispatched else None,
        finished_at=None,
        result=None,
        decided_by=None,
        evidence=None,
        error=error,
    )


def row(status: int | None = None, location: str | None = None, failure: str | None = None) -> OutboxRecord:
    return OutboxRecord(
        id=1,
        attempt_id=1,
        run_id="r",
        step_id="submit",
        method="POST",
        url="http://x/orders",
        released_at=2.0,
        status=status,
        response_url="http://x/orders" if status else None,
        headers={"location": location} if location else ({} if status else None),
        response_at=3.0 if status else None,
        failure=failure,
        failed_at=3.0 if failure else None,
    )


def created(resp: RecordedResponse) -> Verdict | None:
    if resp.status == 303 and resp.location:
        return Verdict.done({"order_id": resp.location.rsplit("/", 1)[1]})
    return Verdict.not_done("re-rendered") if resp.status == 200 else None


def test_no_dispatch_is_failed_before_send_even_after_a_client_error() -> None:
    """Without a gate release an error is FAILED_BEFORE_SEND; without an error it succeeded."""
    c = classify_attempt(raised=TimeoutError("x"), returned=None, dispatched=False, outbox=[], judge=default_judge)
    assert c.state == AttemptState.FAILED_BEFORE_SEND
    c = classify_attempt(raised=None, returned={"a": 1}, dispatched=False, outbox=[], judge=default_judge)
    assert (c.state, c.result) == (AttemptState.SUCCEEDED, {"a": 1})


def test_error_after_dispatch_is_unknown_not_a_failure() -> None:
    """A connection reset after the request left is UNKNOWN: the server may have accepted it."""
    c = classify_attempt(
        raised=ConnectionResetError(),
        returned=None,
        dispatched=True,
        outbox=[row(failure="net::ERR_CONNECTION_RESET")],
        judge=default_judge,
    )
    assert c.state == AttemptState.UNKNOWN


def test_recorded_response_decides_an_error_after_dispatch() -> None:
    """A confirm-judged response turns an exception into SUCCEEDED (303) or FAILED (200 re-render)."""
    c = classify_attempt(
        raised=TimeoutError(), returned=None, dispatched=True, outbox=[row(303, "/orders/9")], judge=created
    )
    assert (c.state, c.decided_by, c.result) == (AttemptState.SUCCEEDED, "outbox", {"order_id": "9"})
    c = classify_attempt(raised=TimeoutError(), returned=None, dispatched=True, outbox=[row(200)], judge=created)
    assert c.state == AttemptState.FAILED


def test_normal_return_is_trusted_unless_confirm_rejects() -> None:
    """A 4xx beacon does not fail a returning effect; an explicit confirm does."""
    c = classify_attempt(raised=None, returned=1, dispatched=True, outbox=[row(404)], judge=default_judge)
    assert c.state == AttemptState.SUCCEEDED
    c = classify_attempt(raised=None, returned=1, dispatched=True, outbox=[row(200)], judge=created, confirm=created)
    assert (c.state, c.decided_by) == (AttemptState.FAILED, "confirm")


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "not_done"),
        (403, "not_done"),
        (404, "not_done"),
        (409, None),
        (429, None),
        (500, None),
        (503, None),
        (200, None),
    ],
)
def test_default_judge(status: int, kind: str | None) -> None:
    """Only a definitive 4xx proves failure; 5xx (e.g. 503 after commit) proves nothing."""
    v = default_judge(RecordedResponse(status=status, url="u", method="POST", headers={}))
    assert (v.kind if v else None) == kind


def test_judge_outbox_needs_every_request_answered_for_not_done() -> None:
    """One unanswered request keeps the outcome open; any done answer settles it."""
    assert judge_outbox([row(200), row()], created) is None
    assert judge_outbox([row(200), row(200)], created).kind == "not_done"
    assert judge_outbox([row(), row(303, "/orders/1")], created).kind == "done"


def test_plan_without_dispatch_replays_without_verifying() -> None:
    """INTENT with no dispatched_at is replayed with the same key, no verifier needed."""
    plan = plan_recovery(attempt(dispatched=False), [], judge=default_judge, has_verifier=True, idempotent=False)
    assert plan.action == "replay"


@pytest.mark.parametrize(
    ("outbox", "has_verifier", "idempotent", "action"),
    [
        ([row(303, "/orders/1")], True, True, "succeeded"),  # outbox first, site untouched
        ([row(200)], True, False, "failed"),
        ([row()], True, True, "verify"),  # then the verifier
        ([row(503)], True, False, "verify"),
        ([row()], False, True, "replay_idempotent"),  # then idempotency
        ([row()], False, False, "park"),  # else a person
    ],
)
def test_plan_order_outbox_verifier_idempotent_park(
    outbox: list[OutboxRecord], has_verifier: bool, idempotent: bool, action: str
) -> None:
    """Recovery of a dispatched attempt follows outbox/confirm → verifier → idempotent → review."""
    plan = plan_recovery(attempt(), outbox, judge=created, has_verifier=has_verifier, idempotent=idempotent)
    assert plan.action == action


def test_plan_refuses_finished_attempts() -> None:
    """Only INTENT and UNKNOWN attempts are recovered."""
    with pytest.raises(ValueError):
        plan_recovery(attempt(AttemptState.SUCCEEDED), [], judge=default_judge, has_verifier=True, idempotent=True)


def test_settle_deadline() -> None:
    """not_done counts after stopped_at + settle, or at once when every request was answered."""
    assert settle_deadline([row()], stopped_at=100.0, settle=30) == 130.0
    assert settle_deadline([row(failure="reset")], stopped_at=100.0, settle=30) == 130.0
    assert settle_deadline([row(503)], stopped_at=100.0, settle=30) is None


def test_own_failures_ignore_crash_recoveries() -> None:
    """Attempts recovered after a crash do not use up a step's retries."""
    attempts: list[Any] = [
        attempt(AttemptState.FAILED_BEFORE_SEND, dispatched=False),  # recovered: no error
        attempt(AttemptState.NOT_DONE, error="TimeoutError"),
        attempt(AttemptState.FAILED_BEFORE_SEND, error="boom"),
        attempt(AttemptState.FAILED, error="x", step="other"),
    ]
    assert own_failures(attempts, "submit") == 2


def test_state_machines_refuse_illegal_moves() -> None:
    """Terminal states are final; an attempt cannot leave SUCCEEDED."""
    check_run_transition(RunState.QUEUED, RunState.LEASED)
    check_attempt_transition(AttemptState.INTENT, AttemptState.UNKNOWN)
    check_attempt_transition(AttemptState.UNKNOWN, AttemptState.NOT_DONE)
    with pytest.raises(ValueError):
        check_run_transition(RunState.SUCCEEDED, RunState.QUEUED)
    with pytest.raises(ValueError):
        check_attempt_transition(AttemptState.SUCCEEDED, AttemptState.FAILED)
    with pytest.raises(ValueError):
        check_attempt_transition(AttemptState.INTENT, AttemptState.NOT_DONE)


def test_unknown_after_an_error_counts_against_retries() -> None:
    """An attempt that failed after dispatch (UNKNOWN with an error) uses up a retry, so an
    idempotent effect that keeps failing cannot loop forever."""
    attempts: list[Any] = [
        attempt(AttemptState.UNKNOWN, error="net::ERR_CONNECTION_RESET"),
        attempt(AttemptState.UNKNOWN),
    ]  # parked after a crash: no error, not counted
    assert own_failures(attempts, "submit") == 1
