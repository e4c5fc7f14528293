"""The MCP server (``browserworker mcp``): the agent tools of :mod:`browserworker.agent` on the
official MCP SDK, over stdio (what desktop and IDE clients launch) or streamable HTTP.

Every tool but ``open_session`` takes the ``run_id`` that ``open_session`` gave. Each tool's
annotations say what it may do: read tools are read-only; staging tools change only the page
(``destructiveHint`` false) and are refused any request that would change the world; ``submit``
is the one destructive tool, and it is idempotent per effect key (a retry is answered from the
journal). A failed call answers a tool error that says why, with nothing half-done.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError, ValidatorFunctionWrapHandler, WithJsonSchema, WrapValidator

from ..agent import AgentService, AskPerson, PersonDecision
from ..errors import BrowserworkerError
from ..store.records import ApprovalRecord

__all__ = ["INSTRUCTIONS", "build_server"]

T = TypeVar("T")

INSTRUCTIONS = """Durable browser tools: each session is a journaled run that survives a crash of
this server. Start with open_session(site) and pass its run_id to every other tool. Read the page
with snapshot (element refs like e12; wait_for a text that comes later), prepare it with
navigate/click/fill/select/check/press (they never send a form: a click that would POST is stopped
and you are told to use submit), and change the world only with submit(ref, effect_key, verify). If
a submit call fails in transit, call it again with the same arguments: the answer comes from the
journal (committed, verified, not_applied, needs_review, awaiting_approval), never from a second
click."""

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
STAGING = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
EFFECT = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True)
SESSION = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)


def _none_or_text(value: Any, handler: ValidatorFunctionWrapHandler) -> str | None:
    return None if value is None else handler(value)


if TYPE_CHECKING:
    Text = str | None
else:
    Text = Annotated[
        str, WrapValidator(_none_or_text), WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]})
    ]
"""A text argument that may be left out (None), taken exactly as the agent wrote it. Its annotation
is ``str`` for the SDK, which first parses as JSON every argument not annotated ``str`` (for
clients that send a list as a string): as ``str | None``, ``wait_for(text='{"ok": true}')``
would reach the tool as a dict and be refused, and ``effect_key='null'`` would be None."""

RunId = Annotated[str, Field(description="the run id open_session gave")]
Ref = Annotated[Text, Field(description="an element ref from the last snapshot, e.g. e12")]
Selector = Annotated[Text, Field(description="a CSS or Playwright selector, instead of a ref")]


async def _answer(work: Awaitable[T]) -> T:
    """A browserworker error is the tool's error, said as it is."""
    try:
        return await work
    except BrowserworkerError as exc:
        raise ToolError(str(exc)) from None


def build_server(service: AgentService, *, name: str = "browserworker", ask_in_client: bool = False) -> MCPServer[Any]:
    """An MCP server whose tools drive ``service``'s sessions (the caller closes the service).
    With ``ask_in_client``, a submit held for a person's approval is also put to the person in
    the agent's client, where it can ask (form elicitation): :class:`_Client`.

    The SDK's OpenTelemetry spans are kept if a tracer provider is configured when the server is
    built (:func:`_tracing_configured`), and left out otherwise."""

    server: MCPServer[Any] = MCPServer(name, instructions=INSTRUCTIONS)
    if not _tracing_configured():
        _leave_out_spans(server)
    _session_tools(server, service)
    _read_tools(server, service)
    _staging_tools(server, service)
    _effect_tools(server, service, ask_in_client)
    return server


def _tracing_configured() -> bool:
    """Whether an OpenTelemetry tracer provider is configured in this process now (set by the
    application, by ``opentelemetry-instrument``, or named by ``OTEL_PYTHON_TRACER_PROVIDER``)."""
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _leave_out_spans(server: MCPServer[Any]) -> None:
    """Take the SDK's OpenTelemetry middleware out of ``server``'s chain. It wraps every message in
    a span, which nothing records while no tracer provider is configured, and it costs a tool call
    about a fifth of the SDK's own round trip (0.2 ms a call, around a call that awaits the
    browser). Found by its class's name: a later SDK that renames it keeps it, as it keeps any
    other middleware."""
    server.middleware[:] = [m for m in server.middleware if type(m).__name__ != "OpenTelemetryMiddleware"]


class _Approval(BaseModel):
    """What the person asked answers (a form of primitive fields, as elicitation takes)."""

    approve: bool = Field(description="send this request")
    reason: str = Field(default="", description="why not, if not")


