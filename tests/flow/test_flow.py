"""The flow authoring API and flow-file loading (no browser)."""

from __future__ import annotations

import datetime
import decimal
import json
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel, SecretStr

from browserworker import Flow, FlowDefinitionError, FlowLoadError, InputError, Verdict
from browserworker._canonical import canonical_json, fingerprint_of
from browserworker.flow import ChannelRequest, Effect, RecordedResponse, is_dispatch, load_flow, parse_inputs


class Inputs(BaseModel):
    item: str
    quantity: int = 1
    password: SecretStr = SecretStr("x")


def make_flow() -> Flow[Inputs]:
    flow = Flow("f", inputs=Inputs)

    @flow.step
    async def open_form(ctx): ...

    @flow.effect(settle=5, idempotent=True, retries=2)
    async def submit(ctx): ...

    @submit.verify
    async def landed(ctx):
        return Verdict.done()

    return flow


def test_steps_keep_declaration_order_and_options() -> None:
    """Steps run in declaration order; effect options are kept on the step."""
    flow = make_flow()
    assert [s.id for s in flow.steps] == ["open_form", "submit"]
    submit = flow.get("submit")
    assert isinstance(submit, Effect)
    assert (submit.settle, submit.idempotent, submit.retries) == (5.0, True, 2)
    assert submit.verifier is not None and submit.verifier.__qualname__ == "make_flow.<locals>.landed"
    assert [s.id for s in flow.preceding("submit")] == ["open_form"]


def test_explicit_step_id() -> None:
    """`@flow.step(id=...)` overrides the function name."""
    flow = Flow("f")

    @flow.step(id="first")
    async def whatever(ctx): ...

    assert flow.steps[0].id == "first"


def test_duplicate_step_id_names_both_places() -> None:
    """A duplicate id is refused with the file:line of both definitions."""
    flow = Flow("f")

    @flow.step
    async def a(ctx): ...

    with pytest.raises(FlowDefinitionError, match=r"duplicate step id 'a'.*test_flow.py:\d+"):

        @flow.effect(id="a")
        async def b(ctx): ...


def test_verifier_on_an_action_is_refused() -> None:
    """Only effects can have verifiers."""
    flow = Flow("f")

    @flow.step
    async def a(ctx): ...

    with pytest.raises(FlowDefinitionError, match="verifier on action step 'a'"):

        @a.verify
        async def v(ctx): ...


def test_steps_must_be_async() -> None:
    """A plain function is refused with its location."""
    flow = Flow("f")
    with pytest.raises(FlowDefinitionError, match="must be `async def`"):
        flow.step(lambda ctx: None)


def test_validate_inputs_names_each_problem() -> None:
    """Input errors name the field and the problem."""
    flow = make_flow()
    with pytest.raises(InputError, match=r"quantity: .*integer"):
        flow.validate_inputs({"item": "tea", "quantity": "many"})
    with pytest.raises(InputError, match=r"item: Field required"):
        flow.validate_inputs({})
    assert flow.validate_inputs({"item": "tea", "quantity": "3"}).quantity == 3


def test_fingerprint_is_stable_and_input_sensitive() -> None:
    """The fingerprint depends on flow, step and inputs, never on secret values."""
    flow = make_flow()
    step = flow.get("submit")
    a = flow.fingerprint(step, flow.validate_inputs({"item": "tea"}), {})
    assert a == flow.fingerprint(step, flow.validate_inputs({"item": "tea"}), {})
    assert a != flow.fingerprint(step, flow.validate_inputs({"item": "coffee"}), {})
    assert a != flow.fingerprint(flow.get("open_form"), flow.validate_inputs({"item": "tea"}), {})
    assert a == flow.fingerprint(step, flow.validate_inputs({"item": "tea", "password": "other"}), {})


def test_canonical_json_writes_what_the_stdlib_encoder_writes() -> None:
    """canonical_json reuses one C encoder instead of building one per call; the bytes (so
    every fingerprint already journaled) stay those of the stdlib encoder with the same
    settings: sorted keys, no spaces, unicode kept, unknown objects as str()."""
    stdlib = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    values = [
        None,
        True,
        3,
        -0.0,
        1e300,
        float("inf"),
        'é\u2028"\\',
        [1, "a", None],
        (1, {"u": 2}),
        {"b": 1, "a": [{"z": 2, "y": None}]},
        {"when": datetime.date(2020, 1, 2)},
        {2: "b", 1: "a"},
        {"dec": decimal.Decimal("1.10")},
        {"big": 2**70},
        {1.5: "x"},
    ]
    for value in values:
        assert canonical_json(value) == stdlib.encode(value)
    assert fingerprint_of({"item": "tea", "qty": 2}) == (
        "940d57aaaceef22c396f1fb9a44be97074e585106e76fb96892efdee89cf4a7a"
    )
    with pytest.raises(TypeError):
        canonical_json({1: "a", "b": 2})  # keys that do not sort, as with the stdlib


