"""Runs one run's steps in order, journaling every effect before it is dispatched.

One *pass* is a fresh browser context walking the steps from the top: actions are re-run,
SUCCEEDED effects are skipped (their journaled results handed on), and an effect whose
latest attempt is INTENT or UNKNOWN is recovered first (docs/guarantees.md, "Recovery"). A pass ends
with the run done, or asks for a new pass (a replay needs fresh page state), for review,
or for failure. The executor owns no lease logic beyond honouring it: every journal
write is fenced, and a lost lease closes the context and stops the run at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import structlog
from playwright.async_api import BrowserContext, Page
from pydantic import BaseModel

from . import faults
from .browser import BrowserSession
from .errors import LeaseLost, StoreError
from .flow import Action, Effect, Flow, RecordedResponse, Step, StepContext, Verdict
from .gate import DispatchGate
from .guard import ActionGuard
from .hooks import ExecutorHooks, HookBus, StepObserver
from .leases import Lease, LeaseSettings
from .recovery import classify_attempt, default_judge, own_failures, plan_recovery, settle_deadline
from .routes import ContextRoute
from .states import AttemptState, RunState
from .store.aio import AsyncStore
from .store.records import AttemptRecord, Owner, RunRecord

__all__ = ["Executor", "PassOutcome"]

log = structlog.get_logger("browserworker")

T = TypeVar("T")

MAX_BACKOFF = 10.0


@dataclass(frozen=True)
class PassOutcome:
    """How one pass over the steps ended."""

    kind: Literal["done", "again", "review", "failed", "cancelled", "released"]
    reason: str | None = None
    backoff: float = 0.0


# pass outcomes that end the run: (state, decision)
_ENDINGS: dict[str, tuple[RunState, str]] = {
    "review": (RunState.NEEDS_REVIEW, "needs_review"),
    "failed": (RunState.FAILED, "failed"),
    "cancelled": (RunState.CANCELLED, "cancelled"),
}


class _Again(Exception):
    def __init__(self, reason: str, backoff: float = 0.0) -> None:
        super().__init__(reason)
        self.backoff = backoff


class _Stop(Exception):
    def __init__(self, kind: Literal["review", "failed", "cancelled", "released"], reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def _backoff(failures: int) -> float:
    return min(MAX_BACKOFF, 0.5 * 2 ** max(0, failures - 1))


class Executor:
    """Executes one leased run to an end state (or until its lease is lost)."""

    def __init__(self, flow: Flow[Any], store: AsyncStore, browser: BrowserSession, run: RunRecord,
                 owner: Owner, lease: Lease, settings: LeaseSettings, *,
                 hooks: ExecutorHooks | None = None, observers: Sequence[StepObserver] = (),
                 evidence_dir: Path | None = None) -> None:
        self.flow = flow
        self.store = store
        self.browser = browser
        self.run = run
        self.owner = owner
        self.lease = lease
        self.settings = settings
        self.hooks: ExecutorHooks = hooks or HookBus()
        self.observers = list(observers)
        self.evidence_dir = evidence_dir
        self.stop_requested = False  # set by a stopping worker: release the run at the next step boundary
        self.epoch = run.lease_epoch
        self.inputs: BaseModel = flow.validate_inputs(run.inputs)
        self._context: BrowserContext | None = None
        self._route: ContextRoute | None = None  # the gate's route in this pass's context
        self._restored_at: float | None = None  # the run was restored from a backup (see _restore_gap)
        self._starting: asyncio.Future[Any] | None = None  # the RUNNING transition, in flight
        self._ending: asyncio.Future[RunRecord] | None = None  # the SUCCEEDED transition, in flight
        # True once the run's end is committed while its context may still be closing; then
        # ``on_settled`` is called (a worker starts its next run beside that close)
        self.settled = False
        self.on_settled: Callable[[], None] | None = None
        self.log = log.bind(run_id=run.id, flow=flow.name, worker_id=owner.worker, lease_epoch=self.epoch)

    # -- plumbing -------------------------------------------------------------------

    async def _db(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a store method on the store thread; a lost lease stops everything."""
        self.lease.check()
        try:
            return await self.store.call(getattr(self.store.store, method), *args, **kwargs)
        except LeaseLost as exc:
            self.lease.mark_lost(exc)
            raise

    async def _before(self, ctx: StepContext[Any], step: Any, context: BrowserContext) -> None:
        for observer in self.observers:
            await observer.before_step(ctx, step, context)

    async def _after(self, ctx: StepContext[Any], step: Any, context: BrowserContext,
                     attempt: AttemptRecord | None) -> None:
        for observer in self.observers:
            await observer.after_step(ctx, step, context, attempt)

    def on_lease_lost(self, exc: BaseException) -> None:
        """Shut and close the run's context at once: nothing more may leave for this run."""
        if self._context is not None and self._route is not None:
            asyncio.ensure_future(_shut_and_close(self._context, self._route))

    async def _new_page(self, context: BrowserContext) -> Page:
        """``context.new_page()``, but a lost lease ends the wait: Playwright's ``new_page`` never
        returns when the context is closed meanwhile (``on_lease_lost`` closes it)."""
        opening = asyncio.ensure_future(context.new_page())
        while True:
            done, _ = await asyncio.wait({opening}, timeout=0.25)
            if done:
                return opening.result()
            if self.lease.lost is not None:
                opening.cancel()
                self.lease.check()

    def _ctx(self, page: Page, step_id: str, attempt: AttemptRecord | None, fingerprint: str,
             results: Mapping[str, Any]) -> StepContext[Any]:
        key = f"{self.run.id}/{step_id}"
        attempt_no = attempt.attempt_no if attempt else 0
        return StepContext(page=page, inputs=self.inputs, run_id=self.run.id, step_id=step_id, attempt_no=attempt_no,
                           request_key=key, fingerprint=fingerprint, results=dict(results),
                           log=self.log.bind(step_id=step_id, attempt_no=attempt_no, request_key=key,
                                             fingerprint=fingerprint, state=str(attempt.state) if attempt else None))

    # -- the run --------------------------------------------------------------------

    async def execute(self) -> RunRecord:
        """Run to SUCCEEDED, FAILED or NEEDS_REVIEW; raises LeaseLost if the run is taken away."""
        # a run leased for the first time has no journal yet: one round trip fewer
        attempts, restored_at = ([], None) if self.run.fresh else await self._db("history", self.run.id)
        missing = sorted({a.step_id for a in attempts} - {s.id for s in self.flow.steps})
        if missing:
            return await self._finish(RunState.NEEDS_REVIEW,
                                      f"journaled steps no longer in the flow: {', '.join(missing)}", "flow_changed")
        self._restored_at = restored_at
        if self.run.state != RunState.RUNNING:
            # committed while the first browser context opens; awaited before the first step
            self._starting = asyncio.ensure_future(self._db("advance_run", self.run.id, self.epoch,
                                                            RunState.RUNNING, worker=self.owner.worker,
                                                            decision="started"))
        self.hooks.run_started(self.run)
        try:
            while True:
                outcome = await self._pass()
                if outcome.kind == "done":
                    ending, self._ending = self._ending, None
                    assert ending is not None
                    final = await ending
                    break
                if outcome.kind in _ENDINGS:
                    state, decision = _ENDINGS[outcome.kind]
                    final = await self._finish(state, outcome.reason, decision)
                    break
                if outcome.kind == "released":
                    await self._db("release_run", self.run.id, self.epoch, worker=self.owner.worker)
                    self.log.info("run released at a step boundary")
                    return await self._db("get_run", self.run.id)
                self.log.info("starting a new pass", reason=outcome.reason, backoff=outcome.backoff)
                if outcome.backoff:
                    await asyncio.sleep(outcome.backoff)
        finally:
            # never left behind; a failure of either is a lost lease, raised already
            left = [f for f in (self._starting, self._ending) if f is not None]
            self._starting = self._ending = None
            if left:
                await asyncio.gather(*left, return_exceptions=True)
        self.hooks.run_finished(final)
        return final

    def _settle(self, ending: asyncio.Future[RunRecord]) -> None:
        """The SUCCEEDED transition is committed: nothing of this run is left but closing its
        context (its route is sealed by then)."""
        if ending.cancelled() or ending.exception() is not None:
            return  # raised where it is awaited
        self.settled = True
        if self.on_settled is not None:
            self.on_settled()

    async def _started(self) -> None:
        """Wait for the RUNNING transition (its failure, e.g. a lost lease, surfaces here)."""
        starting, self._starting = self._starting, None
        if starting is not None:
            await starting

    async def _finish(self, state: RunState, error: str | None, decision: str) -> RunRecord:
        await self._started()
        return await self._db("set_run_state", self.run.id, self.epoch, state, worker=self.owner.worker, error=error,
                              decision=decision)

    async def _pass(self) -> PassOutcome:
        results: dict[str, Any] = {}
        completed = False
        async with self.browser.context() as context:
            self._context, self._route = context, ContextRoute(context)
            try:
                steps = self.flow.steps
                if steps and isinstance(steps[0], Effect):  # nothing to intercept yet: route now
                    self._route.install()
                sockets = self._route.route_sockets()  # before any page can open a socket
                page = await self._new_page(context)
                await self._started()
                await sockets
                for step in steps:
                    latest = await self._boundary(step)
                    if isinstance(step, Effect):
                        results[step.id] = await self._effect(step, context, page, results, latest)
                    else:
                        assert isinstance(step, Action)
                        results[step.id] = await self._action(step, context, page, results)
                # Every step succeeded: nothing more leaves this context, so the run's end is
                # committed while the context closes, not after.
                self._ending = asyncio.ensure_future(self._finish(RunState.SUCCEEDED, None, "all steps succeeded"))
                self._ending.add_done_callback(self._settle)
                completed = True
            except _Again as again:
                return PassOutcome("again", str(again), again.backoff)
            except _Stop as stop:
                return PassOutcome(stop.kind, str(stop))
            finally:
                route, self._context, self._route = self._route, None, None
                if route is not None:  # before the context closes (see ContextRoute.shut); the pages
                    # are left unless every step succeeded: a replay may follow, nothing may leave late
                    await route.shut(leave_pages=not completed)
        return PassOutcome("done")

    async def _boundary(self, step: Step) -> AttemptRecord | None:
        """Between steps (never between an effect's intent and its outcome): honour a lost
        lease, a cancel request, or a stopping worker. Before an effect, the same store call
        reads the step's latest attempt, which is returned."""
        self.lease.check()
        if self.stop_requested:
            raise _Stop("released", "the worker is stopping")
        latest = None
        if isinstance(step, Effect):
            cancelled, latest = await self._db("effect_boundary", self.run.id, step.id)
        else:
            cancelled = await self._db("cancel_requested", self.run.id)
        if cancelled:
            raise _Stop("cancelled", "cancelled on request")
        return latest

    async def _screenshot(self, page: Page, name: str) -> str | None:
        """Keep what the page showed when a step was parked for review."""
        if self.evidence_dir is None:
            return None
        path = self.evidence_dir / self.run.id.replace(":", "_") / f"{name}.png"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(path), full_page=True, timeout=5000)
        except Exception:  # evidence is best effort: the page may be gone
            return None
        return str(path)

    # -- actions ----------------------------------------------------------------------

    async def _action(self, step: Action, context: BrowserContext, page: Page, results: dict[str, Any]) -> Any:
        fp = self.flow.fingerprint(step, self.inputs, results)
        self.hooks.step_started(self.run, step.id, "action")
        attempt = await self._db("begin_attempt", self.run.id, self.epoch, step.id, "action",
                                 f"{self.run.id}/{step.id}", fp, worker=self.owner.worker)
        ctx = self._ctx(page, step.id, attempt, fp, results)

        def report(method: str, url: str) -> None:
            ctx.log.warning("undeclared side effect: an action sent a non-GET request", method=method, url=url)
            self.hooks.notice(self.run, step.id, f"undeclared side effect: {method} {url} (declare it with "
                              "@flow.effect, or @flow.step(sends=True) if it is safe to repeat)")

        guard = ActionGuard(step, mode=self.flow.undeclared_effects, report=report)
        await self._before(ctx, step, context)
        assert self._route is not None
        await guard.install(self._route)
        try:
            value = await _in_own_task(step.fn(ctx))
        except LeaseLost:
            raise
        except Exception as exc:
            self.lease.check()
            if guard.seen and self.flow.undeclared_effects == "fail":  # e.g. a refused page.request call
                guard.remove()
                await self._undeclared(step, ctx, context, attempt, guard)
            finished = await self._db("finish_attempt", attempt, self.epoch, AttemptState.FAILED,
                                      decided_by="exception", error=f"{type(exc).__name__}: {exc}",
                                      worker=self.owner.worker)
            ctx.log.warning("action failed", state=str(finished.state), error=finished.error)
            self.hooks.outcome(finished)
            guard.remove()
            await self._after(ctx, step, context, finished)
            failures = own_failures(await self._db("attempts", self.run.id), step.id)
            if failures > step.retries:
                raise _Stop("failed", f"step {step.id} failed: {type(exc).__name__}: {exc}") from None
            raise _Again(f"retrying {step.id} after {type(exc).__name__}", _backoff(failures)) from None
        finally:
            guard.remove()
        if guard.seen and self.flow.undeclared_effects == "fail":
            await self._undeclared(step, ctx, context, attempt, guard)
        finished = await self._db("finish_attempt", attempt, self.epoch, AttemptState.SUCCEEDED, decided_by="return",
                                  result=_jsonable(value),
                                  evidence={"undeclared_requests": guard.seen} if guard.seen else None,
                                  worker=self.owner.worker)
        ctx.log.info("action finished", state=str(finished.state))
        self.hooks.outcome(finished)
        await self._after(ctx, step, context, finished)
        return value

    async def _undeclared(self, step: Action, ctx: StepContext[Any], context: BrowserContext,
                          attempt: AttemptRecord, guard: ActionGuard) -> None:
        """Fail mode: the action tried undeclared side effects (refused, none sent): the run fails."""
        finished = await self._db("finish_attempt", attempt, self.epoch, AttemptState.FAILED,
                                  decided_by="undeclared_effect", evidence={"requests": guard.seen},
                                  worker=self.owner.worker)
        await self._after(ctx, step, context, finished)
        raise _Stop("failed", f"action {step.id} tried to send what only an effect may (refused, not sent): "
                              f"{', '.join(guard.seen)}")

    # -- effects ------------------------------------------------------------------------

    def _judge(self, step: Effect) -> Any:
        def judge(response: RecordedResponse) -> Verdict | None:
            return step.judge(response) if step.confirm is not None else default_judge(response)

        return judge

    async def _effect(self, step: Effect, context: BrowserContext, page: Page, results: dict[str, Any],
                      latest: AttemptRecord | None) -> Any:
        # The gate takes the context's route now, unarmed (it lets everything through), so that
        # putting the route in (first effect only) overlaps the intent commit; it is armed with
        # the attempt. (The step's latest attempt was read at its boundary.)
        gate = DispatchGate(self.store, None, step, epoch=self.epoch, margin=self.settings.margin,
                            hooks=self.hooks, is_alive=lambda: self.lease.lost is None,
                            holds_lease=lambda: self.lease.holds(self.settings.margin / 2),
                            shared_workers_allowed=self.browser.settings.shared_workers == "allow")
        assert self._route is not None
        installing = gate.install(self._route)
        try:
            return await self._effect_steps(step, context, page, results, gate, installing, latest)
        finally:
            await asyncio.gather(installing, return_exceptions=True)
            await gate.remove()

    async def _effect_steps(self, step: Effect, context: BrowserContext, page: Page, results: dict[str, Any],
                            gate: DispatchGate, installing: asyncio.Future[object],
                            latest: AttemptRecord | None) -> Any:
        """``latest``: the step's latest attempt, read at its boundary."""
        fp = self.flow.fingerprint(step, self.inputs, results)
        if latest is not None:
            if latest.state == AttemptState.SUCCEEDED:
                self.hooks.step_skipped(self.run, latest)
                return latest.result
        if await self._restore_gap_open(step):
            return await self._restore_gap(step, latest, page, results, fp)
        if latest is not None:
            if latest.state in (AttemptState.INTENT, AttemptState.UNKNOWN):
                recovered = await self._recover(step, latest, page, results, fp)
                if recovered is not _REPLAY_NOW:
                    return recovered
            await self._check_budget(step)
            await self._check_fingerprint(step, fp)
            if latest.state == AttemptState.UNKNOWN and latest.error:  # back off before an idempotent replay
                await asyncio.sleep(_backoff(own_failures(await self._db("attempts", self.run.id), step.id)))
        return await self._attempt(step, context, page, results, fp, gate, installing)

    async def _restore_gap_open(self, step: Effect) -> bool:
        """Restored from a backup, this effect may have been dispatched after the backup was
        taken with no trace in the journal, until a verifier or a person decides it anew."""
        if self._restored_at is None or step.idempotent:  # an idempotent replay is safe anyway
            return False
        return not any(a.step_id == step.id and (a.finished_at or 0) >= self._restored_at
                       and (a.decided_by == "verifier" or (a.decided_by or "").startswith("human:"))
                       for a in await self._db("attempts", self.run.id))

    async def _restore_gap(self, step: Effect, latest: AttemptRecord | None, page: Page, results: dict[str, Any],
                           fp: str) -> Any:
        """Treat the step as dispatched with an unknown outcome: verify (after the settle
        time, counted from the restore) or park for review; never replay blindly."""
        assert self._restored_at is not None
        attempt = latest
        if attempt is None or attempt.state not in (AttemptState.INTENT, AttemptState.UNKNOWN):
            attempt = await self._db("begin_attempt", self.run.id, self.epoch, step.id, "effect",
                                     f"{self.run.id}/{step.id}", fp, worker=self.owner.worker,
                                     margin=self.settings.margin)
        if attempt.state == AttemptState.INTENT:
            attempt = await self._db("finish_attempt", attempt, self.epoch, AttemptState.UNKNOWN,
                                     decided_by="restore:unproven", worker=self.owner.worker,
                                     evidence={"reason": "restored from a backup: it may have been dispatched after "
                                                         "the backup was taken", "restored_at": self._restored_at})
            self.hooks.outcome(attempt)
        rlog = self.log.bind(step_id=step.id, attempt_no=attempt.attempt_no, request_key=attempt.request_key,
                             fingerprint=attempt.request_fingerprint, state=str(attempt.state))
        rlog.info("restored run: reconciling the effect before any dispatch")
        if step.verifier is None:
            reason = "restored from a backup; it may have been dispatched after the backup and has no verifier"
            await self._db("record_event", self.run.id, "decision", step_id=step.id, attempt_no=attempt.attempt_no,
                           worker=self.owner.worker, epoch=self.epoch, decision="needs_review",
                           detail={"reason": reason})
            raise _Stop("review", f"effect {step.id}: {reason}")
        outbox = await self._db("outbox", attempt.id)
        return await self._verify(step, attempt, outbox, page, results, rlog,
                                  not_before=self._restored_at + step.settle)

    async def _check_budget(self, step: Effect) -> None:
        attempts = await self._db("attempts", self.run.id)
        failures = own_failures(attempts, step.id)
        if failures > step.retries:
            last = next(a for a in reversed(attempts) if a.step_id == step.id)
            if last.state == AttemptState.UNKNOWN:  # it may have landed: a person decides, not "failed"
                raise _Stop("review", f"effect {step.id} kept failing after dispatch ({last.error}); "
                                      "out of retries with its outcome unproven")
            raise _Stop("failed", f"effect {step.id} failed ({last.state}, {last.decided_by}): {last.error}")

    async def _check_fingerprint(self, step: Effect, fp: str) -> None:
        """A replay whose fingerprint differs from a dispatched intent is never dispatched."""
        attempts = await self._db("attempts", self.run.id)
        for prior in attempts:
            if prior.step_id == step.id and prior.dispatched_at is not None and prior.request_fingerprint != fp:
                attempt = await self._db("begin_attempt", self.run.id, self.epoch, step.id, "effect",
                                         f"{self.run.id}/{step.id}", fp, worker=self.owner.worker,
                                         margin=self.settings.margin)
                done = await self._db("finish_attempt", attempt, self.epoch, AttemptState.UNKNOWN,
                                      decided_by="fingerprint_mismatch",
                                      evidence={"journaled": prior.request_fingerprint, "now": fp,
                                                "journaled_attempt": prior.attempt_no},
                                      worker=self.owner.worker)
                self.hooks.outcome(done)
                raise _Stop("review", f"effect {step.id}: what it would send now differs from what attempt "
                                      f"{prior.attempt_no} dispatched (fingerprint changed); not replayed")

    async def _attempt(self, step: Effect, context: BrowserContext, page: Page, results: dict[str, Any],
                       fp: str, gate: DispatchGate, installing: asyncio.Future[object]) -> Any:
        self.hooks.step_started(self.run, step.id, "effect")
        faults.hit("before_intent_commit", step.id)
        attempt: AttemptRecord = await self._db("begin_attempt", self.run.id, self.epoch, step.id, "effect",
                                                f"{self.run.id}/{step.id}", fp, worker=self.owner.worker,
                                                margin=self.settings.margin)
        self.hooks.intent_committed(attempt)
        ctx = self._ctx(page, step.id, attempt, fp, results)
        ctx.log.info("intent committed", state=str(attempt.state))
        faults.hit("after_intent_commit", step.id)
        await self._before(ctx, step, context)
        gate.arm(attempt)
        await installing  # the route is in place before the effect runs
        raised: BaseException | None = None
        value: Any = None
        try:
            value = await _in_own_task(step.fn(ctx))
        except LeaseLost:
            raise
        except Exception as exc:
            raised = exc
        finally:
            await gate.remove()
        self.lease.check()
        if gate.refusal is not None and not gate.dispatched:
            # the gate could not commit a dispatch: nothing left; the lease or the store is gone
            if isinstance(gate.refusal, LeaseLost):
                self.lease.mark_lost(gate.refusal)
                raise gate.refusal
            if isinstance(gate.refusal, StoreError):  # not the effect's failure: stop; recovery replays it
                raise StoreError(f"the dispatch of {step.id} could not be journaled, so it was not sent: "
                                 f"{gate.refusal}")
        faults.hit("before_outcome_commit", step.id)
        outbox = gate.outbox
        verdict = classify_attempt(raised=raised, returned=_jsonable(value), dispatched=gate.dispatched,
                                   outbox=outbox, judge=self._judge(step),
                                   confirm=step.judge if step.confirm is not None else None)
        error = None if raised is None else f"{type(raised).__name__}: {raised}"
        evidence: dict[str, Any] = {"responses": [_response_evidence(o) for o in outbox]} if outbox else {}
        if gate.blocked:
            evidence["blocked"] = gate.blocked
        if gate.detected:
            evidence["detected"] = gate.detected
        if gate.unjournaled:
            evidence["unjournaled"] = gate.unjournaled
        dispatches = gate.dispatches
        if len(dispatches) > 1:
            evidence["dispatches"] = len(dispatches)
            self._several(ctx, step, dispatches)
        if verdict.state == AttemptState.UNKNOWN:
            # this attempt dispatches nothing more from now on; reconcile in a new pass
            evidence["stopped_at"] = time.time()
            evidence["page_url"] = _safe_url(page)
            evidence["screenshot"] = await self._screenshot(page, f"{step.id}-{attempt.attempt_no}-after-error")
        finished = await self._db("finish_attempt", attempt, self.epoch, verdict.state, decided_by=verdict.decided_by,
                                  result=verdict.result if verdict.state == AttemptState.SUCCEEDED else None,
                                  evidence=evidence or None, error=error if verdict.state != AttemptState.SUCCEEDED
                                  else None, worker=self.owner.worker, dispatched=gate.dispatched)
        ctx.log.info("effect finished", state=str(finished.state), decided_by=finished.decided_by)
        self.hooks.outcome(finished)
        await self._after(ctx, step, context, finished)
        if finished.state == AttemptState.SUCCEEDED:
            return finished.result
        if finished.state == AttemptState.UNKNOWN:
            await context.close()  # end whatever is still in flight in this context
            raise _Again(f"{step.id} dispatched but its outcome is unknown: reconciling")
        failures = own_failures(await self._db("attempts", self.run.id), step.id)
        if failures > step.retries:
            raise _Stop("failed", f"effect {step.id} {finished.state} ({finished.decided_by}): {error}")
        raise _Again(f"retrying {step.id} ({finished.state})", _backoff(failures))

    def _several(self, ctx: StepContext[Any], step: Effect, dispatches: Sequence[Any]) -> None:
        """One attempt dispatched several requests (autosave, live preview, analytics): all are
        this effect's as far as the journal knows; say so, naming them."""
        sent = [f"{row.method} {row.url}" for row in dispatches]
        ctx.log.warning("one effect attempt dispatched several requests", requests=sent)
        self.hooks.notice(self.run, step.id, f"effect {step.id} dispatched {len(sent)} requests in one attempt: "
                          f"{', '.join(sent)}; if only one of them is the effect, narrow what counts with "
                          f"dispatch= (e.g. dispatch=\"POST */orders*\")", requests=sent)

    # -- recovery -----------------------------------------------------------------------

    async def _recover(self, step: Effect, attempt: AttemptRecord, page: Page, results: dict[str, Any],
                       fp: str) -> Any:
        """Recover an effect whose latest attempt is INTENT or UNKNOWN (docs/guarantees.md, "Recovery")."""
        outbox = await self._db("outbox", attempt.id)
        plan = plan_recovery(attempt, outbox, judge=self._judge(step), has_verifier=step.verifier is not None,
                             idempotent=step.idempotent)
        rlog = self.log.bind(step_id=step.id, attempt_no=attempt.attempt_no, request_key=attempt.request_key,
                             fingerprint=attempt.request_fingerprint, state=str(attempt.state))
        rlog.info("recovering effect", plan=plan.action)
        self.hooks.notice(self.run, step.id, f"recovering attempt {attempt.attempt_no} ({attempt.state}): "
                          f"{plan.action} ({plan.decided_by})")
        if plan.action == "replay":  # INTENT with no dispatch: nothing left, replay with the same key
            done = await self._db("finish_attempt", attempt, self.epoch, AttemptState.FAILED_BEFORE_SEND,
                                  decided_by="recovery:no_dispatch", evidence={"reason": plan.reason},
                                  worker=self.owner.worker)
            self.hooks.outcome(done)
            return _REPLAY_NOW
        if attempt.state == AttemptState.INTENT:
            attempt = await self._db("finish_attempt", attempt, self.epoch, AttemptState.UNKNOWN,
                                     decided_by="recovery:dispatched",
                                     evidence={"reason": "the owner stopped after dispatch, before an outcome",
                                               "responses": [_response_evidence(o) for o in outbox]},
                                     worker=self.owner.worker)
            self.hooks.outcome(attempt)
        faults.hit("reclaimer_startup", step.id)
        if plan.action == "succeeded":
            done = await self._db("finish_attempt", attempt, self.epoch, AttemptState.SUCCEEDED, decided_by="outbox",
                                  result=plan.result, evidence={"reason": plan.reason,
                                                                "responses": [_response_evidence(o) for o in outbox]},
                                  worker=self.owner.worker)
            self.hooks.outcome(done)
            return done.result
        if plan.action == "failed":
            done = await self._db("finish_attempt", attempt, self.epoch, AttemptState.FAILED, decided_by="outbox",
                                  evidence={"reason": plan.reason}, error=plan.reason, worker=self.owner.worker)
            self.hooks.outcome(done)
            raise _Stop("failed", f"effect {step.id} was refused downstream: {plan.reason}")
        if plan.action == "replay_idempotent":
            await self._db("record_event", self.run.id, "decision", step_id=step.id, attempt_no=attempt.attempt_no,
                           worker=self.owner.worker, epoch=self.epoch, decision="idempotent_replay",
                           detail={"reason": plan.reason})
            return _REPLAY_NOW
        if plan.action == "park":
            shot = await self._screenshot(page, f"{step.id}-{attempt.attempt_no}")
            await self._db("record_event", self.run.id, "decision", step_id=step.id, attempt_no=attempt.attempt_no,
                           worker=self.owner.worker, epoch=self.epoch, decision="needs_review",
                           detail={"reason": plan.reason, "page_url": _safe_url(page), "screenshot": shot})
            raise _Stop("review", f"effect {step.id}: {plan.reason}")
        return await self._verify(step, attempt, outbox, page, results, rlog)

    def _stopped_at(self, attempt: AttemptRecord) -> float:
        """When the attempt's sender was known to have stopped dispatching."""
        if attempt.lease_epoch == self.epoch and isinstance(attempt.evidence, dict) and attempt.evidence.get(
                "stopped_at"):
            return float(attempt.evidence["stopped_at"])
        return self.run.owner_stopped_at or time.time()

    async def _verify(self, step: Effect, attempt: AttemptRecord, outbox: list[Any], page: Page,
                      results: dict[str, Any], rlog: Any, *, not_before: float | None = None) -> Any:
        assert step.verifier is not None
        deadline = settle_deadline(outbox, self._stopped_at(attempt), step.settle)
        if not_before is not None:  # a not_done verdict counts only from then on
            deadline = max(deadline or 0.0, not_before)
        ctx = self._ctx(page, step.id, attempt, attempt.request_fingerprint, results)
        asked = 0
        while True:
            asked += 1
            try:
                verdict = await _in_own_task(step.verifier(ctx))
                if not isinstance(verdict, Verdict):
                    verdict = Verdict.unknown(f"verifier returned {verdict!r}, not a Verdict")
            except LeaseLost:
                raise
            except Exception as exc:
                verdict = Verdict.unknown(f"verifier raised {type(exc).__name__}: {exc}")
            self.lease.check()
            evidence = {"verdict": verdict.kind, "reason": verdict.reason, "page_url": _safe_url(page),
                        "asked": asked}
            if verdict.kind == "done":
                done = await self._db("finish_attempt", attempt, self.epoch, AttemptState.SUCCEEDED,
                                      decided_by="verifier", result=_jsonable(verdict.result), evidence=evidence,
                                      worker=self.owner.worker)
                await self._db("record_event", self.run.id, "decision", step_id=step.id, attempt_no=attempt.attempt_no,
                               worker=self.owner.worker, epoch=self.epoch, decision="duplicate_prevented",
                               detail={"by": "verifier"})
                rlog.info("verifier: done, not replayed", state=str(done.state))
                self.hooks.outcome(done)
                return done.result
            if verdict.kind == "unknown":
                evidence["screenshot"] = await self._screenshot(page, f"{step.id}-{attempt.attempt_no}")
                await self._db("record_event", self.run.id, "decision", step_id=step.id, attempt_no=attempt.attempt_no,
                               worker=self.owner.worker, epoch=self.epoch, decision="needs_review", detail=evidence)
                raise _Stop("review", f"effect {step.id}: verifier could not tell ({verdict.reason})")
            now = time.time()
            if deadline is not None and now < deadline:
                wait = deadline - now
                rlog.info("verifier: not done yet; waiting for the settle time", wait=round(wait, 1))
                self.hooks.notice(self.run, step.id, f"verifier says not done, but the request may still be in "
                                  f"flight; asking again in {wait:.1f}s (settle {step.settle:g}s)")
                await asyncio.sleep(wait)
                continue
            done = await self._db("finish_attempt", attempt, self.epoch, AttemptState.NOT_DONE,
                                  decided_by="verifier", evidence=evidence, error=attempt.error,
                                  worker=self.owner.worker)
            rlog.info("verifier: not done; replaying with the same key", state=str(done.state))
            self.hooks.outcome(done)
            raise _Again(f"{step.id} verified not done: replay with the same key")


async def _shut_and_close(context: BrowserContext, route: ContextRoute) -> None:
    try:
        await route.shut()
        await context.close()
    except Exception:  # pragma: no cover - already closed
        pass


async def _in_own_task(step: Awaitable[T]) -> T:
    """Await a flow's step function in a task of its own.

    Playwright captures the caller's stack on every API call and reads the locals of each
    frame outside its own package; in a task of its own, a step's stack is its own frames,
    not the executor's and the worker's as well. Cancelling the caller cancels the step.
    """
    return await asyncio.ensure_future(step)


class _ReplayNow:
    """Sentinel: recovery decided the effect is to be attempted again in this pass."""


_REPLAY_NOW: Any = _ReplayNow()


def _safe_url(page: Page) -> str | None:
    try:
        return page.url
    except Exception:  # pragma: no cover
        return None


def _response_evidence(row: Any) -> dict[str, Any]:
    evidence = {"method": row.method, "url": row.url, "status": row.status,
                "location": (row.headers or {}).get("location"), "answered": row.answered, "failure": row.failure}
    if row.channel != "held":
        evidence["channel"] = row.channel
    if row.final_status is not None:
        evidence["final_status"], evidence["final_url"] = row.final_status, row.final_url
    return evidence


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value
