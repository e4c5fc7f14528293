"""Running an effect step: skip what SUCCEEDED, recover what is in doubt, then one attempt
whose every dispatch passes the gate after its intent is journaled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from .. import _faults as faults
from ..errors import LeaseLost, StoreError
from ..flow import Effect, StepContext
from ..gate import ApprovalCheck, DispatchGate, disarm_unload
from ..journal import RunJournal
from ..states import AttemptState
from ..store.records import AttemptRecord, OutboxRecord
from ._passes import (
    REPLAY_NOW,
    Again,
    Pass,
    RunScope,
    Stop,
    backoff,
    in_own_task,
    jsonable,
    response_evidence,
    safe_url,
)
from ._recover import judge_of, recover, restore_gap, restore_gap_open
from ._recovery_rules import THROTTLED, classify_attempt, own_failures, throttled_attempts

__all__ = ["MAX_THROTTLED", "run_effect"]

MAX_THROTTLED = 5
"""Times an effect may be throttled (429/503 with a Retry-After) and go back to the queue;
the next one fails the run."""


async def run_effect(scope: RunScope, step: Effect, p: Pass, latest: AttemptRecord | None) -> Any:
    """Run ``step`` in pass ``p`` (``latest``: its latest attempt, read at its boundary); its result,
    or :class:`Again` / :class:`Stop`.

    The gate takes the context's route now, unarmed (it lets everything through), so that
    putting the route in (first effect only) overlaps the intent commit; it is armed with
    the attempt."""
    gate = DispatchGate(scope.journal, step, scope.extensions, shared_workers_allowed=scope.shared_workers_allowed)
    installing = gate.install(p.route)
    try:
        return await _effect(scope, step, p, gate, installing, latest)
    finally:
        await asyncio.gather(installing, return_exceptions=True)
        await gate.remove()


async def _effect(
    scope: RunScope,
    step: Effect,
    p: Pass,
    gate: DispatchGate,
    installing: asyncio.Future[object],
    latest: AttemptRecord | None,
) -> Any:
    assert p.page is not None
    fp = scope.flow.fingerprint(step, scope.inputs, p.results)
    if latest is not None and latest.state == AttemptState.SUCCEEDED:
        await _disarm(scope, step, p)
        await scope.extensions.step_skipped(scope.run, latest)
        return latest.result
    if await restore_gap_open(scope, step):
        p.gap_closed()  # the verifier's turn
        return await restore_gap(scope, step, latest, p.page, p.results, fp)
    if latest is not None:
        if latest.state in (AttemptState.INTENT, AttemptState.UNKNOWN):
            p.gap_closed()  # the verifier's turn
            recovered = await recover(scope, step, latest, p.page, p.results)
            if recovered is not REPLAY_NOW:
                return recovered
        await _check_budget(scope, step)
        await _check_fingerprint(scope, step, fp)
        if latest.state == AttemptState.UNKNOWN and latest.error:  # back off before an idempotent replay
            await asyncio.sleep(backoff(own_failures(await scope.journal.attempts(), step.id, scope.budget_since)))
    return await _attempt(scope, step, p, fp, gate, installing)


async def _disarm(scope: RunScope, step: Effect, p: Pass) -> None:
    """The effect is done: the page this pass prepared for it must not send its unload send
    again when a later step leaves it (see :mod:`browserworker.gate._unload`)."""
    assert p.page is not None
    removed = await disarm_unload(p.page)
    if removed:
        scope.log.info("unload listeners removed from a done effect's page", step_id=step.id, events=removed)


async def _check_budget(scope: RunScope, step: Effect) -> None:
    attempts = await scope.journal.attempts()
    failures = own_failures(attempts, step.id, scope.budget_since)
    if failures > step.retries:
        last = next(a for a in reversed(attempts) if a.step_id == step.id)
        if last.state == AttemptState.UNKNOWN:  # it may have landed: a person decides, not "failed"
            raise Stop(
                "review",
                f"effect {step.id} kept failing after dispatch ({last.error}); "
                "out of retries with its outcome unproven",
            )
        raise Stop("failed", f"effect {step.id} failed ({last.state}, {last.decided_by}): {last.error}")


async def _check_fingerprint(scope: RunScope, step: Effect, fp: str) -> None:
    """A replay whose fingerprint differs from a dispatched intent is never dispatched."""
    for prior in await scope.journal.attempts():
        if prior.step_id == step.id and prior.dispatched_at is not None and prior.request_fingerprint != fp:
            attempt = await scope.journal.begin(step.id, "effect", fp)
            done = await scope.journal.finish(
                attempt,
                AttemptState.UNKNOWN,
                decided_by="fingerprint_mismatch",
                evidence={"journaled": prior.request_fingerprint, "now": fp, "journaled_attempt": prior.attempt_no},
            )
            await scope.extensions.outcome(done)
            raise Stop(
                "review",
                f"effect {step.id}: what it would send now differs from what attempt "
                f"{prior.attempt_no} dispatched (fingerprint changed); not replayed",
            )


async def _attempt(
    scope: RunScope, step: Effect, p: Pass, fp: str, gate: DispatchGate, installing: asyncio.Future[object]
) -> Any:
    """One attempt: intent, the step function behind the armed gate, the outcome."""
    journal, ext = scope.journal, scope.extensions
    assert p.page is not None
    await ext.step_started(scope.run, step.id, "effect")
    faults.hit("before_intent_commit", step.id)
    attempt = await journal.begin(step.id, "effect", fp)
    await ext.intent_committed(attempt)
    ctx = scope.step_context(p.page, step.id, attempt, fp, p.results)
    faults.hit("after_intent_commit", step.id)
    await ext.before_step(ctx, step, p.context)
    check = gate.approval = await ApprovalCheck.of(
        scope, step, p.page, gate, hold=scope.approvals.hold, ttl=scope.approvals.ttl
    )
    gate.arm(attempt)
    p.gap_closed()
    await installing  # the route is in place before the effect runs
    raised, value = None, None  # type: tuple[BaseException | None, Any]
    try:
        value = await (in_own_task(step.fn(ctx)) if check is None else _until_parked(step.fn(ctx), check))
    except LeaseLost:
        raise
    except Exception as exc:
        raised = exc
    finally:
        await gate.remove()
        p.gap_opened(step)
        if check is not None:
            await check.close()
    journal.check()
    _refused(journal, step, gate)
    faults.hit("before_outcome_commit", step.id)
    if check is not None and check.parked is not None and not gate.dispatched:
        await _not_approved(scope, step, attempt, check)
    finished = await _outcome(scope, step, p, ctx, attempt, gate, raised, value)
    if finished.state == AttemptState.SUCCEEDED:
        return finished.result
    if finished.state == AttemptState.UNKNOWN:
        await p.route.shut()  # its pages' renderers stopped: none sends as it is unloaded (see ContextRoute.shut)
        await p.context.close()  # end whatever is still in flight in this context
        raise Again(f"{step.id} dispatched but its outcome is unknown: reconciling")
    attempts = await journal.attempts()
    if finished.decided_by == THROTTLED:
        if throttled_attempts(attempts, step.id) > MAX_THROTTLED:
            raise Stop("failed", f"effect {step.id} was throttled {MAX_THROTTLED + 1} times, last: {finished.error}")
        raise Stop(
            "throttled",
            f"effect {step.id} throttled: {finished.error}; back to the queue until the pause of its limit key ends",
        )
    failures = own_failures(attempts, step.id, scope.budget_since)
    if failures > step.retries:
        raise Stop("failed", f"effect {step.id} {finished.state} ({finished.decided_by}): {finished.error}")
    raise Again(f"retrying {step.id} ({finished.state})", backoff(failures))


async def _until_parked(step: Any, check: ApprovalCheck) -> Any:
    """Await the step function, but stop it once the gate refused its request for want of
    approval (it would only wait for an answer that never comes)."""
    task = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(check.stopped.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    check.abandoned = True  # it gave up waiting (a timeout of its own): a held request is parked, not sent
    return task.result()


async def _not_approved(scope: RunScope, step: Effect, attempt: AttemptRecord, check: ApprovalCheck) -> None:
    """The attempt's request was not sent: it waits for a person (the run is parked), or a
    person rejected it, or its approval expired (the run fails, whatever ``retries=`` says)."""
    assert check.parked is not None
    kind, approval = check.parked.kind, check.parked.approval
    evidence = {
        "approval": approval.id,
        "fingerprint": approval.fingerprint,
        "screenshot": approval.screenshot,
        "request": approval.summary,
    }
    error = None if kind == "pending" else (approval.reason or kind)
    done = await scope.journal.finish(
        attempt, AttemptState.FAILED_BEFORE_SEND, decided_by=f"approval_{kind}", evidence=evidence, error=error
    )
    await scope.extensions.outcome(done)
    if kind == "pending":
        scope.parked_approval = approval.id
        raise Stop("approval", f"effect {step.id} waits for approval {approval.id}: nothing was sent")
    who = f" by {approval.decided_by}" if kind == "rejected" and approval.decided_by else ""
    raise Stop(
        "failed",
        f"effect {step.id}: its approval was {kind}{who}"
        + (f" ({approval.reason})" if approval.reason and kind == "rejected" else "")
        + "; nothing was sent",
    )


def _refused(journal: RunJournal, step: Effect, gate: DispatchGate) -> None:
    """The gate could not commit a dispatch: nothing left; the lease or the store is gone."""
    if gate.refusal is None or gate.dispatched:
        return
    if isinstance(gate.refusal, LeaseLost):
        journal.lease.mark_lost(gate.refusal)
        raise gate.refusal
    if isinstance(gate.refusal, StoreError):  # not the effect's failure: stop; recovery replays it
        raise StoreError(f"the dispatch of {step.id} could not be journaled, so it was not sent: {gate.refusal}")


async def _outcome(
    scope: RunScope,
    step: Effect,
    p: Pass,
    ctx: StepContext[Any],
    attempt: AttemptRecord,
    gate: DispatchGate,
    raised: BaseException | None,
    value: Any,
) -> AttemptRecord:
    """Classify the attempt from what it returned or raised and what the gate saw; journal it."""
    assert p.page is not None
    outbox = gate.outbox.rows
    verdict = classify_attempt(
        raised=raised,
        returned=jsonable(value),
        dispatched=gate.dispatched,
        outbox=outbox,
        judge=judge_of(step),
        confirm=step.judge if step.confirm is not None else None,
    )
    error = None if raised is None else f"{type(raised).__name__}: {raised}"
    if verdict.decided_by == THROTTLED or (error is None and verdict.state == AttemptState.FAILED):
        # a FAILED attempt always has its error, so that it counts against ``retries=``
        # (``confirm`` rejecting the answer to an effect that returned is such a failure)
        error = verdict.reason
    evidence = _gate_evidence(scope, step, ctx, gate, outbox)
    if verdict.state == AttemptState.UNKNOWN:
        # this attempt dispatches nothing more from now on; reconcile in a new pass
        evidence["stopped_at"] = scope.clock()
        evidence["page_url"] = safe_url(p.page)
        evidence["screenshot"] = await scope.screenshot(p.page, f"{step.id}-{attempt.attempt_no}-after-error")
    succeeded = verdict.state == AttemptState.SUCCEEDED
    finished = await scope.journal.finish(
        attempt,
        verdict.state,
        decided_by=verdict.decided_by,
        result=verdict.result if succeeded else None,
        evidence=evidence or None,
        error=None if succeeded else error,
        dispatched=gate.dispatched,
    )
    await scope.extensions.outcome(finished)
    await scope.extensions.after_step(ctx, step, p.context, finished)
    return finished


def _gate_evidence(
    scope: RunScope, step: Effect, ctx: StepContext[Any], gate: DispatchGate, outbox: list[OutboxRecord]
) -> dict[str, Any]:
    evidence: dict[str, Any] = {"responses": [response_evidence(o) for o in outbox]} if outbox else {}
    if gate.blocked:
        evidence["blocked"] = gate.blocked
    if gate.detector.detected:
        evidence["detected"] = gate.detector.detected
    if gate.detector.unjournaled:
        evidence["unjournaled"] = gate.detector.unjournaled
    dispatches = gate.outbox.dispatches
    if len(dispatches) > 1:
        evidence["dispatches"] = len(dispatches)
        _several(scope, step, ctx, dispatches)
    return evidence


def _several(scope: RunScope, step: Effect, ctx: StepContext[Any], dispatches: Sequence[OutboxRecord]) -> None:
    """One attempt dispatched several requests (autosave, live preview, analytics): all are
    this effect's as far as the journal knows; say so, naming them."""
    sent = [f"{row.method} {row.url}" for row in dispatches]
    ctx.log.warning("one effect attempt dispatched several requests", requests=sent)
    scope.extensions.later.notice(
        scope.run,
        step.id,
        f"effect {step.id} dispatched {len(sent)} requests in one "
        f"attempt: {', '.join(sent)}; if only one of them is the effect, narrow what counts with "
        f'dispatch= (e.g. dispatch="POST */orders*")',
        requests=sent,
    )