def test_secret_fields_come_from_secretstr_and_redact() -> None:
    """SecretStr fields and names given in redact= are secret."""
    flow = Flow("f", inputs=Inputs, redact=["item"])
    assert flow.secret_fields() == {"password", "item"}


def test_confirm_predicate_booleans_become_verdicts() -> None:
    """confirm may return a bool, a Verdict or None."""
    flow = Flow("f")

    @flow.effect(confirm=lambda r: r.status == 303)
    async def submit(ctx): ...

    ok = RecordedResponse(status=303, url="u", method="POST", headers={"location": "/orders/1"})
    bad = RecordedResponse(status=200, url="u", method="POST", headers={})
    assert submit.judge(ok) == Verdict.done()
    assert submit.judge(bad).kind == "not_done"


def test_default_dispatch_rule() -> None:
    """By default every method but GET/HEAD/OPTIONS is a dispatch; a URL glob matches its URLs
    whatever the method (GETs too); ``"METHOD glob"`` also names the methods."""
    flow = Flow("f")

    @flow.effect
    async def a(ctx): ...

    @flow.effect(dispatch="*/api/*")
    async def b(ctx): ...

    @flow.effect(dispatch="POST|PUT */api/*")
    async def c(ctx): ...

    @flow.effect(dispatch=lambda request: request.method == "WEBSOCKET")
    async def d(ctx): ...

    assert a.is_dispatch("POST", "http://x/orders") and not a.is_dispatch("GET", "http://x/orders")
    assert a.is_dispatch("WEBSOCKET", "ws://x/socket")  # a message the page sends
    assert b.is_dispatch("PUT", "http://x/api/orders") and not b.is_dispatch("POST", "http://x/track")
    assert b.is_dispatch("GET", "http://x/api/orders/new")
    assert c.is_dispatch("put", "http://x/api/orders") and not c.is_dispatch("GET", "http://x/api/orders")
    assert d.is_dispatch("WEBSOCKET", "ws://x/") and not d.is_dispatch("POST", "http://x/")  # predicates see channels


def test_a_rule_may_name_the_body_it_matches() -> None:
    """A glob after a rule's URL glob is matched against the body: a socket's message (a
    ``ChannelRequest``'s text or bytes), a browser request's ``post_data_buffer``; the rest of
    the rule, spaces and all, is that glob. Where no body can be read (a GET, an API call) a rule
    with a body glob does not match."""

    class Posted:  # what a Playwright request shows of its body
        def __init__(self, body: bytes | None) -> None:
            self.method, self.url, self.post_data_buffer = "POST", "http://x/update", body

    flow = Flow("f")
    live = flow.step(id="live", sends='WEBSOCKET */live* *"event":"validate"*')(_noop)
    updates = flow.step(id="updates", sends='POST */update *"calls": []*')(_noop)
    typed = ChannelRequest("WEBSOCKET", "ws://x/live", '["4","5","lv:1","event",{"event":"validate"}]')
    saved = ChannelRequest("WEBSOCKET", "ws://x/live", b'["4","6","lv:1","event",{"event":"save"}]')
    assert live.declares("WEBSOCKET", "ws://x/live", typed)
    assert not live.declares("WEBSOCKET", "ws://x/live", saved)
    assert not live.declares("WEBSOCKET", "ws://x/live"), "no body to read: not matched"
    assert updates.declares("POST", "http://x/update", Posted(b'{"updates": {"t": 1}, "calls": []}'))
    assert not updates.declares("POST", "http://x/update", Posted(b'{"updates": {}, "calls": [{"m": "save"}]}'))
    assert not updates.declares("POST", "http://x/update", Posted(None))
    assert not updates.declares("PUT", "http://x/update", Posted(b'"calls": []'))  # the method still counts

    @flow.effect(dispatch="POST */update *save*")
    async def save(ctx): ...

    assert save.is_dispatch("POST", "http://x/update", Posted(b'{"calls": [{"m": "save"}]}'))
    assert not save.is_dispatch("POST", "http://x/update", Posted(b'{"calls": []}'))


def test_a_report_the_browser_sends_of_its_own_is_no_dispatch() -> None:
    """A Content-Security-Policy violation report (a POST Chromium makes of its own, resource type
    ``other``, of type ``application/csp-report``; or the Reporting API's) counts as no send by
    default: not held in an effect, not refused in an action. A script's fetch or XHR of the
    same type is the page's own send and counts; a rule the flow gives still decides alone."""

    class Sent:  # what a Playwright request shows of its kind and headers
        def __init__(self, resource_type: str, content_type: str) -> None:
            self.method, self.url, self.resource_type = "POST", "http://x/csp", resource_type
            self.headers = {"content-type": content_type}

    flow = Flow("f")

    @flow.effect()
    async def anything(ctx): ...

    @flow.effect(dispatch="POST */csp*")
    async def named(ctx): ...

    report = Sent("other", "application/csp-report")
    assert not is_dispatch(None, "POST", "http://x/csp", report)
    assert not is_dispatch(None, "POST", "http://x/csp", Sent("other", "application/reports+json; charset=utf-8"))
    assert not anything.is_dispatch("POST", "http://x/csp", report)
    assert is_dispatch(None, "POST", "http://x/csp", Sent("fetch", "application/csp-report")), "a script's own"
    assert is_dispatch(None, "POST", "http://x/csp", Sent("xhr", "application/csp-report"))
    assert is_dispatch(None, "POST", "http://x/csp", Sent("other", "text/plain")), "a ping, say"
    assert named.is_dispatch("POST", "http://x/csp", report), "the flow's rule decides"


