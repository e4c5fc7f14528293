"""Pure decisions of the journal: how an attempt is classified and how it is recovered.

No browser and no store here: the executor gathers the evidence (the attempt, its
outbox rows, the effect's options) and asks these functions what it means. The
states and recovery rules of docs/guarantees.md are implemented here, so they are unit-tested here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..flow import RecordedResponse, Verdict
from ..states import AttemptState
from ..store.limit_rules import THROTTLE_STATUSES
from ..store.records import AttemptRecord, OutboxRecord

__all__ = [
    "Classification",
    "RecoveryPlan",
    "classify_attempt",
    "default_judge",
    "in_flight",
    "judge_outbox",
    "own_failures",
    "plan_recovery",
    "settle_deadline",
    "throttle_of",
    "throttled_attempts",
]

Judge = Callable[[RecordedResponse], Verdict | None]

# 4xx replies that do not prove the request was refused (timeouts, conflicts that may
# mean "already exists", rate limits): they say nothing about whether it landed.
_INCONCLUSIVE_4XX = frozenset({408, 409, 425, 429})


def default_judge(response: RecordedResponse) -> Verdict | None:
    """Without a ``confirm`` predicate: a definitive 4xx is a failure; anything else can't tell."""
    if 400 <= response.status < 500 and response.status not in _INCONCLUSIVE_4XX:
        return Verdict.not_done(f"HTTP {response.status} from {response.url}")
    return None


def _recorded(row: OutboxRecord) -> RecordedResponse:
    return RecordedResponse(
        status=int(row.status or 0), url=row.response_url or row.url, method=row.method, headers=row.headers or {}
    )


def judge_outbox(rows: Sequence[OutboxRecord], judge: Judge) -> Verdict | None:
    """What the recorded responses prove: done if any response is judged done; not_done
    only if every dispatched request was answered and every answer is judged a failure."""
    answered = [r for r in rows if r.answered]
    verdicts = [judge(_recorded(r)) for r in answered]
    for v in verdicts:
        if v is not None and v.kind == "done":
            return v
    if answered and len(answered) == len(rows) and all(v is not None and v.kind == "not_done" for v in verdicts):
        return verdicts[0]
    return None


def in_flight(rows: Sequence[OutboxRecord]) -> bool:
    """Some released request has no recorded response: it may still be processed downstream."""
    return any(not r.answered for r in rows)


@dataclass(frozen=True)
class Classification:
    """The state an attempt ends in once its effect function has returned or raised."""

    state: AttemptState
    decided_by: str
    result: Any = None
    reason: str | None = None


def classify_attempt(
    *,
    raised: BaseException | None,
    returned: Any,
    dispatched: bool,
    outbox: Sequence[OutboxRecord],
    judge: Judge,
    confirm: Judge | None = None,
) -> Classification:
    """Classify a finished effect attempt from the gate's journal and the outbox.

    Never from the client exception alone: an error after a dispatch is UNKNOWN unless a
    recorded response proves otherwise. A normal return is trusted unless the effect's
    own ``confirm`` predicate rejects the recorded responses. An attempt whose every dispatch
    was answered 429 or 503 with a ``Retry-After`` is FAILED, decided by ``throttled``: the
    site did not process it (:mod:`browserworker.store.limit_rules`).
    """
    throttled = throttle_of(outbox)
    if dispatched and throttled is not None:  # the site did not take it: back to the queue, after its pause
        return Classification(AttemptState.FAILED, THROTTLED, reason=throttled)
    if not dispatched:
        if raised is None:
            return Classification(AttemptState.SUCCEEDED, "return", returned)
        return Classification(AttemptState.FAILED_BEFORE_SEND, "gate:no_dispatch", reason=repr(raised))
    if raised is None:
        verdict = judge_outbox(outbox, confirm) if confirm is not None else None
        if verdict is not None and verdict.kind == "not_done":
            return Classification(AttemptState.FAILED, "confirm", reason=verdict.reason)
        return Classification(AttemptState.SUCCEEDED, "return", returned)
    verdict = judge_outbox(outbox, judge)
    if verdict is not None and verdict.kind == "not_done":
        return Classification(AttemptState.FAILED, "outbox", reason=verdict.reason)
    if verdict is not None and verdict.kind == "done":
        return Classification(AttemptState.SUCCEEDED, "outbox", verdict.result)
    return Classification(AttemptState.UNKNOWN, "exception_after_dispatch", reason=repr(raised))


