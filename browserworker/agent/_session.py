"""One agent session: its live run, its journaled calls, the refs of its last snapshot.

What it knows of itself: the next call's number, how to journal a call (fenced), how a secret
typed in it is sealed and read back, the steps a new pass replays (each page-changing call that
succeeded, each effect done or in doubt), and which element a ref or selector names now.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..errors import ToolCallError
from ..flow import Effect, Flow, Step
from ..runtime import LiveRun, StepOutcome
from ..states import AttemptState
from ..store.records import AttemptRecord
from ._answers import site_failed
from ._calls import EVIDENCE, STAGING, TOOL_CALL, UNDONE, Call, MaySend, latest_by_step, step_of
from ._snapshot import REF_ATTRIBUTE, Snapshot, Target, take_snapshot
from ._verify import VerifySpec, address, check, read_first

__all__ = [
    "FLOW_NAME",
    "QUEUE",
    "SNAPSHOT_KEPT",
    "AgentInputs",
    "AgentSession",
    "agent_flow",
]

FLOW_NAME = "agent"
QUEUE = "agent"
PROBE_AFTER = 0.2
"""Seconds an action by ref may take before the page is asked whether its element is still there."""
NOTE_AFTER = 0.05
"""Seconds a read call's record waits for the read calls after it, to be journaled with them."""
SNAPSHOT_KEPT = 20_000
"""Characters of the snapshot an agent acted on kept with a submit (its evidence)."""

_ELEMENT_INFO = """els => els.slice(0, 1).map(e => ({tag: e.tagName.toLowerCase(),
    type: (e.type || '').toLowerCase(), field: e.name || e.id || '', secret: e.type === 'password',
    name: (e.getAttribute('aria-label') || (e.labels && e.labels.length ? e.labels[0].innerText : '')
           || e.getAttribute('placeholder') || '').trim().slice(0, 80)}))"""
"""What a selector's element is (for the journal): its tag, type, field name, whether it is a
password, and its label (what an export calls the value typed into it, where its id is made up)."""


class AgentInputs(BaseModel):
    """A session's run inputs: where it started, the key of its saved login, if any, what its
    pages may send with no submit (the server's ``--may-send`` rules when it was opened) and
    whether any TLS certificate is accepted (``--ignore-https-errors``): they stay the
    session's, whichever server takes it up."""

    model_config = ConfigDict(extra="forbid")

    site: str
    session_key: str | None = None
    may_send: list[str] = []
    ignore_https_errors: bool = False


def agent_flow(inputs: AgentInputs) -> Flow[Any]:
    """The flow a session's run is of: its steps are given one at a time; an action sending what
    only an effect may is refused (fail mode); the saved login of its session key, if any; any
    TLS certificate accepted if its inputs say so."""
    return Flow(
        FLOW_NAME,
        inputs=AgentInputs,
        undeclared_effects="fail",
        session=inputs.session_key,
        context={"ignore_https_errors": True} if inputs.ignore_https_errors else None,
    )


