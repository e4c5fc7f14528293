"""The step loop: runs one leased run's steps in order, pass after pass, to an end state.

One *pass* is a fresh browser context walking the steps from the top: actions are re-run
(:mod:`browserworker.runtime._actions`), SUCCEEDED effects are skipped (their journaled results handed
on), and an effect whose latest attempt is INTENT or UNKNOWN is recovered first
(:mod:`browserworker.runtime._effects`, :mod:`browserworker.runtime._recover`; docs/guarantees.md,
"Recovery"). A pass ends with the run done, or asks for a new pass (a replay needs fresh
page state), for review, or for failure. The executor owns no lease logic beyond honouring
it: every journal write is fenced (:class:`~browserworker.journal._journal.RunJournal`), and a lost
lease closes the context and stops the run at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from playwright.async_api import BrowserContext, Page

from ..errors import SessionKeyError
from ..flow import Action, Effect, Extension, Extensions, Flow, Login, Step
from ..gate import ContextRoute, StepGap, watch_navigations
from ..journal import RunJournal
from ..logs import get_logger
from ..states import AttemptState, RunState
from ..store.records import AttemptRecord, RunRecord
from ._actions import run_action
from ._browser import BrowserProcess
from ._effects import run_effect
from ._kept import KeptState
from ._login_sessions import SessionRun
from ._passes import Again, Pass, PassOutcome, RunScope, Stop
from ._recover import in_doubt, stranded
from ._settings import ApprovalSettings, SessionSettings

__all__ = ["Executor", "PassOutcome"]

log = get_logger("browserworker")

# pass outcomes that end the run: (state, decision)
_ENDINGS: dict[str, tuple[RunState, str]] = {
    "review": (RunState.NEEDS_REVIEW, "needs_review"),
    "failed": (RunState.FAILED, "failed"),
    "cancelled": (RunState.CANCELLED, "cancelled"),
}


class Executor:
    """Executes one leased run to an end state (or until its lease is lost)."""

    def __init__(
        self,
        flow: Flow[Any],
        journal: RunJournal,
        browser: BrowserProcess,
        extensions: Extensions,
        *,
        approvals: ApprovalSettings,
        sessions: SessionSettings | None = None,
        evidence_dir: Path | None = None,
    ) -> None:
        run = journal.run
        self.flow = flow
        self.journal = journal
        self.lease = journal.lease
        self.browser = browser
        self.extensions = extensions
        self.run = run
        self.stop_requested = False  # set by a stopping worker: release the run at the next step boundary
        self.throttled = False  # handed back because the site throttled an effect (see budgets)
        # True once the run's end is committed while its context may still be closing (the
        # extensions hear ``run_settled``: a worker starts its next run beside that close)
        self.settled = False
        self.scope = RunScope.of(
            flow,
            journal,
            extensions,
            approvals=approvals,
            sessions=sessions,
            evidence_dir=evidence_dir,
            shared_workers_allowed=browser.settings.shared_workers == "allow",
            log=log,
        )
        self.log = self.scope.log
        self.session = SessionRun(self.scope) if flow.login_step is not None else None
        self.kept = KeptState(journal, self.scope.sessions)  # the state a done effect left, for later passes
        self._pass_now: Pass | None = None
        self._starting: asyncio.Future[Any] | None = None  # the RUNNING transition, in flight
        self._ending: asyncio.Future[RunRecord] | None = None  # the SUCCEEDED transition, in flight
        self.closer: Extension = _CloseOnLeaseLost(self)

    # -- the run --------------------------------------------------------------------

    async def execute(self) -> RunRecord:
        """Run to SUCCEEDED, FAILED or NEEDS_REVIEW; raises LeaseLost if the run is taken away."""
        # a run leased for the first time has no journal yet: one round trip fewer
        attempts, restored_at, requeued_at = ([], None, None) if self.run.fresh else await self.journal.history()
        missing = sorted({a.step_id for a in attempts} - {s.id for s in self.flow.steps})
        if missing:
            return await self._finish(
                RunState.NEEDS_REVIEW, f"journaled steps no longer in the flow: {', '.join(missing)}", "flow_changed"
            )
        self.scope.restored_at = restored_at
        self.scope.budget_since = requeued_at
        if any(a.kind == "effect" and a.state == AttemptState.SUCCEEDED for a in attempts):
            await self.kept.load()  # the passes start from what the done effects left
        elif any(isinstance(step, Effect) for step in self.flow.steps[:-1]):
            self.kept.look_ahead()  # an effect will leave a state to keep: its key found meanwhile
        if self.run.state != RunState.RUNNING:
            # committed while the first browser context opens; awaited before the first step
            self._starting = asyncio.ensure_future(self.journal.start())
        await self.extensions.run_started(self.run)
        try:
            if attempts and nothing_left(self.flow.steps, attempts):  # e.g. resolved done: no browser needed
                final = await self._finish(RunState.SUCCEEDED, None, "nothing left to do")
            else:
                final = await self._passes()
        finally:
            # never left behind; a failure of either is a lost lease, raised already
            left = [f for f in (self._starting, self._ending) if f is not None]
            self._starting = self._ending = None
            if left:
                await asyncio.gather(*left, return_exceptions=True)
        if final.state not in (RunState.QUEUED, RunState.AWAITING_APPROVAL):
            await self.extensions.run_finished(final)
        return final

    async def _passes(self) -> RunRecord:
        while True:
            outcome = await self._pass()
            if outcome.kind == "done":
                ending, self._ending = self._ending, None
                assert ending is not None
                return await ending
            if outcome.kind in _ENDINGS:
                state, decision = _ENDINGS[outcome.kind]
                return await self._finish(state, outcome.reason, decision)
            if outcome.kind == "approval":
                assert self.scope.parked_approval is not None
                await self._started()
                parked = await self.journal.park(self.scope.parked_approval)
                self.log.info("run waits for approval", approval=self.scope.parked_approval, state=str(parked.state))
                return parked
            if outcome.kind in ("released", "throttled"):
                self.throttled = outcome.kind == "throttled"
                released = await self.journal.release(decision=outcome.kind)
                self.log.info("run released at a step boundary", reason=outcome.reason)
                return released
            self.log.info("starting a new pass", reason=outcome.reason, backoff=outcome.backoff)
            if outcome.backoff:
                await asyncio.sleep(outcome.backoff)

    def _settle(self, ending: asyncio.Future[RunRecord]) -> None:
        """The SUCCEEDED transition is committed: nothing of this run is left but closing its
        context (its route is sealed by then)."""
        if ending.cancelled() or ending.exception() is not None:
            return  # raised where it is awaited
        self.settled = True
        self.extensions.later.run_settled(self.run.id)

    async def _started(self) -> None:
        """Wait for the RUNNING transition (its failure, e.g. a lost lease, surfaces here)."""
        starting, self._starting = self._starting, None
        if starting is not None:
            await starting

    async def _finish(self, state: RunState, error: str | None, decision: str) -> RunRecord:
        await self._started()
        return await self.journal.end(state, error, decision)

    async def _pass(self) -> PassOutcome:
        options = self.flow.context_options(self.scope.inputs)
        if self.session is not None:  # the saved login's storage state, if one may be reused
            try:
                options.update(await self.session.context_options())
            except SessionKeyError as exc:
                return PassOutcome("failed", str(exc))
        options.update(self.kept.options())  # newer than the saved login, which it came from
        async with self.browser.context(**options) as context:
            p = self._pass_now = Pass(context=context, route=ContextRoute(context))
            p.gap = StepGap(p.route, self._between_steps)
            try:
                await self.extensions.context_created(context)  # before the gate's route
                await self._open(p)
                for step in self.flow.steps:
                    self._undeclared_between(p)
                    p.results[step.id] = await self._step(step, p)
                    p.gap.open(step)
                self._undeclared_between(p)
                # Every step succeeded: nothing more leaves this context, so the run's end is
                # committed while the context closes, not after.
                self._ending = asyncio.ensure_future(self._finish(RunState.SUCCEEDED, None, "all steps succeeded"))
                self._ending.add_done_callback(self._settle)
            except Again as again:
                return PassOutcome("again", str(again), again.backoff)
            except Stop as stop:
                if stop.kind == "failed":
                    return await self._stranded(p, str(stop))
                return PassOutcome(stop.kind, str(stop))
            finally:
                self._pass_now = None
                p.gap.close()
                # before the context closes (see ContextRoute.shut): its pages' renderers are
                # stopped, so nothing leaves late and no document sends as it is unloaded
                await p.route.shut()
        return PassOutcome("done")

    async def _stranded(self, p: Pass, reason: str) -> PassOutcome:
        """The pass failed before it reached an effect in doubt (sent, then its owner stopped):
        the steps before it could not be run again, so its recovery never ran. Its verifier is
        asked on a page of its own (:func:`~browserworker.runtime._recover.found_done`): found
        done, it is SUCCEEDED, and so is the run if nothing is left to do; else a person decides
        (NEEDS_REVIEW), as a run left FAILED would hold an effect in doubt that nobody decides."""
        latest = _latest(await self.journal.attempts())
        effects = [(s, latest.get(s.id)) for s in self.flow.steps if isinstance(s, Effect)]
        if not any(in_doubt(attempt) for _, attempt in effects):
            return PassOutcome("failed", reason)
        _, review = await stranded(self.scope, effects, await p.context.new_page(), p.results, reason)
        if review is not None:
            return PassOutcome("review", review)
        if nothing_left(self.flow.steps, await self.journal.attempts()):
            self._ending = asyncio.ensure_future(
                self._finish(RunState.SUCCEEDED, None, "the effects in doubt were found done by their verifiers")
            )
            self._ending.add_done_callback(self._settle)
            return PassOutcome("done")
        return PassOutcome("failed", reason)

    def _between_steps(self, after: str, method: str, url: str, refused: bool) -> None:
        """A page sent while no step ran (see :class:`~browserworker.gate._guard.StepGap`): say so."""
        what = "refused" if refused else "let through: the context's route was not in yet"
        self.log.warning(
            "a page sent a request between steps", after_step=after, method=method, url=url, refused=refused
        )
        self.extensions.later.notice(
            self.run,
            after,
            f"a page sent {method} {url} after step {after} "
            f"returned, before the next step ({what}); a send that belongs to a step must "
            "finish inside it (await what the page sends)",
        )

    def _undeclared_between(self, p: Pass) -> None:
        """With ``undeclared_effects="fail"``, a send seen between steps fails the run."""
        if self.flow.undeclared_effects == "fail" and p.gap is not None and p.gap.seen:
            raise Stop("failed", f"a page sent between steps, outside any step: {', '.join(p.gap.seen)}")

    async def _open(self, p: Pass) -> None:
        """Route (if the first step is an effect: nothing to intercept yet), sockets, the page."""
        steps = self.flow.steps
        if steps and isinstance(steps[0], Effect):
            p.route.install()
        sockets = p.route.route_sockets()  # before any page can open a socket
        p.page = await self._new_page(p.context, p.route)
        await self._started()
        await sockets

    async def _step(self, step: Step, p: Pass) -> Any:
        latest = await self._boundary(step)
        if isinstance(step, Effect):
            value = await run_effect(self.scope, step, p, latest)
            # done in this pass: a later pass skips it, and starts from what it left (if a step follows)
            if (latest is None or latest.state != AttemptState.SUCCEEDED) and step is not self.flow.steps[-1]:
                await self.kept.keep(p.context, step.id)
            return value
        if isinstance(step, Login) and self.session is not None:
            p.gap_closed()  # a login posts its form: the step is running
            return await self.session.run(step, p)
        assert isinstance(step, Action)
        return await run_action(self.scope, step, p)

    async def _boundary(self, step: Step) -> AttemptRecord | None:
        """Between steps (never between an effect's intent and its outcome): honour a lost
        lease, a cancel request, or a stopping worker. Before an effect, the same store call
        reads the step's latest attempt, which is returned."""
        self.lease.check()
        if self.stop_requested:
            raise Stop("released", "the worker is stopping")
        latest = None
        if isinstance(step, Effect):
            cancelled, latest = await self.journal.effect_boundary(step.id)
        else:
            cancelled = await self.journal.cancel_requested()
        if cancelled:
            raise Stop("cancelled", "cancelled on request")
        return latest

    async def _new_page(self, context: BrowserContext, route: ContextRoute) -> Page:
        """``context.new_page()``, but a lost lease ends the wait: Playwright's ``new_page`` never
        returns when the context is closed meanwhile (a lost lease closes it)."""
        opening = asyncio.ensure_future(context.new_page())
        while True:
            done, _ = await asyncio.wait({opening}, timeout=0.25)
            if done:
                watch_navigations(opening.result(), self.journal, route)  # a 429/503 Retry-After pauses its key
                return opening.result()
            if self.lease.lost is not None:
                opening.cancel()
                self.lease.check()

    def shut_now(self) -> None:
        """Shut and close the current pass's context at once: nothing more may leave for this run."""
        p = self._pass_now
        if p is not None:
            asyncio.ensure_future(_shut_and_close(p.context, p.route))


class _CloseOnLeaseLost(Extension):
    """The executor's own subscriber: a lost lease shuts the run's context at once."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def lease_lost(self, run_id: str, error: BaseException) -> None:
        if run_id == self.executor.run.id:
            self.executor.shut_now()


def nothing_left(steps: Sequence[Step], attempts: Sequence[AttemptRecord]) -> bool:
    """Whether a resumed run has nothing left to do: every effect's latest attempt SUCCEEDED,
    and so did every action after the last effect. (The actions before an effect only prepare
    its page: with every effect done there is nothing for them to prepare.)"""
    latest = _latest(attempts)
    last_effect = max((i for i, s in enumerate(steps) if isinstance(s, Effect)), default=-1)
    needed = [s for i, s in enumerate(steps) if isinstance(s, Effect) or i > last_effect]
    return all(s.id in latest and latest[s.id].state == AttemptState.SUCCEEDED for s in needed)


def _latest(attempts: Sequence[AttemptRecord]) -> dict[str, AttemptRecord]:
    """Each step's latest attempt."""
    latest: dict[str, AttemptRecord] = {}
    for a in attempts:
        if a.step_id not in latest or a.attempt_no > latest[a.step_id].attempt_no:
            latest[a.step_id] = a
    return latest


async def _shut_and_close(context: BrowserContext, route: ContextRoute) -> None:
    try:
        await route.shut()
        await context.close()
    except Exception:  # pragma: no cover - already closed
        pass
