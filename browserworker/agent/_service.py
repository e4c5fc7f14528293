"""Durable browser sessions for agents: each session a run, each tool call a journaled step.

:class:`AgentService` is what ``browserworker mcp`` serves (the MCP wiring is
:mod:`browserworker.mcp`; nothing here knows the protocol). A session is a run of the flow
``agent`` on the queue ``agent`` (no worker takes it), leased by the server process that drives
it. Its tools come in three kinds:

- read (``snapshot``, ``find``, ``extract``, ``screenshot``; ``navigate`` changes only the page):
  nothing they do can change the world;
- staging (``click``, ``hover``, ``fill``, ``select``, ``check``, ``press``, ``upload``): run
  under the action guard in fail mode: a request only an effect may send is held, reported and
  never sent;
- effect (``submit``): the one tool that may change the world: its call is journaled, then its
  intent, then every request it sends passes the dispatch gate; a retry of the same call (same
  run, same effect key) is answered from the journal and the target, never by clicking again.

Another server process takes a session up on its next call (its lease taken over once the old
owner is provably gone or its lease ran out): the page is re-opened where it was (the actions
replayed), the effects not redone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .._redact import SECRET_MARK
from ..errors import LeaseLost, SessionKeyError, ToolCallError, UsageError
from ..flow import Extensions, Flow, Step
from ..journal import LeaseSettings, this_owner
from ..logs import RunLog
from ..runtime import (
    ApprovalSettings,
    BrowserProcess,
    BrowserSettings,
    LiveRun,
    SessionSettings,
    StepOutcome,
    new_run_id,
    sealer_for,
)
from ..states import AttemptState, RunState
from ..store.aio import AsyncStore
from ..store.base import Store
from ..store.records import ApprovalRecord, NewRun, RunRecord
from ._actionable import refused_value
from ._answers import (
    MESSAGES,
    REOPENED,
    held,
    loads,
    sent_between,
    server_errors,
    shown_messages,
    stopped,
    submit_status,
    unsent,
    untrusted,
    what_was_sent,
    with_messages,
)
from ._approvals import AskPerson, PersonDecision, asked, decide_approval, held_approval, holding
from ._calls import (
    Call,
    MaySend,
    journaled_calls,
    latest_by_step,
    missed_verifies,
    retried_call,
    same_call,
    submit_args,
)
from ._session import (
    FLOW_NAME,
    QUEUE,
    SNAPSHOT_KEPT,
    AgentInputs,
    AgentSession,
    agent_flow,
)
from ._settle import told, wait_for_text
from ._snapshot import MARK_SECRET, read_texts
from ._uploads import chosen_files
from ._verify import parse_verify

__all__ = ["AgentPolicy", "AgentService"]


class _RunLeft(ToolCallError):
    """The session's run has left this server: it waits for a person, an approval, or has ended."""


WAIT_MAX = 30.0
"""The longest a ``wait_for`` waits, in seconds (an MCP client gives up on a call after a minute or so)."""


@dataclass(frozen=True)
class AgentPolicy:
    """What the server enforces, whatever the agent asks: submits a person approves first
    (every one, or those on the listed hosts), what pages may send with no submit (rules of
    :class:`~browserworker.agent.MaySend`, kept by each session opened here), the directories
    an agent may choose files from (``upload``; none: no upload), the directory the files its
    clicks download are saved in (none: not kept), whether the sessions opened
    here accept any TLS certificate (a local application's self-signed one), how long a session
    waits for another owner's lease, and where the console is (for the links in answers)."""

    approve_all: bool = False
    approve_hosts: tuple[str, ...] = ()
    may_send: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    downloads: str | None = None
    ignore_https_errors: bool = False
    wait: float = 5.0
    console_url: str | None = None

    def __post_init__(self) -> None:
        MaySend(*self.may_send)  # a rule that is not one fails here (ValueError), not at the first call

    def approves(self, url: str) -> bool:
        host = urlsplit(url).hostname or ""
        netloc = urlsplit(url).netloc
        return self.approve_all or host in self.approve_hosts or netloc in self.approve_hosts

    def link(self, run_id: str) -> str:
        if self.console_url:
            return f"{self.console_url.rstrip('/')}/runs/{run_id}"
        return f"browserworker show {run_id}"