@dataclass
class AgentSession:
    """One agent session this server drives: its live run, its journaled calls, its refs."""

    live: LiveRun
    calls: list[Call]
    approves: Callable[[str], bool] = lambda url: False  # the server's policy: a person approves a submit on url
    may_send: MaySend | None = None  # what its pages may send with no submit (its inputs' rules)
    downloads: Path | None = None  # where the files its clicks download are saved (the server's --downloads)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    refs: dict[str, Target] = field(default_factory=dict)
    live_refs: dict[str, str] = field(default_factory=dict)  # how to reach a ref inside a frame now
    next_ref: int = 1
    snapshot: str | None = None
    sealer: Any = None
    notes: set[asyncio.Future[None]] = field(default_factory=set)
    _unwritten: list[Call] = field(default_factory=list)  # read calls noted, not yet journaled
    _noting: asyncio.TimerHandle | None = None  # when they will be
    _watched: Any = None  # the page whose navigations make refs stale
    moves: int = 0  # the watched page navigated, or an action acted on its element (see acted)
    missed: set[str] = field(default_factory=set)  # addresses whose verify missed a done submit
    _reading: Any = None  # the page verifies are read on (see _reader)

    @property
    def run_id(self) -> str:
        return self.live.run.id

    @property
    def page(self) -> Any:
        return self.live.page

    # -- the journal -------------------------------------------------------------------------

    def next_seq(self) -> int:
        return (self.calls[-1].seq if self.calls else 0) + 1

    async def record(self, call: Call) -> None:
        """Journal ``call`` (fenced: a session taken over writes nothing), after the read calls
        noted before it (queued first, so the journal holds the calls in their order)."""
        if self._unwritten:
            self._write_notes()
            await asyncio.sleep(0)  # each record's task queues its write in its first step: before this one's
        await self.live.journal.record(TOOL_CALL, step_id=call.step_id, detail=call.to_event())
        self.calls.append(call)

    def note(self, call: Call) -> None:
        """Journal a read call in the background: the answer does not wait for it (a read changed
        nothing; a crash may lose its record, never a step). The read calls of the next
        :data:`NOTE_AFTER` seconds are journaled together (one commit, not one each: an agent
        reads in bursts); :meth:`flush` writes them at once and waits for them."""
        self.calls.append(call)
        self._unwritten.append(call)
        if self._noting is None:
            self._noting = asyncio.get_running_loop().call_later(NOTE_AFTER, self._write_notes)

    def _write_notes(self) -> None:
        """Journal the read calls noted so far, together (their records share a batch of the store)."""
        if self._noting is not None:
            self._noting.cancel()
            self._noting = None
        for call in self._unwritten:
            task = asyncio.ensure_future(
                self.live.journal.record(TOOL_CALL, step_id=call.step_id, detail=call.to_event())
            )
            self.notes.add(task)
            task.add_done_callback(self._noted)
        self._unwritten.clear()

    def _noted(self, task: asyncio.Future[None]) -> None:
        self.notes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.live.scope.log.warning("a read call was not journaled", error=repr(task.exception()))

    async def flush(self) -> None:
        """Journal the read calls noted and not yet written, and wait for every one of them."""
        self._write_notes()
        if self.notes:
            await asyncio.gather(*self.notes, return_exceptions=True)

    def seal(self, value: str) -> str | None:
        if self.sealer is None:
            return None
        sealed: bytes = self.sealer.seal({"value": value}, self.run_id)
        return base64.b64encode(sealed).decode()

    def unseal(self, call: Call) -> str | None:
        if self.sealer is None or call.secret is None:
            return None
        return str(self.sealer.open(base64.b64decode(call.secret), self.run_id)["value"])

    def step(
        self,
        call: Call,
        live_selector: str | None = None,
        acted: Callable[[], None] | None = None,
        *,
        answered: bool = False,
    ) -> Step:
        """The step ``call`` runs as. A submit's verify is not trusted to say *not done* where a
        verify of its address missed a done submit of the session, or where the site ``answered``
        the submit's request with success (a recorded 2xx or 3xx): only a person overrules that."""
        distrust = None
        if call.verify is not None and answered:
            distrust = (
                "the site answered its request with success, which a verify that did not find it does not overrule"
            )
        elif call.verify is not None and (where := address(call.verify)) in self.missed:
            distrust = (
                f"a verify of {where} did not find a submit of this session that was done, so it may not find "
                "this one either"
            )
        return step_of(
            call,
            lambda: self.unseal(call),
            approve=call.is_effect and self.approves(self.calls_url(call)),
            live_selector=live_selector,
            acted=acted,
            may_send=self.may_send,
            downloads=self.downloads,
            distrust=distrust,
        )

    async def answered(self, attempt: AttemptRecord | None) -> bool:
        """Whether the site answered a request ``attempt`` dispatched with success (2xx, 3xx), as
        its outbox recorded it before a crash."""
        if attempt is None:
            return False
        return any(r.status is not None and 200 <= r.status < 400 for r in await self.live.journal.outbox(attempt))

    @contextlib.asynccontextmanager
    async def _reader(self, spec: VerifySpec) -> AsyncIterator[Any]:
        """The page a verify is read on: for a GET the session's own (its request API, which
        navigates nothing); else a page of its own in the session's browser context, opened once
        and left blank between reads (nothing of the page read goes on running there)."""
        if spec.get is not None:
            yield self.page
            return
        if self._reading is None or self._reading.is_closed() or self._reading.context != self.page.context:
            self._reading = await self.page.context.new_page()
        try:
            yield self._reading
        finally:
            with contextlib.suppress(Exception):  # the context is closing: nothing left to blank
                await self._reading.goto("about:blank")

    async def stranded(self, reason: str) -> tuple[list[str], str | None]:
        """When a replay could not bring the page back where it was (``reason``; the site moved
        on: an order placed empties the checkout it came from), its submits in doubt are decided
        as recovery decides them (:meth:`LiveRun.stranded`): each whose verify finds it done now
        is done; one left in doubt (no verify, or it did not find it) goes to a person, and the
        run ends NEEDS_REVIEW: a *not done* would need the page, to send it again. Returns what
        was found, for the agent, and why a person decides, if one does."""
        latest = await self.latest_attempts()
        effects = [(self.step(c), latest.get(c.step_id)) for c in self.calls if c.is_effect]
        done, review = await self.live.stranded([(s, a) for s, a in effects if isinstance(s, Effect)], reason)
        keys = {c.step_id: c.key for c in self.calls}
        return [f"its verify found {step} (effect key {keys[step]}) done: it is verified" for step in done], review

    async def read_before(self, spec: VerifySpec | None) -> str | None:
        """Read a submit's verify (if any) before the submit, on a page of its own: a verify that
        finds its proof already (an earlier order's reference, a word every page shows) would
        answer *verified* after a crash for a submit that never landed; the submit is refused.
        One that cannot tell (its address answers a client error) would leave the submit to a
        person after a crash: returns the note that says so, for the answer."""
        if spec is None:
            return None
        async with self._reader(spec) as page:
            verdict = await read_first(page, spec)
        if verdict is not None and verdict.kind == "done":
            proof = (verdict.result or {}).get("verified")
            raise ToolCallError(
                f"invalid verify: it finds its proof ({proof!r} at {spec.url or spec.get}) before the submit, so after "
                "a crash it would take the submit for done even if it never landed; look for something only this "
                "submit makes (a reference you type), or give no verify (a person then decides after a crash); "
                "nothing was done"
            )
        if verdict is not None and verdict.kind == "unknown":
            return f"before this submit your verify could not tell whether it had landed ({verdict.reason}); after a crash a person would decide it"
        return None

    async def leave_evidence(
        self, call: Call, errors: bool, *, read_verify: bool, notes: list[str], failed: list[str]
    ) -> dict[str, Any]:
        """Journal what a done submit left: its page's screenshot, whether the page showed errors
        (an export tells of them) and, with ``read_verify``, whether its verify finds it, read on a page
        of its own (:func:`~browserworker.agent._verify.check`). A verify that misses it is told in
        ``notes``, and from then on its address's *not done* is not trusted in this session (a
        person decides instead of a retry), unless the site answered it with a server error
        (``failed``): then the miss is the site's, and the note says what the verify found.
        Returns the answer's ``screenshot``, if any."""
        shot = await self.live.scope.screenshot(self.page, f"{call.step_id}-after")
        left = {"screenshot": shot} if shot is not None else {}
        detail: dict[str, Any] = left | ({"errors_shown": True} if errors else {})
        if read_verify and call.verify is not None:
            async with self._reader(call.verify) as page:
                missed = await check(page, call.verify)
            if failed:
                notes.append(site_failed(failed, missed is None))
            elif missed is not None:
                where = address(call.verify)
                self.missed.add(where)
                detail |= {"verify_missed": where, "verify_read": missed}
                notes.append(
                    f"your verify did not find this submit, which was done ({missed}): after a crash it would take "
                    f"such a submit for one that never landed, so in this session a person decides those it reads "
                    f"at {where}; declare a verify that finds what the submit did (a page that shows the text you typed)"
                )
        elif failed:
            notes.append(site_failed(failed, None))
        if detail:
            await self.live.journal.record(EVIDENCE, step_id=call.step_id, detail=detail)
        return left

    def calls_url(self, call: Call) -> str:
        return call.page_url or str(self.live.run.inputs.get("site", ""))

    async def history(self, *, upto: int | None = None) -> list[Step]:
        """The steps a new pass replays: each page-changing call that succeeded, in order (a call
        refused or failed changed nothing), each effect that is done or in doubt. A done submit is
        skipped by the replay, so the page is then taken to where it left it (:func:`_landing`):
        the next calls were made there."""
        latest = await self.latest_attempts()
        steps: list[Step] = []
        for call in self.calls:
            if upto is not None and call.seq >= upto:
                break
            if call.tool not in (*STAGING, "submit"):
                continue
            if not call.args.get("ok", call.is_effect):
                continue
            attempt = latest.get(call.step_id)
            if call.is_effect and (
                attempt is None
                or attempt.state not in (AttemptState.SUCCEEDED, AttemptState.INTENT, AttemptState.UNKNOWN)
            ):
                continue
            in_doubt = call.is_effect and attempt is not None and attempt.state != AttemptState.SUCCEEDED
            steps.append(self.step(call, answered=in_doubt and await self.answered(attempt)))
            landed = _landing(call, attempt)
            if landed is not None:
                steps.append(self.step(landed))
        return steps

    async def latest_attempts(self) -> dict[str, AttemptRecord]:
        return latest_by_step(await self.live.journal.attempts())

    # -- refs ---------------------------------------------------------------------------------

    async def take(self) -> Snapshot:
        page = self.page
        if page is not self._watched:  # a new page (a new pass): forget the old one's refs when it navigates
            page.on("framenavigated", self._navigated)
            self._watched = page
        shot = await take_snapshot(page, self.next_ref)
        self.refs, self.next_ref, self.live_refs = shot.refs, shot.next_ref, shot.live
        self.snapshot = shot.text
        return shot

    def _navigated(self, frame: Any) -> None:
        """The page's document was replaced: every ref of its last snapshot is stale."""
        if self._watched is not None and frame == self._watched.main_frame:
            self.refs = {}
            self.moves += 1

    def acted(self) -> None:
        """The running action has done its work on its element (a click done: what it set off is
        still settling). Its element may be gone from now on, and that is not a stale ref."""
        self.moves += 1

    def aim(self, ref: str | None, selector: str | None) -> tuple[str, Target | None]:
        """What a call names, checked without the page: ``(selector to act on now, the ref's
        target)``. An unknown ref, or one of an older snapshot, is refused here."""
        if (ref is None) == (selector is None):
            raise ToolCallError("give either ref (from snapshot) or selector")
        if selector is not None:
            return selector, None
        assert ref is not None
        number = ref[1:] if ref.startswith("e") else ""
        if not number.isdigit() or int(number) >= self.next_ref:
            raise ToolCallError(
                f"unknown ref {ref!r}: refs come from snapshot (the last one gave up to e{self.next_ref - 1})"
            )
        if ref not in self.refs:
            raise _stale(ref)
        return self.live_refs.get(ref) or f'[{REF_ATTRIBUTE}="{ref}"]', self.refs[ref]

    async def probe(self, live: str, ref: str | None, known: Target | None) -> Target:
        """The element ``live`` finds on the page now (one round trip): the target to journal."""
        try:
            found = await self.page.eval_on_selector_all(live, _ELEMENT_INFO)
        except Exception as exc:
            raise ToolCallError(f"selector {live!r} is not valid: {str(exc).splitlines()[0]}") from None
        if not found:
            raise (
                _stale(ref)
                if ref is not None
                else ToolCallError(f"selector {live!r} matches nothing on {self.page.url}")
            )
        if known is not None:
            return known
        return Target(selector=live, **found[0])

    async def act(
        self, call: Call, step: Step, aimed: tuple[str, Target | None] | None, *, secret: bool = False
    ) -> tuple[Call, StepOutcome]:
        """Run a page-changing action and journal it beside it, not after it: the call is
        journaled as done while the action runs, and marked undone if it ends otherwise, before
        the agent is answered. Only the session's last call can be journaled done and not be (a
        crash in between): a replay that cannot redo it marks it undone (:meth:`undo`).
        Returns the call as journaled.

        The element the call names is probed beside the action too: a selector's at once (its
        target is journaled), a ref's (known from its snapshot) only if the action has not ended
        within :data:`PROBE_AFTER` and has not yet acted on it (:class:`_LateProbe`). An element
        that is not there stops the action: it could only be waiting for it; nothing of the call
        is left journaled as done."""
        ref = call.args.get("ref")
        acting: asyncio.Future[StepOutcome] | None = None
        recording: asyncio.Future[None] | None = None
        late: _LateProbe | None = None
        target: Target | None
        try:
            if aimed is not None and aimed[1] is None:  # a selector: the action in a task, its element probed now
                acting = asyncio.ensure_future(self.live.action(step))  # type: ignore[arg-type]
                target = await self.probe(aimed[0], ref, None)
            else:
                target = aimed[1] if aimed is not None else call.target
            call = self._journaled(call, target, secret)
            recording = asyncio.ensure_future(self._record_beside(call))
            if acting is not None:
                outcome = await acting
            elif aimed is not None:  # a ref: the action in this task, stopped if the late probe fails
                late = _LateProbe(self, aimed[0], ref, aimed[1])
                outcome = await late.around(self.live.action(step))  # type: ignore[arg-type]
            else:
                outcome = await self.live.action(step)  # type: ignore[arg-type]
        except BaseException:
            if late is not None:
                late.cancel()
            if acting is not None:
                acting.cancel()
                await asyncio.gather(acting, return_exceptions=True)
            if recording is not None:
                await recording
                await self.undo(call)
            raise
        await recording
        if outcome.kind != "done":
            await self.undo(call)
        return call, outcome

    async def _record_beside(self, call: Call) -> None:
        # one turn of the loop first: the action's first request goes to the browser before the
        # store's thread starts on the record (it then works while the browser does)
        await asyncio.sleep(0)
        await self.record(call)

    def _journaled(self, call: Call, target: Target | None, secret: bool) -> Call:
        """``call`` as the journal keeps it (one copy): its target, marked done (``ok``), and a
        value typed into a password field (or marked secret) sealed, never in clear."""
        if call.tool == "fill" and (secret or (target is not None and target.secret)):
            value = str(call.args["value"])
            args = dict(call.args, value=None, secret=True, ok=True)
            return replace(call, target=target, args=args, secret=self.seal(value))
        return replace(call, target=target, args=dict(call.args, ok=True))

    async def undo(self, call: Call) -> None:
        """Journal that ``call`` did not do what it asked (it was refused, failed or stopped)."""
        await self.live.journal.record(UNDONE, step_id=call.step_id, detail={"seq": call.seq})
        self.calls = [replace(c, args=dict(c.args, ok=False)) if c.seq == call.seq else c for c in self.calls]

    async def target(self, ref: str | None, selector: str | None) -> tuple[Target, str]:
        """The element a call names: ``(target to journal, selector to act on now)``."""
        live, known = self.aim(ref, selector)
        return await self.probe(live, ref, known), live


