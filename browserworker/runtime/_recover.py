"""Recovering an effect whose latest attempt is INTENT or UNKNOWN: carrying out the plan
:func:`~browserworker.runtime._recovery_rules.plan_recovery` makes (docs/guarantees.md, "Recovery").

Nothing here decides *what* to do (that is :mod:`browserworker.runtime._recovery_rules`, pure functions);
this journals each decision, asks the verifier (waiting out the settle time), and ends the
pass the way the plan says: replay now, hand on a result, park for review, or fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from playwright.async_api import Page

from .. import _faults as faults
from ..errors import LeaseLost
from ..flow import Effect, RecordedResponse, Verdict
from ..gate import Observed, disarm_unload
from ..states import AttemptState
from ..store.records import AttemptRecord, OutboxRecord
from ._passes import REPLAY_NOW, Again, RunScope, Stop, in_own_task, jsonable, response_evidence, safe_url
from ._recovery_rules import default_judge, plan_recovery, settle_deadline

__all__ = ["found_done", "in_doubt", "judge_of", "recover", "restore_gap", "restore_gap_open", "stranded", "verify"]


def judge_of(step: Effect) -> Any:
    """How a response of ``step`` is judged: its own ``confirm`` rule, else the default."""

    def judge(response: RecordedResponse) -> Verdict | None:
        return step.judge(response) if step.confirm is not None else default_judge(response)

    return judge


async def recover(scope: RunScope, step: Effect, attempt: AttemptRecord, page: Page, results: dict[str, Any]) -> Any:
    """Recover ``attempt`` of ``step``: its result, :data:`REPLAY_NOW`, or :class:`Again` / :class:`Stop`."""
    journal, ext = scope.journal, scope.extensions
    outbox = await journal.outbox(attempt)
    plan = plan_recovery(
        attempt, outbox, judge=judge_of(step), has_verifier=step.verifier is not None, idempotent=step.idempotent
    )
    scope.attempt_log(attempt).info("recovering effect", plan=plan.action)
    await ext.notice(
        scope.run,
        step.id,
        f"recovering attempt {attempt.attempt_no} ({attempt.state}): {plan.action} ({plan.decided_by})",
    )
    if plan.action == "replay":  # INTENT with no dispatch: nothing left, replay with the same key
        done = await journal.finish(
            attempt,
            AttemptState.FAILED_BEFORE_SEND,
            decided_by="recovery:no_dispatch",
            evidence={"reason": plan.reason},
        )
        await ext.outcome(done)
        return REPLAY_NOW
    if attempt.state == AttemptState.INTENT:
        attempt = await journal.finish(
            attempt,
            AttemptState.UNKNOWN,
            decided_by="recovery:dispatched",
            evidence={
                "reason": "the owner stopped after dispatch, before an outcome",
                "responses": [response_evidence(o) for o in outbox],
            },
        )
        await ext.outcome(attempt)
    faults.hit("reclaimer_startup", step.id)
    if plan.action == "succeeded":
        done = await journal.finish(
            attempt,
            AttemptState.SUCCEEDED,
            decided_by="outbox",
            result=plan.result,
            evidence={"reason": plan.reason, "responses": [response_evidence(o) for o in outbox]},
        )
        await ext.outcome(done)
        return done.result
    if plan.action == "failed":
        done = await journal.finish(
            attempt, AttemptState.FAILED, decided_by="outbox", evidence={"reason": plan.reason}, error=plan.reason
        )
        await ext.outcome(done)
        raise Stop("failed", f"effect {step.id} was refused downstream: {plan.reason}")
    if plan.action == "replay_idempotent":
        await journal.decide(attempt, "idempotent_replay", {"reason": plan.reason})
        return REPLAY_NOW
    if plan.action == "park":
        shot = await scope.screenshot(page, f"{step.id}-{attempt.attempt_no}")
        await journal.decide(
            attempt, "needs_review", {"reason": plan.reason, "page_url": safe_url(page), "screenshot": shot}
        )
        raise Stop("review", f"effect {step.id}: {plan.reason}")
    return await verify(scope, step, attempt, outbox, page, results)


def in_doubt(attempt: AttemptRecord | None) -> bool:
    """Whether an effect's latest attempt is in doubt: its owner stopped after it may have been
    sent (UNKNOWN, or INTENT with its dispatch journaled), before its outcome."""
    if attempt is None:
        return False
    return attempt.state == AttemptState.UNKNOWN or (
        attempt.state == AttemptState.INTENT and attempt.dispatched_at is not None
    )


async def found_done(
    scope: RunScope, step: Effect, attempt: AttemptRecord, page: Page, results: dict[str, Any]
) -> bool:
    """Ask ``step``'s verifier once about ``attempt`` (:func:`in_doubt`) on ``page``, where the
    steps before the effect could not be run again (the site moved on: an order placed empties
    the checkout it came from), so recovery never reached it. Where it finds the effect done, the
    attempt is SUCCEEDED by the verifier, as recovery would decide it (a *done* needs no settle
    time), and True. Its *not done* or *unknown* decides nothing here: a replay would need the
    page those steps make."""
    if step.verifier is None:
        return False
    ctx = scope.step_context(page, step.id, attempt, attempt.request_fingerprint, results)
    with Observed(page) as looked:
        verdict = await _ask(step, ctx)
    scope.journal.check()
    if verdict.kind != "done":
        return False
    if attempt.state == AttemptState.INTENT:
        attempt = await scope.journal.finish(
            attempt,
            AttemptState.UNKNOWN,
            decided_by="recovery:dispatched",
            evidence={"reason": "the owner stopped after dispatch, before an outcome"},
        )
        await scope.extensions.outcome(attempt)
    evidence = {
        "verdict": verdict.kind,
        "reason": "asked where the steps before it could not be run again",
        "page_url": safe_url(page),
        "verifier": _name(step.verifier),
        "checked": looked.checked,
    }
    await _verified_done(scope, attempt, verdict, evidence, scope.attempt_log(attempt))
    return True


async def stranded(
    scope: RunScope,
    effects: Sequence[tuple[Effect, AttemptRecord | None]],
    page: Page,
    results: dict[str, Any],
    reason: str,
) -> tuple[list[str], str | None]:
    """A pass stopped (``reason``) before it reached ``effects`` (each with its latest attempt):
    their recovery never ran. Each in doubt (:func:`in_doubt`) is asked its verifier on ``page``
    (:func:`found_done`). Returns the ids of those found done, and, for the first left in doubt
    (no verifier, or it did not find it done), why a person must decide it: that attempt is
    journaled ``needs_review`` here, and the caller parks the run (never a retry: nothing can be
    clicked without the page the steps before it make). None: nothing is left in doubt."""
    done: list[str] = []
    for step, attempt in effects:
        if attempt is None or not in_doubt(attempt):
            continue
        if await found_done(scope, step, attempt, page, results):
            done.append(step.id)
            continue
        why = f"effect {step.id} is in doubt and the steps before it could not be run again ({reason})"
        await scope.journal.decide(attempt, "needs_review", {"reason": why})
        said = "it has no verifier" if step.verifier is None else "its verifier did not find it done"
        return done, f"{why}; {said}"
    return done, None


async def restore_gap_open(scope: RunScope, step: Effect) -> bool:
    """Restored from a backup, this effect may have been dispatched after the backup was
    taken with no trace in the journal, until a verifier or a person decides it anew."""
    restored_at = scope.restored_at
    if restored_at is None or step.idempotent:  # an idempotent replay is safe anyway
        return False
    return not any(
        a.step_id == step.id
        and (a.finished_at or 0) >= restored_at
        and (a.decided_by == "verifier" or (a.decided_by or "").startswith("human:"))
        for a in await scope.journal.attempts()
    )


async def restore_gap(
    scope: RunScope, step: Effect, latest: AttemptRecord | None, page: Page, results: dict[str, Any], fp: str
) -> Any:
    """Treat the step as dispatched with an unknown outcome: verify (after the settle
    time, counted from the restore) or park for review; never replay blindly."""
    journal, restored_at = scope.journal, scope.restored_at
    assert restored_at is not None
    attempt = latest
    if attempt is None or attempt.state not in (AttemptState.INTENT, AttemptState.UNKNOWN):
        attempt = await journal.begin(step.id, "effect", fp)
    if attempt.state == AttemptState.INTENT:
        attempt = await journal.finish(
            attempt,
            AttemptState.UNKNOWN,
            decided_by="restore:unproven",
            evidence={
                "reason": "restored from a backup: it may have been dispatched after the backup was taken",
                "restored_at": restored_at,
            },
        )
        await scope.extensions.outcome(attempt)
    scope.attempt_log(attempt).info("restored run: reconciling the effect before any dispatch")
    if step.verifier is None:
        reason = "restored from a backup; it may have been dispatched after the backup and has no verifier"
        await journal.decide(attempt, "needs_review", {"reason": reason})
        raise Stop("review", f"effect {step.id}: {reason}")
    outbox = await journal.outbox(attempt)
    return await verify(scope, step, attempt, outbox, page, results, not_before=restored_at + step.settle)


def _stopped_at(scope: RunScope, attempt: AttemptRecord) -> float:
    """When the attempt's sender was known to have stopped dispatching."""
    if (
        attempt.lease_epoch == scope.journal.epoch
        and isinstance(attempt.evidence, dict)
        and attempt.evidence.get("stopped_at")
    ):
        return float(attempt.evidence["stopped_at"])
    return scope.run.owner_stopped_at or scope.clock()


