"""An agent's tool calls as journaled records, and the steps they replay as.

Every call that changes the page is journaled as a ``tool_call`` event of the session's run:
its sequence number, the tool, its arguments (a secret value sealed, never written in clear)
and, for an element, the :class:`~browserworker.agent._snapshot.Target` its ref named. From
these a session is replayed after a crash and exported as a flow file.

The page-changing tools replay as actions (re-run on every pass): ``navigate``, ``back``,
``click``, ``hover``, ``fill``, ``select``, ``check``, ``press``, ``upload`` (the same files, or
it fails), and a ``submit`` marked ``idempotent`` (a login, a search: safe to repeat). A plain
``submit`` is an effect, keyed by its ``effect_key``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from .._canonical import fingerprint_of
from ..flow import Action, ChannelRequest, Effect, Step, StepContext, is_dispatch, rule_problem
from ..store.records import AttemptRecord, EventRecord
from ._actionable import ACTION_TIMEOUT, on_element, set_checked
from ._settle import click_and_settle, go_back, go_to, settled
from ._snapshot import MARK_SECRET, Target
from ._uploads import changed_file, choose_files
from ._verify import VerifySpec, verifier

__all__ = [
    "EVIDENCE",
    "STAGING",
    "TOOL_CALL",
    "UNDONE",
    "Call",
    "MaySend",
    "journaled_calls",
    "latest_by_step",
    "missed_verifies",
    "retried_call",
    "same_call",
    "step_of",
]

TOOL_CALL = "tool_call"
"""The event a call is journaled as."""
UNDONE = "tool_call_undone"
"""The event that marks a journaled call as not done (refused, failed, stopped, or not redone by a replay)."""
EVIDENCE = "tool_evidence"
"""The event of what a done submit left on the page: its screenshot, and whether the page showed
errors (``errors_shown``: a form re-rendered with them, the site may have refused it)."""

STAGING = ("navigate", "back", "click", "hover", "fill", "select", "check", "press", "upload")
"""The tools that replay as actions (with ``submit``, the page-changing tools)."""


@dataclass(frozen=True)
class Call:
    """One journaled tool call (see the module docstring)."""

    seq: int
    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    target: Target | None = None
    key: str | None = None  # a submit's effect key
    verify: VerifySpec | None = None
    secret: str | None = None  # a secret value, sealed (never the value itself)
    snapshot: str | None = None  # the snapshot the agent acted on (a submit's evidence)
    page_url: str | None = None  # the page a submit was made on
    epoch: int | None = None  # the lease epoch the call was journaled under (not journaled itself)

    @property
    def step_id(self) -> str:
        return f"t{self.seq:04d}.{self.tool}"

    @property
    def idempotent(self) -> bool:
        return bool(self.args.get("idempotent"))

    @property
    def is_effect(self) -> bool:
        return self.tool == "submit" and not self.idempotent

    def same_request(self, other: Call) -> bool:
        """Whether ``other`` asks for what this call asked (a submit's retry, or a conflict)."""
        return self.tool == other.tool and self.args == other.args and self.verify == other.verify

    def fingerprint(self) -> str:
        return fingerprint_of(
            {
                "tool": self.tool,
                "args": self.args,
                "target": self.target.selector if self.target else None,
                "verify": self.verify.to_dict() if self.verify else None,
            }
        )

    def to_event(self) -> dict[str, Any]:
        detail: dict[str, Any] = {"seq": self.seq, "tool": self.tool, "args": self.args}
        if self.target is not None:
            detail["target"] = self.target.to_dict()
        if self.key is not None:
            detail["effect_key"] = self.key
        if self.verify is not None:
            detail["verify"] = self.verify.to_dict()
        if self.secret is not None:
            detail["sealed"] = self.secret
        if self.snapshot is not None:
            detail["snapshot"] = self.snapshot
        if self.page_url is not None:
            detail["page_url"] = self.page_url
        return detail

    @classmethod
    def from_event(cls, detail: dict[str, Any], epoch: int | None = None) -> Call:
        target = detail.get("target")
        verify = detail.get("verify")
        return cls(
            seq=int(detail["seq"]),
            tool=str(detail["tool"]),
            args=dict(detail.get("args") or {}),
            target=Target.of(target) if target else None,
            key=detail.get("effect_key"),
            verify=VerifySpec.model_validate(verify) if verify else None,
            secret=detail.get("sealed"),
            snapshot=detail.get("snapshot"),
            page_url=detail.get("page_url"),
            epoch=epoch,
        )


@dataclass(frozen=True, init=False)
class MaySend:
    """What the pages of a session may send at any time, with no submit: requests that change
    nothing the agent is answerable for (analytics posts, an autosave of a draft), named by the
    server's operator (``browserworker mcp --may-send``), never by the agent.

    Each rule is a URL glob (any method) or ``"METHOD glob"``, either with a glob of the body
    after it (``'WEBSOCKET */live* *"validate"*'``: only those messages of the socket), as a
    flow's ``sends=``. A staging call lets what they match go (``sends=self``), a submit's gate
    does not count it as the submit's dispatch (``dispatch=self.dispatch``; a socket's message
    only if its rule names its body), and the gap between calls lets it go.
    """

    rules: tuple[str, ...]

    def __init__(self, *rules: str) -> None:
        for rule in rules:
            text = isinstance(rule, str) and rule.strip()
            problem = rule_problem(rule) if text else f"must be a URL glob or 'METHOD glob', not {rule!r}"
            if problem is not None:
                raise ValueError(f"may-send rule {problem}")
        object.__setattr__(self, "rules", tuple(rule.strip() for rule in rules))

    def __call__(self, request: Any) -> bool:
        """Whether ``request`` (a Playwright request, or anything with ``method`` and ``url``) is one of them."""
        return any(is_dispatch(rule, request.method, request.url, request) for rule in self.rules)

    def dispatch(self, request: Any) -> bool:
        """Whether ``request`` counts as a submit's dispatch: what counts by default, but for what
        these rules match. A socket's message is let off only by a rule that names its body: a
        rule naming the socket alone lets its pages use it with no submit, and what a submit's
        click sends over it is the submit's, held until it is journaled."""
        method, url = str(request.method).upper(), request.url
        if not is_dispatch(None, method, url, request):
            return False
        if method != "WEBSOCKET":
            return not self(request)
        bare = ChannelRequest(method, url)  # a rule that matches a message without its body names the socket alone
        return not any(
            is_dispatch(r, method, url, request) and not is_dispatch(r, method, url, bare) for r in self.rules
        )

    def __bool__(self) -> bool:
        return bool(self.rules)


def latest_by_step(attempts: Iterable[AttemptRecord]) -> dict[str, AttemptRecord]:
    """Each step's latest attempt."""
    latest: dict[str, AttemptRecord] = {}
    for a in attempts:
        if a.step_id not in latest or a.attempt_no > latest[a.step_id].attempt_no:
            latest[a.step_id] = a
    return latest


def missed_verifies(events: Iterable[EventRecord]) -> set[str]:
    """The addresses whose verify missed a done submit of the session (its evidence says so)."""
    return {
        str(e.detail["verify_missed"])
        for e in events
        if e.kind == EVIDENCE and isinstance(e.detail, dict) and e.detail.get("verify_missed")
    }


def journaled_calls(events: Iterable[EventRecord]) -> list[Call]:
    """A session's calls from its run's events, in order, each marked undone that was."""
    undone = {e.detail.get("seq") for e in events if e.kind == UNDONE and isinstance(e.detail, dict)}
    calls = [
        Call.from_event(e.detail, e.lease_epoch) for e in events if e.kind == TOOL_CALL and isinstance(e.detail, dict)
    ]
    calls = [replace(c, args=dict(c.args, ok=False)) if c.seq in undone else c for c in calls]
    return sorted(calls, key=lambda c: c.seq)  # a read call is journaled in the background: maybe later


def step_of(
    call: Call,
    value: Callable[[], str | None] = lambda: None,
    *,
    approve: bool = False,
    live_selector: str | None = None,
    acted: Callable[[], None] | None = None,
    may_send: MaySend | None = None,
    downloads: Path | None = None,
    distrust: str | None = None,
) -> Step:
    """The step ``call`` runs as (see the module docstring). ``value`` gives a ``fill``'s secret
    value (unsealed) when the call's own arguments do not hold it; ``approve``: a person approves
    the submit's request first; ``live_selector`` finds the element the agent's ref named in the
    live page (a replay finds it by the target's selector); ``acted`` is called once the step has
    acted on its element (a click done, before what it set off has settled); ``may_send``: what
    its pages may send with no submit (:class:`MaySend`); ``downloads``: the directory the files
    a click or a key press downloads are saved in (none: they are not kept); ``distrust``: why
    what the submit's verify would answer *not done* is *unknown* (see
    :func:`~browserworker.agent._verify.verifier`)."""
    build = _STEP_FNS.get(call.tool)
    if build is None:
        raise ValueError(f"no step for tool {call.tool!r}")
    fn = build(call, _How(value, live_selector, acted, downloads))  # only the function of this call's tool is built
    if call.is_effect:
        fp = call.fingerprint()
        effect = Effect(
            id=call.step_id,
            fn=fn,
            settle=call.verify.settle if call.verify is not None else 3.0,
            fingerprint_fn=lambda inputs, results: fp,
            approve=approve,
            dispatch=may_send.dispatch if may_send else None,
        )
        if call.verify is not None:
            effect.verifier = verifier(call.verify, distrust=distrust)
        return effect
    if call.tool == "submit":
        return Action(id=call.step_id, fn=fn, sends=True)
    return Action(id=call.step_id, fn=fn, sends=may_send if may_send else False)


StepFn = Callable[[StepContext[Any]], Awaitable[Any]]


@dataclass(frozen=True)
class _How:
    """How one call's step function acts (see :func:`step_of`): a fill's secret value, the
    element's live selector, what to call once it acted, where downloads are saved."""

    value: Callable[[], str | None]
    live_selector: str | None
    acted: Callable[[], None] | None
    saves: Path | None


def _selector(call: Call, how: _How) -> str:
    """The selector ``call`` acts on: the live one its ref gave, or (a replay) its target's."""
    if how.live_selector is not None:
        return how.live_selector
    if call.target is None:
        raise ValueError(f"{call.tool} needs a target")
    return call.target.selector


def _navigate(call: Call, how: _How) -> StepFn:
    async def navigate(ctx: StepContext[Any]) -> dict[str, Any]:
        return await go_to(ctx.page, call.args["url"], downloads=how.saves, built=True)

    return navigate


def _back(call: Call, how: _How) -> StepFn:
    async def back(ctx: StepContext[Any]) -> dict[str, Any]:
        return await go_back(ctx.page)

    return back


def _click(call: Call, how: _How) -> StepFn:
    async def click(ctx: StepContext[Any]) -> dict[str, Any]:
        return await click_and_settle(
            ctx.page,
            _selector(call, how),
            acted=how.acted,
            close_opened=True,
            downloads=how.saves,
            click_timeout=ACTION_TIMEOUT,
        )

    return click


def _hover(call: Call, how: _How) -> StepFn:
    async def hover(ctx: StepContext[Any]) -> dict[str, Any]:
        element = ctx.page.locator(_selector(call, how))
        return await settled(
            ctx.page,
            lambda: on_element("hover", element.hover(timeout=ACTION_TIMEOUT * 1000)),
            acted=how.acted,
            close_opened=True,
        )

    return hover


def _fill(call: Call, how: _How) -> StepFn:
    async def fill(ctx: StepContext[Any]) -> None:
        text = call.args.get("value")
        if text is None:
            text = how.value()
        if text is None:
            raise ValueError(f"the secret value of {call.step_id} cannot be read back (no sealing key)")
        field = ctx.page.locator(_selector(call, how))
        if call.args.get("slowly"):  # key by key, as a person types: a field's key handlers see each
            await on_element("fill", field.fill("", timeout=ACTION_TIMEOUT * 1000))
            await field.press_sequentially(text)
        else:
            await on_element("fill", field.fill(text, timeout=ACTION_TIMEOUT * 1000))
        if call.args.get("secret"):  # a secret typed again by a replay: masked as when it was first typed
            await field.evaluate(MARK_SECRET)

    return fill


def _select(call: Call, how: _How) -> StepFn:
    async def select(ctx: StepContext[Any]) -> list[str]:
        choose = ctx.page.locator(_selector(call, how)).select_option(
            call.args["values"], timeout=ACTION_TIMEOUT * 1000
        )
        try:
            return await on_element("choice", choose)
        except PlaywrightError as exc:
            if "not visible" in str(exc):  # a <select> a widget stands in for (select2, Chosen) is hidden
                raise ValueError(
                    "the <select> is hidden: where the page draws a list of its own in its place (select2, "
                    "Chosen, Tom Select), click that list, take a snapshot, and click the option it shows; "
                    "else a tab or a menu may show it"
                ) from None
            if "not a <select>" not in str(exc):
                raise
            raise ValueError(
                "it is not a <select> but a list the page draws itself: click it, take a snapshot, and "
                "click the option it shows"
            ) from None

    return select


def _check(call: Call, how: _How) -> StepFn:
    async def check(ctx: StepContext[Any]) -> None:
        await set_checked(ctx.page, _selector(call, how), bool(call.args.get("checked", True)))

    return check


async def _pressed_in(page: Page, selector: str, key: str, how: _How, **settle: Any) -> dict[str, Any]:
    """Press ``key`` in the element ``selector`` finds and wait as :func:`settled` does (``settle``)."""
    element = page.locator(selector)
    return await settled(
        page,
        lambda: on_element("key press", element.press(key, timeout=ACTION_TIMEOUT * 1000, no_wait_after=True)),
        acted=how.acted,
        **settle,
    )


def _press(call: Call, how: _How) -> StepFn:
    async def press(ctx: StepContext[Any]) -> dict[str, Any]:
        key = call.args["key"]
        if call.target is not None or how.live_selector is not None:
            return await _pressed_in(ctx.page, _selector(call, how), key, how, close_opened=True, downloads=how.saves)
        return await settled(
            ctx.page, lambda: ctx.page.keyboard.press(key), acted=how.acted, close_opened=True, downloads=how.saves
        )

    return press


def _upload(call: Call, how: _How) -> StepFn:
    async def upload(ctx: StepContext[Any]) -> None:
        files = call.args["files"]
        if how.live_selector is None:  # a replay: the content chosen then, or nothing
            problem = await asyncio.to_thread(changed_file, files)
            if problem is not None:
                raise ValueError(problem)
        await choose_files(ctx.page, _selector(call, how), [f["path"] for f in files])

    return upload


KEY_NAME = re.compile(r"(?:(?:Shift|Control|Alt|Meta|ControlOrMeta)\+)*(?:[A-Z][A-Za-z0-9]*|F[0-9]{1,2}|\S)")
"""A key as Playwright names it, with its modifiers: ``Enter``, ``Control+Enter``, ``a``."""


def submit_args(ref: str | None, selector: str | None, idempotent: bool, key: str | None) -> dict[str, Any]:
    """A submit's journaled arguments; ``key``: press this key in the element instead of clicking
    it (a message box that sends on Enter). ValueError for a key with no such name."""
    args: dict[str, Any] = {"ref": ref, "selector": selector, "idempotent": idempotent}
    if key is not None:  # only then: a retry of a submit journaled before keys matches its call
        if not KEY_NAME.fullmatch(key):
            raise ValueError(f"key must be a key's name, with its modifiers if any (Enter, Control+Enter), not {key!r}")
        args["key"] = key
    return args


def _submit(call: Call, how: _How) -> StepFn:
    async def submit(ctx: StepContext[Any]) -> dict[str, Any]:
        key = call.args.get("key")
        if key:  # a message box that sends on Enter: the key, pressed in it, is the submit's act
            return await _pressed_in(ctx.page, _selector(call, how), key, how, confirm=True)
        return await click_and_settle(
            ctx.page, _selector(call, how), acted=how.acted, confirm=True, click_timeout=ACTION_TIMEOUT
        )

    return submit


_STEP_FNS: dict[str, Callable[[Call, _How], StepFn]] = {
    "navigate": _navigate,
    "back": _back,
    "click": _click,
    "hover": _hover,
    "fill": _fill,
    "select": _select,
    "check": _check,
    "press": _press,
    "upload": _upload,
    "submit": _submit,
}
"""Each page-changing tool's step function, built for one call."""


def retried_call(calls: list[Call], key: str | None, asked: Call) -> Call | None:
    """The journaled submit ``asked`` repeats: the one with its effect key; or, with no key given,
    the session's last call when that was a submit asking exactly this (a retry after a lost
    answer). To do the same thing twice on purpose, give two keys."""
    if key is not None:
        return next((c for c in calls if c.tool == "submit" and c.key == key), None)
    last = calls[-1] if calls else None
    if last is not None and last.is_effect and same_call(last, asked):
        return last
    return None


def same_call(prior: Call, asked: Call) -> bool:
    """Whether ``asked`` asks what ``prior`` (journaled) asked: the same arguments and verifier."""
    if prior.args.get("ref") != asked.args.get("ref") or prior.args.get("selector") != asked.args.get("selector"):
        return False
    if bool(prior.args.get("idempotent")) != asked.idempotent or prior.args.get("key") != asked.args.get("key"):
        return False
    if (prior.verify is None) != (asked.verify is None):
        return False
    if prior.verify is None or asked.verify is None:
        return True
    try:
        return asked.verify.resolved(prior.page_url or "") == prior.verify
    except ValueError:
        return False
