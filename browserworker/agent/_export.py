"""An agent's session written as a flow file that runs with no model (``browserworker mcp export``).

Each page-changing call that succeeded becomes a step, in order: navigations, clicks, hovers,
fills, selections, key presses and files chosen as actions; an idempotent submit (a login) as an
action that may send; each done ``submit`` as an effect with the verifier the agent declared.
Read calls (snapshots, finds, extracts, screenshots) and calls that failed or were refused are
left out. A submit whose click sent nothing (the browser's own form checks stopped it, say) is
an action: it only changed the page, and a run fails if it sends. A submit the page showed
errors after (a form re-rendered with them) is an effect with a comment: if the site refused
it, ``browserworker chaos`` finds its verifier broken, and the step is to be deleted.
What the session's pages could send with no submit (its ``--may-send`` rules) the actions may
send too, and the effects do not count as theirs.

The values the agent typed become the flow's inputs, with what was typed as their defaults; a
secret value (a password) becomes a required ``SecretStr`` input and is never written. A typed
value the submit's verifier looks for is the submit's *proof*: a new run must not find the
proof of an earlier one, so by default each run types its own run id there, in the proof's shape
where it has one (an email keeps its domain: ``{run id}@example.com``, as an email field takes
nothing else), or the input given. In a verifier's address the proof is found as the agent
wrote it, or percent-encoded (``%20`` or ``+`` for a space), and a new run's proof is encoded
the same way.
"""

from __future__ import annotations

import keyword
import re
from urllib.parse import quote, quote_plus

from ..errors import ToolCallError
from ..states import AttemptState
from ..store.base import Store
from ._calls import EVIDENCE, STAGING, Call, journaled_calls, latest_by_step
from ._snapshot import Target
from ._verify import VerifySpec, words

__all__ = ["export_flow"]


_DOMAIN = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")


def _email_domain(value: str) -> str | None:
    """The domain of ``value`` if it is an email address."""
    local, at, domain = value.rpartition("@")
    return domain if at and local and " " not in local and _DOMAIN.fullmatch(domain) else None


def _url_forms(value: str) -> dict[str, str]:
    """The ways an address may hold ``value``: as it is, and percent-encoded (a space as ``%20``
    or ``+``), each with the function of :mod:`urllib.parse` that encodes it ("" for none)."""
    forms: dict[str, str] = {}
    for form, how in ((value, ""), (quote(value), "quote"), (quote_plus(value), "quote_plus")):
        forms.setdefault(form, how)
    return forms


_MADE_UP = re.compile(r"[A-Za-z]{0,2}\d+|[A-Za-z]+[-_]\d+|.*[:«»].*|(?=(?:.*[A-Za-z]\d|.*\d[A-Za-z]){3}).{12,}")
"""An element id a framework makes up (NiceGUI's ``c5``, ``input-23``, ``mui-12``, React's
``:r1:``, a generated token): it names no field, the label does (``line1`` is a name)."""


def _field_name(target: Target | None, default: str) -> str:
    """What an input for the value typed into ``target`` is called: the field's ``name``, else its
    id unless the page made the id up (then its label, the name a snapshot shows)."""
    if target is None:
        return default
    if target.field and not (_MADE_UP.fullmatch(target.field) and target.name):
        return target.field
    return target.name or default


def _identifier(text: str, taken: set[str]) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", text).strip("_").lower() or "value"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = f"field_{name}"
    base, n = name, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