THROTTLED = "throttled"
"""``decided_by`` of an attempt every dispatch of which the site answered 429/503 with a Retry-After."""


def throttle_of(rows: Sequence[OutboxRecord]) -> str | None:
    """Why the site refused every dispatch of an attempt for now (429/503 with a Retry-After),
    or None when some dispatch was not answered so, or there was none."""
    sent = [r for r in rows if r.channel != "detected"]
    if not sent or len(sent) != len(rows):
        return None
    for r in sent:
        after = next((v for k, v in (r.headers or {}).items() if k.lower() == "retry-after"), None)
        if r.status not in THROTTLE_STATUSES or after is None:
            return None
    last = sent[-1]
    return f"HTTP {last.status} from {last.response_url or last.url} (Retry-After: {after})"


@dataclass(frozen=True)
class RecoveryPlan:
    """What to do with an effect whose latest attempt is INTENT or UNKNOWN."""

    action: Literal["replay", "succeeded", "failed", "verify", "replay_idempotent", "park"]
    decided_by: str
    result: Any = None
    reason: str | None = None


def plan_recovery(
    attempt: AttemptRecord, outbox: Sequence[OutboxRecord], *, judge: Judge, has_verifier: bool, idempotent: bool
) -> RecoveryPlan:
    """docs/guarantees.md, "Recovery": no dispatch → replay; else outbox/confirm → verifier → idempotent → park."""
    if attempt.state not in (AttemptState.INTENT, AttemptState.UNKNOWN):
        raise ValueError(f"nothing to recover in a {attempt.state} attempt")
    if attempt.dispatched_at is None:
        return RecoveryPlan("replay", "gate:no_dispatch", reason="the gate released no request")
    verdict = judge_outbox(outbox, judge)
    if verdict is not None:
        if verdict.kind == "done":
            return RecoveryPlan("succeeded", "outbox", verdict.result, "a recorded response confirms it landed")
        return RecoveryPlan("failed", "outbox", reason=verdict.reason)
    if has_verifier:
        return RecoveryPlan("verify", "verifier")
    if idempotent:
        return RecoveryPlan("replay_idempotent", "idempotent", reason="the downstream dedupes on the request key")
    return RecoveryPlan("park", "no_proof", reason="dispatched, outcome unproven, no verifier and not idempotent")


def settle_deadline(outbox: Sequence[OutboxRecord], stopped_at: float, settle: float) -> float | None:
    """When a not_done verdict starts to count; None when no request can still be in flight."""
    if not in_flight(outbox):
        return None
    return stopped_at + settle


def own_failures(attempts: Sequence[AttemptRecord], step_id: str, since: float | None = None) -> int:
    """Attempts of a step that failed by their own error (crash recoveries do not count), begun
    after ``since`` (a person's requeue starts a fresh failure budget).

    An UNKNOWN attempt with an error (it failed after dispatch) counts too: an idempotent
    effect replayed after each such failure must not loop forever. A throttled attempt does
    not (:func:`throttled_attempts` has its own cap).
    """
    return sum(
        1
        for a in attempts
        if a.step_id == step_id
        and a.error is not None
        and a.decided_by != THROTTLED
        and (since is None or a.intent_at > since)
        and a.state
        in (AttemptState.FAILED_BEFORE_SEND, AttemptState.FAILED, AttemptState.NOT_DONE, AttemptState.UNKNOWN)
    )


def throttled_attempts(attempts: Sequence[AttemptRecord], step_id: str) -> int:
    """Attempts of a step the site throttled (429/503 with a Retry-After)."""
    return sum(1 for a in attempts if a.step_id == step_id and a.decided_by == THROTTLED)