_SHOWN_MAX = 1500  # characters of the request a question shows (the console shows it all)
_ASKED = "approve_submit"  # the key of the question in a round's input requests (2026-07-28)


class _Client:
    """The person at one call's MCP client, asked to approve a held submit by form elicitation,
    if the client takes it: during the call where the protocol lets the server ask mid-call
    (:meth:`mid_call`, up to 2025-11-25), else by ending the call with the question for the
    client to ask and call again with the answer (:meth:`question`, :meth:`answered`;
    2026-07-28). ``decline`` is a no; a dismissed question (``cancel``), a client error or an
    answer outside the form leaves the decision to the console."""

    def __init__(self, ctx: Context[Any, Any]) -> None:
        self.ctx = ctx
        params = ctx.session.client_params
        client = params.client_info.name[:80] if params is not None else "an MCP client"  # the client's own word
        self.who = f"{client} (asked in the MCP client)"

    @classmethod
    def of(cls, ctx: Context[Any, Any]) -> _Client | None:
        """The call's client, if it takes form elicitation (a capability naming no mode is form's)."""
        capabilities = ctx.client_capabilities
        elicitation = capabilities.elicitation if capabilities is not None else None
        if elicitation is None or (elicitation.form is None and elicitation.url is not None):
            return None
        return cls(ctx)

    @property
    def mid_call(self) -> AskPerson | None:
        """How to ask during this call, if the protocol lets the server send the client a request."""
        if not self.ctx.session.can_send_request:
            return None

        async def ask(approval: ApprovalRecord, link: str) -> PersonDecision | None:
            try:
                answer = await self.ctx.elicit(_question(approval, link), _Approval)
            except Exception:  # the client could not ask, or answered outside the form
                return None
            return self._decision(answer.action, answer.data.model_dump() if answer.action == "accept" else None)

        return ask

    @property
    def replied(self) -> bool:
        """Whether this call brings back an answer to an earlier round's question (a dismissal
        too: the person is not asked again in this call)."""
        responses = self.ctx.input_responses
        return responses is not None and _ASKED in responses

    def answered(self) -> PersonDecision | None:
        """The person's decision this call brings back to an earlier round's question, if any."""
        responses = self.ctx.input_responses
        answer = responses.get(_ASKED) if responses else None
        return self._decision(answer.action, answer.content) if isinstance(answer, ElicitResult) else None

    def question(self, approval: ApprovalRecord, link: str) -> InputRequiredResult:
        """The call's end that has the client ask its person, then call again with the answer."""
        params = ElicitRequestFormParams(
            message=_question(approval, link), requested_schema=render_elicitation_schema(_Approval)
        )
        return InputRequiredResult(input_requests={_ASKED: ElicitRequest(params=params)})

    def _decision(self, action: str, content: Any) -> PersonDecision | None:
        if action == "decline":
            return PersonDecision(False, self.who, "declined in the MCP client")
        if action != "accept":
            return None
        try:
            data = _Approval.model_validate(content or {})
        except ValidationError:
            return None
        return PersonDecision(data.approve, self.who, data.reason or None)


def _question(approval: ApprovalRecord, link: str) -> str:
    """The request held, as a person is asked about it: method and URL, then what it sends."""
    summary = approval.summary
    lines = [f"Approve this submit? It sends {summary.get('method', '?')} {summary.get('url', '?')}"]
    if "fields" in summary:
        lines += [f"  {k}: {v}" for k, v in summary["fields"]]
    elif "json" in summary:
        lines.append(f"  {json.dumps(summary['json'], ensure_ascii=False)}")
    elif "body" in summary:
        lines.append(f"  {summary['body']}")
    shown = "\n".join(lines)
    if len(shown) > _SHOWN_MAX:
        shown = shown[:_SHOWN_MAX] + "…"
    return f"{shown}\nThe page as it was about to send it, and the whole request: {link}"