def _name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or fn)


async def _ask(step: Effect, ctx: Any) -> Verdict:
    """The verifier's verdict; anything but a Verdict, or raising, is "unknown"."""
    assert step.verifier is not None
    try:
        verdict = await in_own_task(step.verifier(ctx))
    except LeaseLost:
        raise
    except Exception as exc:
        return Verdict.unknown(f"verifier raised {type(exc).__name__}: {exc}")
    if not isinstance(verdict, Verdict):
        return Verdict.unknown(f"verifier returned {verdict!r}, not a Verdict")
    return verdict


async def _verified_done(
    scope: RunScope, attempt: AttemptRecord, verdict: Verdict, evidence: dict[str, Any], rlog: Any
) -> Any:
    """The verifier found the effect done: SUCCEEDED with its result, a duplicate prevented."""
    done = await scope.journal.finish(
        attempt, AttemptState.SUCCEEDED, decided_by="verifier", result=jsonable(verdict.result), evidence=evidence
    )
    await scope.journal.decide(attempt, "duplicate_prevented", {"by": "verifier"})
    rlog.info("verifier: done, not replayed", state=str(done.state))
    await scope.extensions.outcome(done)
    return done.result


async def verify(
    scope: RunScope,
    step: Effect,
    attempt: AttemptRecord,
    outbox: list[OutboxRecord],
    page: Page,
    results: dict[str, Any],
    *,
    not_before: float | None = None,
) -> Any:
    """Ask the verifier (again after the settle time while it says "not done" too early) and act on it."""
    journal, ext, rlog = scope.journal, scope.extensions, scope.attempt_log(attempt)
    deadline = settle_deadline(outbox, _stopped_at(scope, attempt), step.settle)
    if not_before is not None:  # a not_done verdict counts only from then on
        deadline = max(deadline or 0.0, not_before)
    ctx = scope.step_context(page, step.id, attempt, attempt.request_fingerprint, results)
    # the page this pass prepared may send on pagehide; a verifier that leaves it must not send
    # the effect's unload send again (not done: the replay takes a new pass, a page armed anew)
    disarmed = await disarm_unload(page)
    asked = 0
    while True:
        asked += 1
        with Observed(page) as looked:
            verdict = await _ask(step, ctx)
        journal.check()
        evidence = {
            "verdict": verdict.kind,
            "reason": verdict.reason,
            "page_url": safe_url(page),
            "asked": asked,
            "verifier": _name(step.verifier),
            "checked": looked.checked,
        }
        if disarmed:
            evidence["unload_listeners_removed"] = disarmed
        if verdict.kind == "done":
            return await _verified_done(scope, attempt, verdict, evidence, rlog)
        if verdict.kind == "unknown":
            evidence["screenshot"] = await scope.screenshot(page, f"{step.id}-{attempt.attempt_no}")
            await journal.decide(attempt, "needs_review", evidence)
            raise Stop("review", f"effect {step.id}: verifier could not tell ({verdict.reason})")
        now = scope.clock()
        if deadline is not None and now < deadline:
            wait = deadline - now
            rlog.info("verifier: not done yet; waiting for the settle time", wait=round(wait, 1))
            await ext.notice(
                scope.run,
                step.id,
                f"verifier says not done, but the request may still be in "
                f"flight; asking again in {wait:.1f}s (settle {step.settle:g}s)",
            )
            await scope.sleep(wait)
            continue
        done = await journal.finish(
            attempt, AttemptState.NOT_DONE, decided_by="verifier", evidence=evidence, error=attempt.error
        )
        rlog.info("verifier: not done; replaying with the same key", state=str(done.state))
        await ext.outcome(done)
        raise Again(f"{step.id} verified not done: replay with the same key")