class _Writer:
    def __init__(
        self,
        run_id: str,
        calls: list[Call],
        done: set[str],
        may_send: list[str],
        insecure: bool,
        *,
        unsent: frozenset[str] = frozenset(),
        refused: frozenset[str] = frozenset(),
    ) -> None:
        self.run_id = run_id
        self.may_send = may_send
        self.insecure = insecure  # the session accepted any TLS certificate (--ignore-https-errors)
        self.calls = calls
        self.done = done
        self.unsent = unsent  # done submits whose click sent nothing
        self.refused = refused  # done submits the page showed errors after
        self.inputs: list[str] = []  # lines of the Inputs model
        self.values: dict[str, str] = {}  # input name -> the typed value (non-secret)
        self.proofs: set[str] = set()  # inputs a verifier looks for
        self.taken: set[str] = {"ctx", "flow"}
        self.steps: list[str] = []
        self.uploads = False  # a step chooses files (imports choose_files)
        self.encodes: set[str] = set()  # the urllib.parse functions an address's proof is encoded with

    def kept(self) -> list[Call]:
        kept = []
        for call in self.calls:
            if call.is_effect:
                if call.step_id in self.done:
                    kept.append(call)
            elif (call.tool in STAGING or call.tool == "submit") and call.args.get("ok"):
                kept.append(call)
        return kept

    def _find_proofs(self, kept: list[Call]) -> None:
        """The typed values a verifier looks for: found (as whole words) in its text or selector,
        or in its address where no page of the session had it in its own (``admin`` of
        ``/admin/orders?q=R-1`` is the site's, not a proof, even if it was typed as a user name)."""
        shown = [
            str(v) for c in kept if c.verify is not None for v in (c.verify.text, c.verify.selector) if v is not None
        ]
        addresses = [str(v) for c in kept if c.verify is not None for v in (c.verify.url, c.verify.get) if v]
        visited = [str(c.args["url"]) for c in kept if c.tool == "navigate" and c.args.get("url")]
        for c in kept:
            value = c.args.get("value")
            if c.tool != "fill" or not isinstance(value, str) or len(value) < 3:
                continue
            forms = [words(form) for form in _url_forms(value)]  # the first: as typed
            if any(forms[0].search(t) for t in shown) or (
                any(f.search(a) for f in forms for a in addresses)
                and not any(f.search(u) for f in forms for u in visited)
            ):
                self.proofs.add(value)

    def _input(self, call: Call) -> str:
        """The input a fill types; returns the expression that reads it."""
        target = call.target
        name = _identifier(_field_name(target, "value"), self.taken)
        if call.args.get("secret"):
            self.inputs.append(f"    {name}: SecretStr  # typed as a secret: give it with --input {name}=...")
            return f"ctx.inputs.{name}.get_secret_value()"
        value = str(call.args.get("value"))
        if value in self.proofs:
            self.values[name] = value
            fresh = "the run id" + ("@" + domain if (domain := _email_domain(value)) else "")
            self.inputs.append(f"    {name}: str | None = None  # the proof its verifier looks for (default: {fresh})")
            return self._proof(name)
        self.inputs.append(f"    {name}: str = {value!r}")
        self.values[name] = value
        return f"ctx.inputs.{name}"

    def _proof(self, name: str, quote: str = '"') -> str:
        """The expression a new run types for proof input ``name``: the input if given, else the
        run id (with an email's domain, its string in ``quote``s: inside an f-string the other
        kind of quotes than the f-string's own)."""
        domain = _email_domain(self.values[name])
        return f"(ctx.inputs.{name} or ctx.run_id{f' + {quote}@{domain}{quote}' if domain else ''})"

    def _files(self, call: Call) -> str:
        """The input an upload's files are read from (their paths by default); its expression."""
        target = call.target
        name = _identifier(_field_name(target, "files"), self.taken)
        paths = [str(f["path"]) for f in call.args["files"]]
        self.inputs.append(
            f"    {name}: list[str] = {paths!r}  # the files chosen: others with --inputs-json '{{\"{name}\": [...]}}'"
        )
        self.uploads = True
        return f"ctx.inputs.{name}"

    def _template(self, text: str, *, address: bool = False) -> str:
        """``text`` as a Python expression, the typed values in it (as whole words) read from the
        inputs; in an ``address`` (a URL) only the proofs, whose input a new run types anew,
        encoded as the address had it."""
        marks: list[tuple[str, str]] = []
        escaped = text.replace("{", "{{").replace("}", "}}")
        # the proofs first, then the longest values: a value inside another is not taken apart
        for name, value in sorted(self.values.items(), key=lambda kv: (kv[1] not in self.proofs, -len(kv[1]))):
            if len(value) < 3 or (address and value not in self.proofs):
                continue
            for form, how in (_url_forms(value) if address else {value: ""}).items():
                mark = chr(0xE000 + len(marks))
                escaped, n = words(form).subn(mark, escaped)
                if n:
                    marks.append((name, how))
        if not marks:
            return repr(text)
        written = repr(escaped)
        other = "'" if written[0] == '"' else '"'
        for at, (name, how) in enumerate(marks):
            read = self._proof(name, other) if self.values[name] in self.proofs else f"ctx.inputs.{name}"
            if how:
                self.encodes.add(how)
                read = f"{how}({read})"
            written = written.replace(f"\\ue{at:03x}", "{" + read + "}")
        return "f" + written

    def _verify(self, fn: str, spec: VerifySpec) -> list[str]:
        fields = ", ".join(
            f"{k!r}: {self._template(v, address=k in ('url', 'get')) if isinstance(v, str) else repr(v)}"
            for k, v in spec.model_dump(exclude_none=True).items()
        )
        return [
            "",
            "",
            f"@{fn}.verify",
            f"async def {fn}_landed(ctx: StepContext[Inputs]) -> Verdict:",
            f"    return await verifier({{{fields}}})(ctx)",
        ]

    def step(self, call: Call) -> None:
        fn = _identifier(call.step_id, self.taken)
        selector = repr(call.target.selector) if call.target is not None else None
        sig = f"async def {fn}(ctx: StepContext[Inputs])"
        lines = ["", ""]
        if call.is_effect and call.step_id in self.unsent:
            sends = ", sends=MAY_SEND" if self.may_send else ""
            self.steps += lines + [
                "# in the session this submit's click sent nothing (the form's own checks stopped it, say):",
                "# an action here, which changes only the page (a run fails if it sends)",
                f'@flow.step(id="{call.step_id}"{sends})',
                f"{sig} -> None:",
                f"    await {_submitting(call, selector)}",
            ]
            return
        if call.is_effect:
            if call.step_id in self.refused:
                lines += [
                    "# in the session the page showed errors after this submit: if the site refused it, delete",
                    "# this step (browserworker chaos finds its verifier broken: it never sees the effect land)",
                ]
            settle = call.verify.settle if call.verify is not None else 3.0
            dispatch = ", dispatch=MAY_SEND.dispatch" if self.may_send else ""
            lines += [f'@flow.effect(id="{call.step_id}", settle={settle}{dispatch})', f"{sig} -> dict[str, Any]:"]
            lines.append(f"    return await {_submitting(call, selector)}")
            if call.verify is not None:
                lines += self._verify(fn, call.verify)
            self.steps += lines
            return
        sends = ", sends=True" if call.tool == "submit" else (", sends=MAY_SEND" if self.may_send else "")
        lines += [f'@flow.step(id="{call.step_id}"{sends})', f"{sig} -> None:"]
        args = call.args
        if call.tool == "navigate":
            lines.append(f"    await go_to(ctx.page, {self._template(str(args['url']), address=True)})")
        elif call.tool == "back":
            lines.append("    await go_back(ctx.page)")
        elif call.tool == "click":
            lines.append(f"    await click_and_settle(ctx.page, {selector})")
        elif call.tool == "hover":
            lines.append(f"    await settled(ctx.page, ctx.page.locator({selector}).hover)")
        elif call.tool == "submit":
            lines.append(f"    await {_submitting(call, selector)}")
        elif call.tool == "fill" and args.get("slowly"):  # key by key, the field emptied first
            lines.append(f"    await ctx.page.locator({selector}).fill('')")
            lines.append(f"    await ctx.page.locator({selector}).press_sequentially({self._input(call)})")
        elif call.tool == "fill":
            lines.append(f"    await ctx.page.locator({selector}).fill({self._input(call)})")
        elif call.tool == "select":
            lines.append(f"    await ctx.page.locator({selector}).select_option({args['values']!r})")
        elif call.tool == "check":
            lines.append(f"    await set_checked(ctx.page, {selector}, {bool(args.get('checked', True))!r})")
        elif call.tool == "upload":
            lines.append(f"    await choose_files(ctx.page, {selector}, {self._files(call)})")
        elif call.tool == "press":
            press = f"ctx.page.locator({selector})" if selector else "ctx.page.keyboard"
            lines.append(f"    await settled(ctx.page, lambda: {press}.press({args['key']!r}))")
        self.steps += lines

    def source(self, flow_name: str) -> str:
        kept = self.kept()
        if not kept:
            raise ToolCallError(f"session {self.run_id} has no step to export (no page-changing call succeeded)")
        self._find_proofs(kept)
        for call in kept:
            self.step(call)
        head = [
            f'"""Flow exported from the agent session {self.run_id} (browserworker mcp export).',
            "",
            "Run it with no model: browserworker run THIS_FILE [--input NAME=VALUE ...]",
            '"""',
            "",
            "from __future__ import annotations",
            "",
            "from typing import Any",
            *([f"from urllib.parse import {', '.join(sorted(self.encodes))}"] if self.encodes else []),
            "",
            "from pydantic import BaseModel, SecretStr",
            "",
            "from browserworker import Flow, StepContext, Verdict",
            "from browserworker.agent import "
            + ("MaySend, " if self.may_send else "")
            + ("choose_files, " if self.uploads else "")
            + "click_and_settle, go_back, go_to, set_checked, settled, verifier",
            "",
            "",
            "class Inputs(BaseModel):",
            '    """What the agent typed (a secret is never written: give it as an input)."""',
            "",
        ]
        body = self.inputs or ["    pass"]
        context = ', context={"ignore_https_errors": True}' if self.insecure else ""
        flow = ["", "", f'flow = Flow("{flow_name}", inputs=Inputs, undeclared_effects="fail"{context})']
        if self.may_send:  # the session's --may-send rules: its steps let them go, its effects do not count them
            rules = ", ".join(repr(rule) for rule in self.may_send)
            flow += [
                "",
                "# what the pages may send with no effect (the agent server's --may-send)",
                f"MAY_SEND = MaySend({rules})",
            ]
        return "\n".join(head + body + flow + self.steps) + "\n"