class _LateProbe:
    """The probe of a ref's element beside its action, which runs in the caller's task: started
    only if the action is still running after :data:`PROBE_AFTER` (a timer, cancelled when the
    action ends first). A probe that finds the element not there while the action may still
    be waiting for it stops the action: it cancels the task, and :meth:`around` raises the
    probe's error instead; a probe that could not look (the page navigated under it) stops
    nothing. Once the action has done its work on the element
    (:meth:`AgentSession.acted`), or the page has navigated since it began (a link clicked),
    a missing element is what the action did, not a stale ref: the probe is not started, or
    what it found is let be; so is a failed probe of an action that ended by itself."""

    def __init__(self, session: AgentSession, *probe: Any) -> None:
        me = asyncio.current_task()
        assert me is not None
        self.session, self.probe, self.me = session, probe, me
        self.moves = session.moves
        self.running = True  # the action
        self.stopped = False  # by the probe (the task cancelled)
        self.task: asyncio.Future[Target] | None = None
        self.timer = asyncio.get_running_loop().call_later(PROBE_AFTER, self._start)

    def _moved_on(self) -> bool:
        """The action is past its element (it acted on it, or the page navigated meanwhile)."""
        return self.session.moves != self.moves

    def _start(self) -> None:
        if self.running and not self._moved_on():
            self.task = asyncio.ensure_future(self.session.probe(*self.probe))
            self.task.add_done_callback(self._probed)

    def _probed(self, task: asyncio.Future[Target]) -> None:
        # only a probe that looked and found no element stops the action: one that could not
        # look (the page navigating under it, the link just clicked) says nothing of the element
        if self.running and not task.cancelled() and isinstance(task.exception(), _StaleRef) and not self._moved_on():
            self.stopped = True
            self.me.cancel()

    async def around(self, action: Awaitable[StepOutcome]) -> StepOutcome:
        """The action's outcome, once it and the probe (if started) have ended; the probe's error
        if it failed (a cancel of the task from elsewhere stays a cancel)."""
        try:
            try:
                outcome = await action
            finally:
                self.running = False
                self.timer.cancel()
        except BaseException:
            if self.stopped and self.me.uncancel() == 0:  # stopped by the probe alone: its error
                assert self.task is not None
                await self.task
            raise
        if self.stopped:  # the action ended all the same (it did not end by the cancel)
            self.me.uncancel()
        if self.task is not None:  # it ended by itself: its outcome stands, whatever the probe found
            await asyncio.gather(self.task, return_exceptions=True)
        return outcome

    def cancel(self) -> None:
        self.timer.cancel()
        if self.task is not None:
            self.task.cancel()


class _StaleRef(ToolCallError):
    """A ref whose element is not on the page (the probe looked and found none)."""


def _stale(ref: str) -> ToolCallError:
    return _StaleRef(f"ref {ref!r} is stale: the page changed since the snapshot that gave it; take a new snapshot")


def _landing(call: Call, attempt: AttemptRecord | None) -> Call | None:
    """For a done submit, a navigation to the address its page was at when it was done (its
    result's ``url``: where the site's redirect took it, an order's page, the signed-in form),
    replayed in its place under the submit's number; None for any other call, or a submit done
    with no such address (one a verify found done)."""
    if not call.is_effect or attempt is None or attempt.state != AttemptState.SUCCEEDED:
        return None
    url = attempt.result.get("url") if isinstance(attempt.result, dict) else None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    return Call(seq=call.seq, tool="navigate", args={"url": url, "ok": True})