class AgentService:
    """Agent sessions over one store and one browser (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        browser: BrowserSettings | None = None,
        lease: LeaseSettings | None = None,
        approvals: ApprovalSettings | None = None,
        sessions: SessionSettings | None = None,
        evidence_dir: Path | None = None,
        policy: AgentPolicy | None = None,
        extensions: tuple[object, ...] = (),
    ) -> None:
        self.store = store
        self.astore = AsyncStore(store)
        self.browser_settings = browser if browser is not None else BrowserSettings.discover()
        self.lease = lease if lease is not None else LeaseSettings()
        self.approvals = approvals if approvals is not None else ApprovalSettings.from_env()
        self.sessions = sessions if sessions is not None else SessionSettings.from_env()
        self.evidence_dir = evidence_dir
        self.policy = policy if policy is not None else AgentPolicy()
        self.extensions = Extensions([RunLog(), *extensions])
        self.owner = this_owner("mcp")
        self.live: dict[str, AgentSession] = {}
        self._browser: BrowserProcess | None = None
        self._stack = contextlib.AsyncExitStack()
        self._attaching: dict[str, asyncio.Lock] = {}

    async def browser(self) -> BrowserProcess:
        if self._browser is None:
            self._browser = await self._stack.enter_async_context(BrowserProcess(self.browser_settings))
        return self._browser

    async def aclose(self) -> None:
        """Hand every live session back (QUEUED: the next call takes it up), close the browser."""
        for session in list(self.live.values()):
            with contextlib.suppress(Exception):
                await session.flush()
                await session.live.release("agent server stopped")
        self.live.clear()
        await self._stack.aclose()
        self.astore.close()

    # -- sessions ------------------------------------------------------------------------------

    async def open_session(
        self, site: str, session_key: str | None = None, limit_key: str | None = None
    ) -> dict[str, Any]:
        """Start a session at ``site`` (a URL): a new run, leased here, its page opened there."""
        parts = urlsplit(site)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ToolCallError(f"site must be an http(s) URL, not {site!r}")
        inputs = AgentInputs(
            site=site,
            session_key=session_key or None,
            may_send=list(self.policy.may_send),
            ignore_https_errors=self.policy.ignore_https_errors,
        )
        try:
            flow = agent_flow(inputs)
        except UsageError as exc:
            raise ToolCallError(str(exc)) from None
        run = await self.astore.call(
            self.store.create_run,
            NewRun(
                id=new_run_id(),
                flow_name=FLOW_NAME,
                inputs=inputs.model_dump(mode="json"),
                queue=QUEUE,
                limit_key=limit_key or parts.netloc,
            ),
        )
        try:
            session = await self._lease(run, flow, [], set())
        except ToolCallError:  # its site's budget holds it: nothing is left waiting
            await self.astore.call(self.store.cancel, run.id, who="agent server")
            raise ToolCallError(
                f"the budget of {run.limit_key} lets no new session start now (browserworker limits); try again later"
            ) from None
        await session.live.open()
        loaded = "reused" if session.live.session is not None and session.live.session.loaded is not None else None
        call = Call(seq=session.next_seq(), tool="navigate", args={"url": site, "ok": True})
        outcome = await session.live.action(session.step(call))  # type: ignore[arg-type]
        if outcome.kind != "done":
            await session.live.end(RunState.FAILED, outcome.reason, "failed")
            self.live.pop(run.id, None)
            if outcome.kind == "refused":
                raise ToolCallError(f"could not open {site}: {held(outcome)}, as the page loads; {loads(outcome)}")
            raise ToolCallError(f"could not open {site}: {outcome.reason}{untrusted(outcome.reason)}")
        await session.record(call)
        answer = {
            "run_id": run.id,
            "url": session.page.url,
            "title": await session.page.title(),
            "limit_key": run.limit_key,
        }
        if session_key:
            answer["saved_login"] = loaded or "none"
        answer |= told(outcome.value if isinstance(outcome.value, dict) else {}, keeps_downloads=True)
        if loaded and urlsplit(session.page.url).path != parts.path:
            answer["notes"] = [
                *answer.get("notes", ()),
                f"the saved login was reused and the site answered with another page ({session.page.url}): if it "
                "is the sign-in page, the site has ended that login; sign in, then save_login",
            ]
        return answer

    async def _lease(self, run: RunRecord, flow: Flow[Any], calls: list[Call], missed: set[str]) -> AgentSession:
        may_send = MaySend(*AgentInputs.model_validate(run.inputs).may_send)
        live = await LiveRun.lease(
            self.astore,
            run,
            flow,
            self.owner,
            await self.browser(),
            self.extensions,
            lease=self.lease,
            approvals=self.approvals,
            sessions=self.sessions,
            evidence_dir=self.evidence_dir,
            wait=self.policy.wait,
            lets=may_send or None,
        )
        if live is None:
            current = await self.astore.call(self.store.get_run, run.id)
            who = f"{current.owner} (pid {current.owner_pid} on {current.owner_host})" if current else "another owner"
            raise ToolCallError(f"session {run.id} is held by {who}, or its site's budget holds it; try again shortly")
        try:  # secrets typed in the session are sealed with the key of saved logins
            sealer = await asyncio.to_thread(sealer_for, self.store, self.sessions)
        except SessionKeyError:  # none here (PostgreSQL with no BROWSERWORKER_SESSION_KEY): kept in memory only
            sealer = None
        saves = Path(self.policy.downloads).expanduser() if self.policy.downloads else None
        session = AgentSession(live, calls, self.policy.approves, may_send or None, saves, sealer=sealer, missed=missed)
        self.live[run.id] = session
        return session

    async def session(self, run_id: str) -> tuple[AgentSession, list[str]]:
        """The live session of ``run_id``, taken up here if another process drove it (its steps
        replayed in a new page). Returns it and what its replay said."""
        alive = self._alive(run_id)
        if alive is not None:
            return alive, []
        lock = self._attaching.setdefault(run_id, asyncio.Lock())
        async with lock:
            alive = self._alive(run_id)
            if alive is not None:
                return alive, []
            found = self.live.get(run_id)
            if found is not None:  # its lease was lost: let it go
                self.live.pop(run_id, None)
                with contextlib.suppress(Exception):
                    await found.live.detach()
            return await self._attach(run_id)

    async def _attach(self, run_id: str) -> tuple[AgentSession, list[str]]:
        run = await self.astore.call(self.store.get_run, run_id)
        if run is None or run.flow_name != FLOW_NAME:
            raise ToolCallError(f"no agent session {run_id!r} (open_session gives a run id)")
        self._check_state(run)
        events = await self.astore.call(self.store.events, run_id)  # its calls, and its verifies that missed
        inputs = AgentInputs.model_validate(run.inputs)
        session = await self._lease(run, agent_flow(inputs), journaled_calls(events), missed_verifies(events))
        try:
            steps = await session.history()
            replayed = await session.live.open(steps)
        except BaseException:
            self.live.pop(run_id, None)
            await session.live.detach()
            raise
        notes = [f"session taken up by this server: {len(replayed)} step(s) replayed, effects not redone"]
        notes += [
            f"replaying {st.id}: {o.kind} ({o.reason})"
            for st, o in zip(steps, replayed, strict=False)
            if o.kind != "done"
        ]
        last = replayed[-1] if replayed else None
        if last is not None and last.kind in ("review", "approval", "cancelled"):
            self.live.pop(run_id, None)
            current = await self.astore.call(self.store.get_run, run_id)
            assert current is not None
            self._check_state(current)
        if last is not None and last.kind in ("refused", "failed") and _is_last(session, steps[len(replayed) - 1]):
            # the session's last call, journaled beside its action: the crash may have come before
            # it was done, or before it was marked undone; the page is as the calls before it left it
            await session.undo(session.calls[-1])
            notes.append(
                f"the last call, {session.calls[-1].step_id}, was not redone ({last.kind}): do it again if it is needed"
            )
            last = None
        if last is not None and last.kind != "done":  # the page is not where it was: touch nothing but verifies
            step = steps[len(replayed) - 1].id
            why = (
                f"session {run_id} could not be re-opened where it was: replaying {step} {last.kind} on "
                f"{session.page.url} ({last.reason or ', '.join(last.refused)})"
            )
            self.live.pop(run_id, None)
            try:
                found, review = await session.stranded(why)
            except BaseException:
                await session.live.detach()
                raise
            if review is not None:
                raise _RunLeft(f"{review}: the session waits for a person's review; see {self.policy.link(run_id)}")
            await session.live.release("agent session could not be replayed")
            raise ToolCallError(
                f"{why}; nothing more was done, its submits stand as journaled" + "".join(f"; {said}" for said in found)
            )
        return session, notes

    def _check_state(self, run: RunRecord) -> None:
        link = self.policy.link(run.id)
        if run.state == RunState.NEEDS_REVIEW:
            raise _RunLeft(f"session {run.id} waits for a person's review ({run.error}); see {link}")
        if run.state == RunState.AWAITING_APPROVAL:
            raise _RunLeft(f"session {run.id} waits for an approval; see {link} (call submit again to poll)")
        if run.state in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED):
            raise _RunLeft(f"session {run.id} has ended ({run.state}){': ' + run.error if run.error else ''}")

    async def calls_of(self, run_id: str) -> list[Call]:
        events = await self.astore.call(self.store.events, run_id)
        return journaled_calls(events)

    def _alive(self, run_id: str) -> AgentSession | None:
        """``run_id``'s session, if this server drives it and still holds its lease."""
        found = self.live.get(run_id)
        return found if found is not None and found.live.journal.alive else None

    async def call(self, run_id: str, work: Callable[[AgentSession], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Run one tool call on ``run_id``'s session, one at a time per session."""
        session = self._alive(run_id)  # the common case, without a coroutine
        notes: list[str] = []
        if session is None:
            session, notes = await self.session(run_id)
        async with session.lock:
            try:
                answer = await work(session)
            except LeaseLost as exc:
                self.live.pop(run_id, None)
                raise ToolCallError(f"session {run_id} was taken over by another owner: {exc}") from None
        if session.live.between:
            notes = [*notes, *sent_between(session.live.between)]
            session.live.between.clear()
        if notes:
            answer["notes"] = [*answer.get("notes", ()), *notes]
        return answer

    # -- read tools --------------------------------------------------------------------------------

    async def snapshot(self, run_id: str) -> dict[str, Any]:
        async def work(s: AgentSession) -> dict[str, Any]:
            shot = await s.take()
            s.note(Call(seq=s.next_seq(), tool="snapshot"))
            return {"run_id": run_id, "snapshot": shot.text}

        return await self.call(run_id, work)

    async def find(self, run_id: str, text: str) -> dict[str, Any]:
        if not text:
            raise ToolCallError("find needs the text to look for")

        async def work(s: AgentSession) -> dict[str, Any]:
            shot = await s.take()
            needle = text.lower()
            lines = [line.strip() for line in shot.text.splitlines()[3:] if needle in line.lower()]
            s.note(Call(seq=s.next_seq(), tool="find", args={"text": text}))
            return {"run_id": run_id, "matches": lines}

        return await self.call(run_id, work)

    async def wait_for(
        self, run_id: str, text: str | None = None, gone: str | None = None, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Wait until ``text`` is shown on the page (or, given ``gone``, until it is not), at most
        ``timeout`` seconds: what a page shows after the call that set it off has settled (search
        results fetched after a pause in typing, a message pushed over a socket, a spinner)."""
        if (text is None) == (gone is None) or not (text or gone):
            raise ToolCallError("wait_for needs either text (to wait until it is shown) or gone (until it is not)")
        if not 0 < timeout <= WAIT_MAX:
            raise ToolCallError(f"wait_for's timeout is in seconds, more than 0 and at most {WAIT_MAX:g}")

        async def work(s: AgentSession) -> dict[str, Any]:
            answer = await wait_for_text(s.page, text, gone, timeout)
            s.note(Call(seq=s.next_seq(), tool="wait_for", args={"text": text, "gone": gone, "timeout": timeout}))
            return {"run_id": run_id, **answer}

        return await self.call(run_id, work)

    async def extract(self, run_id: str, ref: str | None = None, selector: str | None = None) -> dict[str, Any]:
        """The text of the elements ``ref`` or ``selector`` finds, or of the page's body
        (:func:`~browserworker.agent._snapshot.read_texts`); ``not_shown`` counts those left out."""

        async def work(s: AgentSession) -> dict[str, Any]:
            live = "body" if ref is None and selector is None else (await s.target(ref, selector))[1]
            texts, found = await read_texts(s.page, live, SNAPSHOT_KEPT)
            s.note(Call(seq=s.next_seq(), tool="extract", args={"ref": ref, "selector": selector}))
            answer = {"run_id": run_id, "url": s.page.url, "texts": texts}
            return answer if found == len(texts) else {**answer, "not_shown": found - len(texts)}

        return await self.call(run_id, work)

    async def screenshot(self, run_id: str) -> bytes:
        shots: list[bytes] = []

        async def work(s: AgentSession) -> dict[str, Any]:
            shots.append(await s.page.screenshot(full_page=False, mask=[s.page.locator(f"[{SECRET_MARK}]")]))
            s.note(Call(seq=s.next_seq(), tool="screenshot"))
            return {}

        await self.call(run_id, work)
        return shots[0]

    # -- page-changing tools ------------------------------------------------------------------------

    async def navigate(self, run_id: str, url: str) -> dict[str, Any]:
        async def work(s: AgentSession) -> dict[str, Any]:
            absolute = _absolute(s.page.url, url)
            call = Call(seq=s.next_seq(), tool="navigate", args={"url": absolute})
            return await self._unstaged(s, call, s.step(call))

        return await self.call(run_id, work)

    async def back(self, run_id: str) -> dict[str, Any]:
        """Go back to the page before this one (a tool error on the session's first page)."""

        async def work(s: AgentSession) -> dict[str, Any]:
            call = Call(seq=s.next_seq(), tool="back")
            return await self._unstaged(s, call, s.step(call))

        return await self.call(run_id, work)

    async def stage(
        self,
        run_id: str,
        tool: str,
        args: dict[str, Any],
        ref: str | None,
        selector: str | None,
        *,
        secret: bool = False,
    ) -> dict[str, Any]:
        """``click``, ``hover``, ``fill``, ``select``, ``check``, ``press`` (which may name no
        element) or ``upload``."""

        async def work(s: AgentSession) -> dict[str, Any]:
            aimed = None if tool == "press" and ref is None and selector is None else s.aim(ref, selector)
            call = Call(seq=s.next_seq(), tool=tool, args=dict(args, ref=ref, selector=selector))
            step = s.step(call, live_selector=aimed[0] if aimed else None, acted=s.acted)
            call, outcome = await s.act(call, step, aimed, secret=secret)
            if outcome.kind == "done" and call.tool == "fill" and aimed is not None:
                refused = await refused_value(s.page, aimed[0], call.target, call.args.get("value"))
                if refused is not None:  # a date typed as the field does not take it: it stayed empty
                    await s.undo(call)
                    raise ToolCallError(f"fill failed: {refused}")
            answer = self._staged(s, call, outcome)
            if call.args.get("secret") and aimed is not None:  # masked in snapshots and screenshots from now on
                await s.page.eval_on_selector_all(aimed[0], f"els => els.forEach({MARK_SECRET})")
            return answer

        return await self.call(run_id, work)

    async def upload(self, run_id: str, paths: list[str], ref: str | None, selector: str | None) -> dict[str, Any]:
        """Choose files (from the policy's directories) for a file input, or the file chooser a
        click on the element opens; journaled with each file's size and SHA-256."""
        files = await asyncio.to_thread(chosen_files, paths, self.policy.files)
        return await self.stage(run_id, "upload", {"files": files}, ref, selector)

    def _staged(self, s: AgentSession, call: Call, outcome: StepOutcome) -> dict[str, Any]:
        """The answer to a page-changing call, journaled already as it ended."""
        if outcome.kind == "refused" and call.tool == "navigate":
            raise ToolCallError(f"navigate was stopped: {held(outcome)}, as the page loads; {loads(outcome)}")
        if outcome.kind == "refused":
            raise ToolCallError(stopped(call.tool, outcome))
        if outcome.kind == "failed":
            reason = (outcome.reason or "").removeprefix("ValueError: ")  # the kit's own words, no class name
            raise ToolCallError(f"{call.tool} failed: {reason}{untrusted(outcome.reason)}")
        answer: dict[str, Any] = {"run_id": s.run_id, "seq": call.seq, "url": s.page.url}
        settled = outcome.value if isinstance(outcome.value, dict) else {}  # a click's, a key press's
        answer.update(told(settled, keeps_downloads=self.policy.downloads is not None))
        return answer

    async def _unstaged(self, s: AgentSession, call: Call, step: Step) -> dict[str, Any]:
        """A page-changing call whose element needs no probe (a navigation, an idempotent submit)."""
        call, outcome = await s.act(call, step, None)
        return self._staged(s, call, outcome)

    # -- submit --------------------------------------------------------------------------------------

    async def submit(
        self,
        run_id: str,
        ref: str | None = None,
        selector: str | None = None,
        effect_key: str | None = None,
        verify: dict[str, Any] | None = None,
        idempotent: bool = False,
        *,
        key: str | None = None,
        ask: AskPerson | None = None,
        hold: float | None = None,
    ) -> dict[str, Any]:
        """The one tool that may change the world (the module docstring; ``key``: ``submit_args``).

        ``hold``: seconds a request the policy holds for a person is held, the page kept, before
        the session parks, for this call (None: the service's ``approvals.hold``; 0: parks at
        once, as for a person who is asked only once the call has ended).

        With ``ask``, a request the policy holds for a person is also put to ``ask`` as soon as
        it is held (the console can still decide meanwhile), and its answer journaled as the
        console's would be: approved while the submit still holds the request, it is sent in
        this call; decided after the session was parked, this call takes the session up again
        and answers as a retry would (``committed``; ``failed`` if rejected). No answer within
        ``ASK_FOR`` (``_approvals``), or none at all: ``awaiting_approval``, as without ``ask``."""
        submitting = partial(self._submit, run_id, ref, selector, effect_key, verify, idempotent, hold, key)
        if ask is None or not (self.policy.approve_all or self.policy.approve_hosts):
            return await submitting()
        asking = asyncio.ensure_future(asked(self.astore, self.store, run_id, ask, self.policy.link(run_id)))
        try:
            answer = await submitting()
            if answer.get("status") == "awaiting_approval" and await asking:
                return await submitting()
            return answer
        finally:
            if not asking.done():
                asking.cancel()
                await asyncio.gather(asking, return_exceptions=True)

    async def held_approval(self, run_id: str) -> ApprovalRecord | None:
        """The newest request of ``run_id`` that waits for a person (not expired), if any."""
        return await held_approval(self.astore, self.store, run_id)

    async def decide_approval(self, run_id: str, decision: PersonDecision) -> bool:
        """Journal ``decision`` as the decision of the request ``run_id`` holds for a person, as
        the console would; True if there was one to decide (decided meanwhile by someone else
        counts: the submit's next call answers by that decision)."""
        return await decide_approval(self.astore, self.store, run_id, decision)

    async def _submit(
        self,
        run_id: str,
        ref: str | None,
        selector: str | None,
        effect_key: str | None,
        verify: dict[str, Any] | None,
        idempotent: bool,
        hold: float | None,
        key: str | None = None,
    ) -> dict[str, Any]:
        try:
            spec = parse_verify(verify) if verify is not None else None
            args = submit_args(ref, selector, idempotent, key)
        except ValueError as exc:
            raise ToolCallError(str(exc)) from None
        if effect_key is not None and not (0 < len(effect_key) <= 200):
            raise ToolCallError("effect_key must be 1-200 characters")
        if idempotent and effect_key is not None:
            raise ToolCallError("an idempotent submit (safe to repeat) takes no effect_key")
        asked = Call(0, "submit", args, verify=spec)
        answered = await self._answer_from_journal(run_id, effect_key, asked)
        if answered is not None:
            return answered

        async def work(s: AgentSession) -> dict[str, Any]:
            prior = retried_call(s.calls, effect_key, asked)
            if prior is not None and not same_call(prior, asked):
                return {
                    "run_id": run_id,
                    "status": "conflict",
                    "effect_key": effect_key,
                    "reason": f"effect key {effect_key!r} was used by call {prior.seq} with other arguments; nothing was done",
                }
            with holding(s.live, hold):
                if prior is not None:
                    return await self._retry(s, prior)
                return await self._first(s, asked, effect_key)

        try:
            return await self.call(run_id, work)
        except ToolCallError as exc:  # it has left this server, or its page could not be re-opened
            answered = await self._answer_from_journal(run_id, effect_key, asked)
            if answered is None:
                raise
            return answered if isinstance(exc, _RunLeft) else answered | {"note": str(exc)}

    async def _first(self, s: AgentSession, asked: Call, effect_key: str | None) -> dict[str, Any]:
        target, live = await s.target(asked.args["ref"], asked.args["selector"])
        seq = s.next_seq()
        try:
            resolved = asked.verify.resolved(s.page.url) if asked.verify is not None else None
        except ValueError as exc:
            raise ToolCallError(f"invalid verify: {exc}") from None
        call = Call(
            seq=seq,
            tool="submit",
            args=asked.args,
            target=target,
            key=None if asked.idempotent else (effect_key or f"{s.run_id}#{seq}"),
            verify=resolved,
            snapshot=(s.snapshot or "")[:SNAPSHOT_KEPT] or None,
            page_url=s.page.url,
            epoch=s.live.journal.epoch,
        )
        if asked.idempotent:
            return await with_messages(s.page, await self._unstaged(s, call, s.step(call, live_selector=live)))
        undecided = await s.read_before(resolved)  # a note where it cannot tell
        await s.flush()
        await s.record(call)  # before the intent: recovery needs the call and its verifier
        passes = s.live.passes
        before = partial(s.history, upto=call.seq)  # replayed only if the submit's outcome is in doubt
        outcome = await s.live.effect(s.step(call, live_selector=live), before)  # type: ignore[arg-type]
        return await self._answer(s, call, outcome, reopened=s.live.passes != passes, note=undecided)

    async def _retry(self, s: AgentSession, call: Call) -> dict[str, Any]:
        latest = (await s.latest_attempts()).get(call.step_id)
        if latest is not None and latest.state == AttemptState.SUCCEEDED:
            return await self._answer(s, call, StepOutcome("done"))
        if (
            latest is not None
            and latest.state not in (AttemptState.INTENT, AttemptState.UNKNOWN)
            and not (latest.decided_by or "").startswith("approval_")
        ):
            failed = {"run_id": s.run_id, "status": "failed", "effect_key": call.key, "seq": call.seq}
            return failed | {"reason": latest.error} | unsent(latest.state)
        history = await s.history(upto=call.seq)
        step = s.step(call, answered=await s.answered(latest))  # the site's 2xx is not overruled by a verify
        outcome = await s.live.effect(step, history)  # type: ignore[arg-type]
        return await self._answer(s, call, outcome)

    async def _answer(
        self, s: AgentSession, call: Call, outcome: StepOutcome, *, reopened: bool = False, note: str | None = None
    ) -> dict[str, Any]:
        base: dict[str, Any] = {"run_id": s.run_id, "effect_key": call.key, "seq": call.seq}
        if outcome.kind in ("review", "cancelled", "approval"):
            self.live.pop(s.run_id, None)
        if outcome.kind == "review":
            return base | {"status": "needs_review", "reason": outcome.reason, "review": self.policy.link(s.run_id)}
        if outcome.kind == "approval":
            return base | {
                "status": "awaiting_approval",
                "approval": outcome.approval,
                "approve_at": self.policy.link(s.run_id),
                "reason": "a person approves this request first; nothing was sent. Call submit again (same arguments) to poll",
            }
        if outcome.kind == "cancelled":
            return base | {"status": outcome.kind, "reason": outcome.reason}
        if outcome.kind == "failed":
            latest = latest_by_step(await s.live.journal.attempts()).get(call.step_id)
            return base | {"status": "failed", "reason": outcome.reason} | unsent(latest.state if latest else None)
        attempts = [a for a in await s.live.journal.attempts() if a.step_id == call.step_id]
        attempts.sort(key=lambda a: a.attempt_no)
        answer = base | {"status": submit_status(attempts, call.epoch), "result": attempts[-1].result}
        notes = what_was_sent(attempts[-1], answer) + ([REOPENED] if reopened and s.live.is_open else [])
        if note:
            notes.append(note)
        if s.live.is_open:
            answer["url"] = s.page.url
            alerts, errors = await shown_messages(s.page)
            if alerts:
                answer["alerts"] = alerts
            # a form shown again with errors: nothing taken (the key is done); a 5xx page: the verify tells
            failed = server_errors(answer)
            if errors and not failed:
                notes.append(MESSAGES)
            sent = answer["status"] != "verified" and attempts[-1].dispatched_at is not None
            read = sent and (bool(failed) or not errors)
            answer |= await s.leave_evidence(call, errors, read_verify=read, notes=notes, failed=failed)
        if notes:
            answer["note"] = "; ".join(notes)
        return answer

    async def _answer_from_journal(self, run_id: str, key: str | None, asked: Call) -> dict[str, Any] | None:
        """A retried submit whose answer the journal has (done; or its run waits for a person, or
        has ended): answered from the store alone, no page needed. None: the session must act."""
        run = await self.astore.call(self.store.get_run, run_id)
        if run is None or run.flow_name != FLOW_NAME:
            return None
        prior = retried_call(await self.calls_of(run.id), key, asked)
        if prior is None:
            return None
        base = {"run_id": run.id, "effect_key": prior.key, "seq": prior.seq}
        if not same_call(prior, asked):
            return base | {
                "status": "conflict",
                "reason": f"effect key {key!r} was used with other arguments; nothing was done",
            }
        attempts = sorted(
            (a for a in await self.astore.call(self.store.attempts, run.id) if a.step_id == prior.step_id),
            key=lambda a: a.attempt_no,
        )
        if attempts and attempts[-1].state == AttemptState.SUCCEEDED:
            return base | {"status": submit_status(attempts, prior.epoch), "result": attempts[-1].result}
        if run.state == RunState.NEEDS_REVIEW:
            return base | {"status": "needs_review", "reason": run.error, "review": self.policy.link(run.id)}
        if run.state == RunState.AWAITING_APPROVAL:
            return base | {"status": "awaiting_approval", "approve_at": self.policy.link(run.id)}
        if run.state in (RunState.FAILED, RunState.CANCELLED):
            return base | {"status": str(run.state).lower(), "reason": run.error}
        return None

    # -- the session as a whole ----------------------------------------------------------------------

    async def resume(self, run_id: str) -> dict[str, Any]:
        async def work(s: AgentSession) -> dict[str, Any]:
            return {"run_id": run_id, "url": s.page.url, "title": await s.page.title(), "calls": len(s.calls)}

        return await self.call(run_id, work)

    async def save_login(self, run_id: str) -> dict[str, Any]:
        async def work(s: AgentSession) -> dict[str, Any]:
            if s.live.session is None:
                raise ToolCallError("this session has no session_key: open it with one to save its login")
            call = Call(seq=s.next_seq(), tool="save_login", args={"ok": True})
            value = await s.live.save_login(call.step_id)
            await s.record(call)
            return {"run_id": run_id, "saved_login": value["session"]}

        return await self.call(run_id, work)

    async def close_session(self, run_id: str) -> dict[str, Any]:
        session, _ = await self.session(run_id)
        async with session.lock:
            await session.flush()
            final = await session.live.end(RunState.SUCCEEDED, None, "agent closed the session")
        self.live.pop(run_id, None)
        return {"run_id": run_id, "state": str(final.state)}

    async def status(self, run_id: str) -> dict[str, Any]:
        run = await self.astore.call(self.store.get_run, run_id)
        if run is None or run.flow_name != FLOW_NAME:
            raise ToolCallError(f"no agent session {run_id!r}")
        calls = await self.calls_of(run_id)
        latest = latest_by_step(await self.astore.call(self.store.attempts, run_id))
        submits = [
            {
                "seq": c.seq,
                "effect_key": c.key,
                "state": str(latest[c.step_id].state) if c.step_id in latest else "not_started",
            }
            for c in calls
            if c.is_effect
        ]
        return {
            "run_id": run_id,
            "state": str(run.state),
            "error": run.error,
            "calls": len(calls),
            "submits": submits,
            "link": self.policy.link(run_id),
        }


def _is_last(session: AgentSession, step: Step) -> bool:
    """Whether ``step`` replays the session's last journaled call."""
    return bool(session.calls) and session.calls[-1].step_id == step.id and not session.calls[-1].is_effect


def _absolute(base: str, url: str) -> str:
    from urllib.parse import urljoin

    absolute = urljoin(base, url)
    if urlsplit(absolute).scheme not in ("http", "https"):
        raise ToolCallError(f"navigate takes an http(s) URL, not {url!r}")
    return absolute
