"""A run driven one step at a time from outside: an agent's browser session (``browserworker.agent``).

The executor walks a flow's known steps in passes. A live run keeps one pass open while its
steps arrive one by one. An action runs under the action guard in fail mode: what it would send
that only an effect may is refused and reported, never sent (:mod:`browserworker.gate._guard`).
An effect takes the path a flow's effect takes (:func:`~browserworker.runtime._effects.run_effect`:
intent journaled, every dispatch through the armed gate, the outcome journaled; a latest attempt
in doubt is recovered by its verifier first). Between steps the gap is watched as in a pass.

An effect whose outcome is unknown ends its pass (its context is closed). A new pass opens, the
steps before it are replayed (actions re-run, done effects skipped), and the effect is recovered:
verified, replayed once when provably never sent, or parked for a person.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from playwright.async_api import Page

from ..errors import LeaseLost
from ..flow import Action, Effect, Extensions, Flow, Login, Step
from ..gate import ActionGuard, ContextRoute, StepGap, watch_navigations
from ..journal import Lease, LeaseSettings, RunJournal
from ..logs import get_logger
from ..states import AttemptState, RunState
from ..store.aio import AsyncStore
from ..store.records import AttemptRecord, Owner, RunRecord
from ._browser import BrowserProcess
from ._effects import run_effect
from ._kept import KeptState
from ._leased_run import acquire
from ._login_sessions import SessionRun
from ._passes import Again, Pass, RunScope, Stop, in_own_task
from ._recover import stranded
from ._settings import ApprovalSettings, SessionSettings

__all__ = ["LiveRun", "SentBetween", "StepOutcome"]

log = get_logger("browserworker")

MAX_PASSES = 6
"""Passes one effect may take (each after an outcome in doubt) before it is left to a person."""


@dataclass(frozen=True)
class StepOutcome:
    """How one step of a live run ended.

    ``done``: its value; ``refused``: an action tried to send what only an effect may (``refused``
    names each request: held, not sent, unless ``possibly_sent`` names it too); ``failed``: it
    raised, or the effect was refused downstream; ``review``, ``approval``, ``cancelled``: the run
    has left this process (parked for a person, waiting for an approval, cancelled)."""

    kind: Literal["done", "refused", "failed", "review", "approval", "cancelled"]
    value: Any = None
    reason: str | None = None
    refused: tuple[str, ...] = ()
    possibly_sent: tuple[str, ...] = ()
    approval: int | None = None


@dataclass(frozen=True)
class SentBetween:
    """What a page sent between two steps (refused, or let through by the run's rules)."""

    after: str
    method: str
    url: str
    refused: bool

    def __str__(self) -> str:
        return f"{self.method} {self.url} ({'refused' if self.refused else 'let through'}, after {self.after})"


class LiveRun:
    """One leased run whose steps are given one at a time (see the module docstring).

    Build it with :meth:`lease`; :meth:`open` a pass (replaying steps already done), then
    :meth:`action` and :meth:`effect` per step; :meth:`end`, :meth:`release` or :meth:`detach`."""

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
        lets: Callable[[Any], bool] | None = None,
    ) -> None:
        self.flow = flow
        self.lets = lets  # what a page may send between steps all the same (see StepGap)
        self.journal = journal
        self.browser = browser
        self.extensions = extensions
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
        self.session = SessionRun(self.scope) if flow.session_key(self.scope.inputs) is not None else None
        self.between: list[SentBetween] = []  # what pages sent between steps, since last read
        self.kept = KeptState(journal, self.scope.sessions)  # the state a done effect left, for later passes
        self._pass: Pass | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._started = False
        self.passes = 0
        """Passes opened so far (a pass re-opened during an effect replays the steps before it)."""

    # -- leasing -------------------------------------------------------------------------

    @classmethod
    async def lease(
        cls,
        astore: AsyncStore,
        run: RunRecord,
        flow: Flow[Any],
        owner: Owner,
        browser: BrowserProcess,
        extensions: Extensions,
        *,
        lease: LeaseSettings,
        approvals: ApprovalSettings,
        sessions: SessionSettings | None = None,
        evidence_dir: Path | None = None,
        wait: float = 5.0,
        lets: Callable[[Any], bool] | None = None,
    ) -> LiveRun | None:
        """Lease ``run`` (at once if queued, expired or its owner is provably gone; else waiting up
        to ``wait`` seconds for a live owner's lease or the run's budget) and start heartbeating.
        ``lets``: what a page may send between steps all the same (see :class:`StepGap`).
        None if it could not be leased in time."""
        stop = asyncio.Event()
        timer = asyncio.get_running_loop().call_later(wait, stop.set)
        try:
            claimed = await acquire(astore, run, lease, extensions, owner, stop=stop)
        finally:
            timer.cancel()
        if claimed is None:
            return None
        held = Lease(astore, claimed.id, claimed.lease_epoch, lease, extensions)
        journal = RunJournal(astore, claimed, owner, held, lease)
        live = cls(
            flow,
            journal,
            browser,
            extensions,
            approvals=approvals,
            sessions=sessions,
            evidence_dir=evidence_dir,
            lets=lets,
        )
        held.start()
        if not claimed.fresh:  # taken up: its passes start from what its done effects left
            try:
                await live.kept.load()
            except BaseException:
                await held.stop()  # nobody holds the run: no heartbeat left behind
                raise
        return live

    @property
    def run(self) -> RunRecord:
        return self.journal.run

    @property
    def page(self) -> Page:
        """The page of the open pass."""
        if self._pass is None or self._pass.page is None:
            raise RuntimeError("no pass is open")
        return self._pass.page

    @property
    def is_open(self) -> bool:
        return self._pass is not None

    # -- passes --------------------------------------------------------------------------

    async def open(self, replay: Sequence[Step] = ()) -> list[StepOutcome]:
        """Open a pass: a fresh context (from the state the run's last done effect left, else the
        saved login of the run's session key, if one may be reused: :class:`KeptState`), the route
        in from the start, a page; then replay ``replay`` (actions re-run, effects skipped when
        done, recovered when in doubt). Returns the replayed steps' outcomes."""
        await self.close_pass()
        self.passes += 1
        if not self._started:
            if self.run.state != RunState.RUNNING:
                await self.journal.start()
            self._started = True
            await self.extensions.run_started(self.run)
        options = self.flow.context_options(self.scope.inputs)
        if self.session is not None:
            options.update(await self.session.context_options())
        options.update(self.kept.options())
        stack = contextlib.AsyncExitStack()
        context = await stack.enter_async_context(self.browser.context(**options))
        p = Pass(context=context, route=ContextRoute(context))
        p.gap = StepGap(p.route, self._between_steps, keep_page=True, lets=self.lets)
        self._stack, self._pass = stack, p
        await self.extensions.context_created(context)
        await p.route.install()  # nothing leaves this context unrouted
        await p.route.route_sockets()
        p.page = await context.new_page()
        watch_navigations(p.page, self.journal, p.route)
        outcomes = []
        for i, step in enumerate(replay):
            outcome = await (self.effect(step, replay[:i]) if isinstance(step, Effect) else self._replayed(step))
            outcomes.append(outcome)
            if outcome.kind not in ("done",):
                break
        return outcomes

    async def close_pass(self) -> None:
        """Close the open pass's context (its pages' renderers stopped first: nothing sends as it unloads)."""
        p, stack = self._pass, self._stack
        self._pass = self._stack = None
        if p is None or stack is None:
            return
        if p.gap is not None:
            p.gap.close()
        with contextlib.suppress(Exception):
            await p.route.shut()
        with contextlib.suppress(Exception):
            await stack.aclose()

    def _between_steps(self, after: str, method: str, url: str, refused: bool) -> None:
        self.between.append(SentBetween(after, method, url, refused))
        self.scope.log.warning("a page sent between steps", after_step=after, method=method, url=url, refused=refused)

    # -- steps ---------------------------------------------------------------------------

    async def action(self, step: Action) -> StepOutcome:
        """Run an action once in the open pass, guarded: a request it would send that only an
        effect may is refused (not sent) and the outcome is ``refused``."""
        p = self._need_pass()
        self.journal.check()
        assert p.page is not None
        ctx = self.scope.step_context(p.page, step.id, None, "", p.results)
        returned = False

        def late(method: str, url: str) -> None:
            # the guard keeps the socket once the action has returned (until the next step takes
            # it): a message the action's typing set off, refused after its outcome was told, is
            # told with what pages send between steps
            if returned:
                self._between_steps(step.id, method, url, True)

        guard = ActionGuard(step, mode="fail", report=late, keep_page=True)
        await guard.install(p.route)
        p.gap_closed()
        error: Exception | None = None
        value: Any = None
        try:
            value = await in_own_task(step.fn(ctx))
        except LeaseLost:
            raise
        except Exception as exc:
            error = exc
        finally:
            guard.remove()
            returned = True
            p.gap_opened(step)
        if guard.seen:
            leaked = guard.unrefused()
            return StepOutcome(
                "refused",
                reason=f"{step.id} would send what only an effect may",
                refused=tuple(guard.seen),
                possibly_sent=tuple(leaked),
            )
        if error is not None:
            self.journal.check()
            return StepOutcome("failed", reason=f"{type(error).__name__}: {error}")
        p.results[step.id] = value
        return StepOutcome("done", value)

    async def effect(
        self, step: Effect, before: Sequence[Step] | Callable[[], Awaitable[Sequence[Step]]]
    ) -> StepOutcome:
        """Run an effect in the open pass (intent, gate, outcome; recovery if its latest attempt
        is in doubt). If its outcome is unknown, a new pass replays ``before`` (the steps done
        before it; made only then, if it is a function) and recovers it. ``review``, ``approval`` and ``cancelled`` end the run here:
        it is parked, waiting, or over, and this object holds it no more."""
        for _ in range(MAX_PASSES):
            if self._pass is None:
                replayed = await self.open(await before() if callable(before) else before)
                if replayed and replayed[-1].kind != "done":
                    return replayed[-1]
            p = self._need_pass()
            try:
                cancelled, latest = await self.journal.effect_boundary(step.id)
                if cancelled:
                    raise Stop("cancelled", "cancelled on request")
                value = await run_effect(self.scope, step, p, latest)
                if latest is None or latest.state != AttemptState.SUCCEEDED:  # done in this pass: replays skip it
                    await self.kept.keep(p.context, step.id)
            except Again as again:
                await self.close_pass()
                if again.backoff:
                    await asyncio.sleep(again.backoff)
                continue
            except Stop as stop:
                return await self._stopped(step, stop)
            p.results[step.id] = value
            return StepOutcome("done", value)
        return await self._stopped(step, Stop("review", f"effect {step.id}: still in doubt after {MAX_PASSES} passes"))

    async def _stopped(self, step: Effect, stop: Stop) -> StepOutcome:
        if stop.kind == "failed":  # the session goes on: the agent decides what next
            return StepOutcome("failed", reason=str(stop))
        await self.close_pass()
        if stop.kind == "approval":
            approval = self.scope.parked_approval
            assert approval is not None
            await self.journal.park(approval)
            await self.journal.lease.stop()
            return StepOutcome("approval", reason=str(stop), approval=approval)
        state = {"review": RunState.NEEDS_REVIEW, "cancelled": RunState.CANCELLED}.get(stop.kind, RunState.FAILED)
        await self.end(state, str(stop), "needs_review" if stop.kind == "review" else stop.kind)
        return StepOutcome("review" if stop.kind == "review" else "cancelled", reason=str(stop))

    async def save_login(self, step_id: str) -> Any:
        """Save the open pass's signed-in state under the run's session key (sealed), for later runs
        and sessions to start from, over what is saved there (the pass may have signed in again
        after starting from a login the site had ended): ``{"session": "saved"}``, or
        ``"not_saved"`` if another run saved one meanwhile."""
        if self.session is None:
            raise RuntimeError("the run has no session key")
        p = self._need_pass()

        async def nothing(ctx: Any) -> dict[str, Any]:
            return {}

        return await self.session.run(Login(id=step_id, fn=nothing, sends=True), p, save_now=True)

    async def stranded(
        self, effects: Sequence[tuple[Effect, AttemptRecord | None]], reason: str
    ) -> tuple[list[str], str | None]:
        """The open pass's replay stopped (``reason``) before ``effects`` (each with its latest
        attempt), so their recovery never ran: decided as an executor decides a pass that failed
        before them (:func:`~browserworker.runtime._recover.stranded`), on a page of its own. Returns
        the ids of those a verifier found done (SUCCEEDED), and why a person decides the rest, if
        any is left in doubt: then the run has ended NEEDS_REVIEW, in the review queue."""
        p = self._need_pass()
        page = await p.context.new_page()
        try:
            done, review = await stranded(self.scope, effects, page, p.results, reason)
        finally:
            with contextlib.suppress(Exception):
                await page.close()
        if review is not None:
            await self.end(RunState.NEEDS_REVIEW, review, "needs_review")
        return done, review

    async def _replayed(self, step: Step) -> StepOutcome:
        assert isinstance(step, Action)
        return await self.action(step)

    def _need_pass(self) -> Pass:
        if self._pass is None:
            raise RuntimeError("no pass is open")
        return self._pass

    # -- the end -------------------------------------------------------------------------

    async def end(self, state: RunState, error: str | None, decision: str) -> RunRecord:
        """End the run (SUCCEEDED, FAILED, NEEDS_REVIEW, CANCELLED) and stop holding it."""
        await self.close_pass()
        try:
            final = await self.journal.end(state, error, decision)
        finally:
            await self.journal.lease.stop()
        await self.extensions.run_finished(final)
        await self.extensions.drain()
        return final

    async def release(self, decision: str = "released") -> RunRecord:
        """Hand the run back (QUEUED) for a later session to take up."""
        await self.close_pass()
        try:
            return await self.journal.release(decision=decision)
        finally:
            await self.journal.lease.stop()

    async def detach(self) -> None:
        """Stop holding the run without a word to the store (its lease runs out, or is taken over)."""
        await self.close_pass()
        await self.journal.lease.stop()
