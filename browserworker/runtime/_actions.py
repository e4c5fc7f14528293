"""Running an action step: journaled as RUNNING, re-run on every pass, guarded against sending
what only an effect may (see :mod:`browserworker.gate._guard`)."""

from __future__ import annotations

from typing import Any

from ..errors import LeaseLost
from ..flow import Action, StepContext
from ..gate import ActionGuard
from ..states import AttemptState
from ..store.records import AttemptRecord
from ._passes import Again, Pass, RunScope, Stop, backoff, in_own_task, jsonable
from ._recovery_rules import own_failures

__all__ = ["run_action"]


async def run_action(scope: RunScope, step: Action, p: Pass) -> Any:
    """Run ``step`` once in pass ``p``; its value, or :class:`Again` / :class:`Stop`."""
    assert p.page is not None
    journal, ext = scope.journal, scope.extensions
    fp = scope.flow.fingerprint(step, scope.inputs, p.results)
    await ext.step_started(scope.run, step.id, "action")
    attempt = await journal.begin(step.id, "action", fp)
    ctx = scope.step_context(p.page, step.id, attempt, fp, p.results)

    def report(method: str, url: str) -> None:
        ctx.log.warning("undeclared side effect: an action sent a non-GET request", method=method, url=url)
        ext.later.notice(
            scope.run,
            step.id,
            f"undeclared side effect: {method} {url} (declare it with "
            "@flow.effect, or @flow.step(sends=True) if it is safe to repeat)",
        )

    guard = ActionGuard(step, mode=scope.flow.undeclared_effects, report=report)
    await ext.before_step(ctx, step, p.context)
    await guard.install(p.route)
    p.gap_closed()
    try:
        value = await in_own_task(step.fn(ctx))
    except LeaseLost:
        raise
    except Exception as exc:
        await _failed(scope, step, p, ctx, attempt, guard, exc)
    finally:
        guard.remove()
        p.gap_opened(step)
    if guard.seen and scope.flow.undeclared_effects == "fail":
        await _undeclared(scope, step, p, ctx, attempt, guard)
    finished = await journal.finish(
        attempt,
        AttemptState.SUCCEEDED,
        decided_by="return",
        result=jsonable(value),
        evidence={"undeclared_requests": guard.seen} if guard.seen else None,
    )
    await ext.outcome(finished)
    await ext.after_step(ctx, step, p.context, finished)
    return value


async def _failed(
    scope: RunScope,
    step: Action,
    p: Pass,
    ctx: StepContext[Any],
    attempt: AttemptRecord,
    guard: ActionGuard,
    exc: Exception,
) -> None:
    """The action raised: journal it FAILED, then retry in a new pass or fail the run."""
    scope.journal.check()
    if guard.seen and scope.flow.undeclared_effects == "fail":  # e.g. a refused page.request call
        guard.remove()
        await _undeclared(scope, step, p, ctx, attempt, guard)
    finished = await scope.journal.finish(
        attempt, AttemptState.FAILED, decided_by="exception", error=f"{type(exc).__name__}: {exc}"
    )
    await scope.extensions.outcome(finished)
    guard.remove()
    await scope.extensions.after_step(ctx, step, p.context, finished)
    failures = own_failures(await scope.journal.attempts(), step.id, scope.budget_since)
    if failures > step.retries:
        raise Stop("failed", f"step {step.id} failed: {type(exc).__name__}: {exc}") from None
    raise Again(f"retrying {step.id} after {type(exc).__name__}", backoff(failures)) from None


async def _undeclared(
    scope: RunScope, step: Action, p: Pass, ctx: StepContext[Any], attempt: AttemptRecord, guard: ActionGuard
) -> None:
    """Fail mode: the action tried undeclared side effects: the run fails. Refused ones were
    not sent; what the browser let out without asking the route may have been."""
    leaked = guard.unrefused()
    evidence: dict[str, Any] = {"requests": guard.seen}
    if leaked:
        evidence["not_refused"] = leaked
    finished = await scope.journal.finish(
        attempt, AttemptState.FAILED, decided_by="undeclared_effect", evidence=evidence
    )
    await scope.extensions.after_step(ctx, step, p.context, finished)
    refused = [item for item in guard.seen if item not in leaked]
    said = []
    if refused:
        said.append(f"refused, not sent: {', '.join(refused)}")
    if leaked:
        said.append(f"let out by the browser without asking the route, so possibly sent: {', '.join(leaked)}")
    raise Stop("failed", f"action {step.id} tried to send what only an effect may ({'; '.join(said)})")