def _session_tools(server: MCPServer[Any], service: AgentService) -> None:
    @server.tool(annotations=SESSION)
    async def open_session(
        site: Annotated[str, Field(description="the URL to start at")],
        session_key: Annotated[
            Text, Field(description="a saved login to start from (and save_login to save under)")
        ] = None,
    ) -> dict[str, Any]:
        """Open a durable browser session at `site`: a new run. Returns its run_id."""
        return await _answer(service.open_session(site, session_key))

    @server.tool(annotations=SESSION)
    async def resume(run_id: RunId) -> dict[str, Any]:
        """Come back to a session after a reconnect or a server restart: its page re-opened where it
        was (its actions replayed), its submits not redone."""
        return await _answer(service.resume(run_id))

    @server.tool(annotations=READ)
    async def status(run_id: RunId) -> dict[str, Any]:
        """The session's state and each submit's, from the journal."""
        return await _answer(service.status(run_id))

    @server.tool(annotations=SESSION)
    async def save_login(run_id: RunId) -> dict[str, Any]:
        """Save the signed-in state under the session's session_key (sealed) for later sessions."""
        return await _answer(service.save_login(run_id))

    @server.tool(annotations=SESSION)
    async def close_session(run_id: RunId) -> dict[str, Any]:
        """End the session: its run SUCCEEDED, its browser context closed."""
        return await _answer(service.close_session(run_id))


def _read_tools(server: MCPServer[Any], service: AgentService) -> None:
    @server.tool(annotations=READ, structured_output=False)  # the text is the answer: sent once
    async def snapshot(run_id: RunId) -> str:
        """The page as text: roles, names and element refs (refs of older snapshots go stale)."""
        answer = await _answer(service.snapshot(run_id))
        return f"run_id: {run_id}\n{answer['snapshot']}" + "".join(f"\n- note: {n}" for n in answer.get("notes", []))

    @server.tool(annotations=READ)
    async def find(run_id: RunId, text: Annotated[str, Field(description="text to look for")]) -> dict[str, Any]:
        """The snapshot lines (with refs) that contain `text`."""
        return await _answer(service.find(run_id, text))

    @server.tool(annotations=READ)
    async def extract(run_id: RunId, ref: Ref = None, selector: Selector = None) -> dict[str, Any]:
        """The text of an element (or of the whole page, given neither ref nor selector)."""
        return await _answer(service.extract(run_id, ref, selector))

    @server.tool(annotations=READ)
    async def wait_for(
        run_id: RunId,
        text: Annotated[Text, Field(description="wait until the page shows this text")] = None,
        gone: Annotated[Text, Field(description="or: wait until it no longer shows this text")] = None,
        timeout: Annotated[float, Field(description="seconds, at most 30")] = 10.0,
    ) -> dict[str, Any]:
        """Wait for what a page shows later (results fetched as you typed, a message pushed over a
        socket, a result written into a text box, a spinner to go). Answers met: true, or met:
        false once the timeout has passed."""
        return await _answer(service.wait_for(run_id, text, gone, timeout))

    @server.tool(annotations=READ)
    async def screenshot(run_id: RunId) -> Image:
        """A PNG of the page as it is."""
        return Image(data=await _answer(service.screenshot(run_id)), format="png")

    @server.tool(annotations=STAGING)
    async def navigate(
        run_id: RunId, url: Annotated[str, Field(description="absolute, or relative to the page")]
    ) -> dict[str, Any]:
        """Go to `url` (a GET)."""
        return await _answer(service.navigate(run_id, url))

    @server.tool(annotations=STAGING)
    async def back(run_id: RunId) -> dict[str, Any]:
        """Go back to the page before this one (the browser's Back button)."""
        return await _answer(service.back(run_id))