def test_bad_dispatch_and_sends_rules_are_refused_at_load() -> None:
    """A rule that is neither a glob, ``"METHOD glob"`` nor a predicate fails where it is declared."""
    flow = Flow("f")
    for bad in ("", "POST ", 42):
        with pytest.raises(FlowDefinitionError, match="dispatch="):
            flow.effect(dispatch=bad)(_noop)  # type: ignore[arg-type]
    with pytest.raises(FlowDefinitionError, match="sends="):
        flow.step(sends="   ")(_noop)


async def _noop(ctx: object) -> None: ...


def test_sends_declares_only_what_it_matches() -> None:
    """``sends=True`` declares any request; a glob or ``"METHOD glob"`` only the ones it matches
    (the rest are still undeclared side effects); ``False`` none."""
    flow = Flow("f")
    anything = flow.step(id="anything", sends=True)(_noop)
    login = flow.step(id="login", sends="POST */login*")(_noop)
    search = flow.step(id="search", sends=lambda request: "/search" in request.url)(_noop)
    nothing = flow.step(id="nothing")(_noop)
    assert anything.declares("POST", "http://x/orders")
    assert login.declares("POST", "http://x/login?next=/") and not login.declares("POST", "http://x/orders")
    assert not login.declares("PUT", "http://x/login")
    assert search.declares("POST", "http://x/search") and not search.declares("WEBSOCKET", "ws://x/")
    assert not nothing.declares("POST", "http://x/login")


def write(tmp_path: Path, text: str, name: str = "flow.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_load_flow_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    """A syntax error is reported as file:line."""
    path = write(tmp_path, "from browserworker import Flow\nflow = Flow('x'\n\ndef (:\n")
    with pytest.raises(FlowLoadError, match=rf"{path}:\d+: syntax error"):
        load_flow(path)


def test_load_flow_import_error_names_line(tmp_path: Path) -> None:
    """An exception raised while importing the flow names the line in the flow file."""
    path = write(tmp_path, "from browserworker import Flow\nflow = Flow('x')\nraise ValueError('boom')\n")
    with pytest.raises(FlowLoadError, match=rf"{path}:3: ValueError: boom"):
        load_flow(path)


def test_load_flow_missing_and_empty(tmp_path: Path) -> None:
    """Missing file, no Flow, no steps: each a clear error."""
    with pytest.raises(FlowLoadError, match="no such flow file"):
        load_flow(tmp_path / "nope.py")
    with pytest.raises(FlowLoadError, match="no Flow defined"):
        load_flow(write(tmp_path, "x = 1\n"))
    with pytest.raises(FlowLoadError, match="has no steps"):
        load_flow(write(tmp_path, "from browserworker import Flow\nflow = Flow('x')\n", "empty.py"))


def test_load_flow_two_flows_need_a_name(tmp_path: Path) -> None:
    """Two flows in one file need --flow; an unknown name lists the known ones."""
    path = write(
        tmp_path,
        """
        from browserworker import Flow
        a = Flow('a')
        b = Flow('b')
        @a.step
        async def s(ctx): ...
        @b.step
        async def t(ctx): ...
    """,
    )
    with pytest.raises(FlowLoadError, match=r"defines 2 flows \(a, b\)"):
        load_flow(path)
    assert load_flow(path, "b").flow.name == "b"
    with pytest.raises(FlowLoadError, match="no flow named 'c'"):
        load_flow(path, "c")


def test_load_flow_definition_error_points_at_the_flow_file(tmp_path: Path) -> None:
    """A duplicate step id in a flow file is reported with that file's line."""
    path = write(
        tmp_path,
        """
        from browserworker import Flow
        flow = Flow('x')
        @flow.step
        async def s(ctx): ...
        @flow.step(id='s')
        async def t(ctx): ...
    """,
    )
    with pytest.raises(FlowDefinitionError, match=rf"{path}:\d+: duplicate step id 's'"):
        load_flow(path)


def test_parse_inputs() -> None:
    """--input pairs override --inputs-json; malformed values are refused."""
    assert parse_inputs(["a=1", "b=x=y"], '{"a": 0, "c": true}') == {"a": "1", "b": "x=y", "c": True}
    for bad_pairs, bad_json in ((["novalue"], None), (["=x"], None), ([], "[1]"), ([], "{oops")):
        with pytest.raises(InputError):
            parse_inputs(bad_pairs, bad_json)