def export_flow(store: Store, run_id: str, *, name: str | None = None) -> str:
    """The source of a flow file that does what agent session ``run_id`` did (see the module docstring)."""
    run = store.get_run(run_id)
    if run is None or run.flow_name != "agent":
        raise ToolCallError(f"no agent session {run_id!r}")
    events = store.events(run_id)
    calls = journaled_calls(events)
    latest = latest_by_step(store.attempts(run_id))
    done = {step for step, a in latest.items() if a.state == AttemptState.SUCCEEDED}
    unsent = frozenset(step for step in done if latest[step].dispatched_at is None)
    refused = frozenset(
        str(e.step_id)
        for e in events
        if e.kind == EVIDENCE and isinstance(e.detail, dict) and e.detail.get("errors_shown")
    )
    flow_name = name or re.sub(r"[^A-Za-z0-9_.-]", "-", f"agent-{run_id}")[:64]
    may_send = [str(rule) for rule in run.inputs.get("may_send") or []]
    insecure = bool(run.inputs.get("ignore_https_errors"))
    return _Writer(run_id, calls, done, may_send, insecure, unsent=unsent, refused=refused).source(flow_name)


def _submitting(call: Call, selector: str | None) -> str:
    """The expression a submit's step awaits: its click, or the key it pressed in its element."""
    key = call.args.get("key")
    if key:
        return f"settled(ctx.page, lambda: ctx.page.locator({selector}).press({key!r}), confirm=True)"
    return f"click_and_settle(ctx.page, {selector}, confirm=True)"