def _staging_tools(server: MCPServer[Any], service: AgentService) -> None:
    stage: Callable[..., Awaitable[dict[str, Any]]] = service.stage

    @server.tool(annotations=STAGING)
    async def click(run_id: RunId, ref: Ref = None, selector: Selector = None) -> dict[str, Any]:
        """Click an element that changes only the page (a link, a tab, a menu). A click that would
        send a form is stopped, nothing sent: use submit for it. A confirm dialog it opens is
        dismissed (what it guards is not done); a new tab it opens is closed and its address
        given (opened): navigate there to follow it."""
        return await _answer(stage(run_id, "click", {}, ref, selector))

    @server.tool(annotations=STAGING)
    async def hover(run_id: RunId, ref: Ref = None, selector: Selector = None) -> dict[str, Any]:
        """Move the mouse over an element (a menu that opens on hover, a tooltip); take a new
        snapshot to see what it shows."""
        return await _answer(stage(run_id, "hover", {}, ref, selector))

    @server.tool(annotations=STAGING)
    async def fill(
        run_id: RunId,
        value: Annotated[str, Field(description="the text to type")],
        ref: Ref = None,
        selector: Selector = None,
        secret: Annotated[bool, Field(description="a secret: sealed in the journal, never shown")] = False,
        slowly: Annotated[
            bool, Field(description="key by key, for a field that reacts to each key (an input mask, suggestions)")
        ] = False,
    ) -> dict[str, Any]:
        """Type `value` into a field, replacing what it holds (a password field's value is kept secret
        whatever `secret` says)."""
        args: dict[str, Any] = {"value": value, "slowly": True} if slowly else {"value": value}
        return await _answer(stage(run_id, "fill", args, ref, selector, secret=secret))

    @server.tool(annotations=STAGING)
    async def select(
        run_id: RunId,
        values: Annotated[list[str], Field(description="option values or labels")],
        ref: Ref = None,
        selector: Selector = None,
    ) -> dict[str, Any]:
        """Choose options of a select element."""
        return await _answer(stage(run_id, "select", {"values": values}, ref, selector))

    @server.tool(annotations=STAGING)
    async def check(run_id: RunId, ref: Ref = None, selector: Selector = None, checked: bool = True) -> dict[str, Any]:
        """Check (or, with checked=false, uncheck) a checkbox or radio button."""
        return await _answer(stage(run_id, "check", {"checked": checked}, ref, selector))

    @server.tool(annotations=STAGING)
    async def press(
        run_id: RunId,
        key: Annotated[str, Field(description="a key, e.g. Enter, Tab, ArrowDown, Control+A")],
        ref: Ref = None,
        selector: Selector = None,
    ) -> dict[str, Any]:
        """Press a key (in an element, or the page). A key that would send a form is stopped: use submit."""
        return await _answer(stage(run_id, "press", {"key": key}, ref, selector))

    @server.tool(annotations=STAGING)
    async def upload(
        run_id: RunId,
        paths: Annotated[
            list[str],
            Field(
                description="the files to choose, in a directory the server uploads from (its operator's "
                "browserworker mcp --files DIR); a relative path is in the first one"
            ),
        ],
        ref: Ref = None,
        selector: Selector = None,
    ) -> dict[str, Any]:
        """Choose files for a file input (<input type=file>), or for the file chooser that clicking
        the element opens (an "Attach" button). Nothing is sent: the form's submit sends them."""
        return await _answer(service.upload(run_id, paths, ref, selector))


def _effect_tools(server: MCPServer[Any], service: AgentService, ask_in_client: bool) -> None:
    @server.tool(annotations=EFFECT)
    async def submit(
        ctx: Context[Any, Any],
        run_id: RunId,
        ref: Ref = None,
        selector: Selector = None,
        effect_key: Annotated[
            Text,
            Field(description="your key for this effect (default: derived from the run and the call's position)"),
        ] = None,
        verify: Annotated[
            dict[str, Any] | None,
            Field(
                description='how to tell it landed after a crash: {"url": ..., "text"|"selector": ...} (a text '
                'as whole words: a unique reference you typed) or {"get": ..., "path": ...}; either may add '
                '"absent_status": 404 where the address answers 404 exactly when the effect did not land (a '
                "REST API's record). It is read once the submit is done, and one that misses it is told. Without a "
                "verify an uncertain submit goes to a person"
            ),
        ] = None,
        idempotent: Annotated[
            bool, Field(description="safe to repeat (a login, a search): re-run on replay, no effect key")
        ] = False,
        key: Annotated[
            Text,
            Field(
                description="press this key in the element instead of clicking it: a message box that sends "
                'on Enter ("Enter", "Control+Enter")'
            ),
        ] = None,
    ) -> dict[str, Any] | InputRequiredResult:
        """Click the element that changes the world (places the order, sends the form), exactly once
        (or press ``key`` in it: a message box that sends on Enter).
        A confirm dialog it opens ("Place this order?") is accepted: the submit is the decision.
        The answer's status: committed, verified, not_applied (it had not gone out; done now, once),
        needs_review, awaiting_approval, conflict (the key was used with other arguments), failed."""
        person = _Client.of(ctx) if ask_in_client else None
        answered = person.answered() if person is not None else None
        if answered is not None:  # the answer to the question this call's last round ended with
            await _answer(service.decide_approval(run_id, answered))
        ask = person.mid_call if person is not None else None
        # a person asked only once the call has ended is asked at once: the session parks at once
        hold = 0.0 if person is not None and ask is None else None
        answer = await _answer(
            service.submit(run_id, ref, selector, effect_key, verify, idempotent, key=key, ask=ask, hold=hold)
        )
        if person is not None and ask is None and not person.replied and answer.get("status") == "awaiting_approval":
            held_request = await _answer(service.held_approval(run_id))
            if held_request is not None:
                return person.question(held_request, service.policy.link(run_id))
        return answer
