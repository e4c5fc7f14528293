"""The rules of agent sessions that need no browser: verifiers as data, which journaled submit a
call repeats, what a done submit's answer says (read from its attempts alone), and what the
server lets pages send with no submit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from browserworker.agent import AgentPolicy, MaySend, VerifySpec, submit_status
from browserworker.agent._answers import loads, sent_between, stopped
from browserworker.agent._calls import Call, retried_call, same_call, step_of
from browserworker.agent._export import _Writer
from browserworker.agent._snapshot import Target
from browserworker.agent._verify import parse_verify, shows
from browserworker.flow import Action, ChannelRequest, Effect
from browserworker.runtime import SentBetween, StepOutcome
from browserworker.states import AttemptState
from browserworker.store.records import AttemptRecord


@pytest.mark.parametrize(
    ("body", "text", "found"),
    [
        ("Order R-1 placed", "R-1", True),
        ("(R-1), R-1.", "R-1", True),
        ("R-10 tea x2", "R-1", False),  # a search for R-1 lists R-10
        ("ref C-after_dispatch_commit", "C-after_dispatch", False),
        ("AR-1", "R-1", False),
        ("10 results (12 total)", "0 results", False),
        ("0 results (12 total)", "0 results", True),
        ("Total: $5.00", "$5.00", True),
        ("Total:$5.00", "$5.00", True),  # a text that starts with no letter or digit asks for no boundary
        ("订单已下单成功", "已下单", True),  # words written without spaces between them
        ("Order placed", "order placed", False),  # case counts, as before
        ("anything", "", False),
    ],
)
def test_a_verifiers_text_is_found_as_whole_words(body: str, text: str, found: bool) -> None:
    """A verifier's ``text`` (and ``absent_text``) counts only as whole words: another
    submit's reference that contains this one's (a search page lists both) is no proof, and
    "10 results" does not say "0 results"."""
    assert shows(body, text) is found


def test_a_verify_is_a_page_with_its_proof_or_a_get_with_a_path() -> None:
    """Either url (with text or selector, and optionally the text that proves it did not land) or
    get (with path), either with the client error status that proves it did not land; anything
    else is refused with what is wrong."""
    assert parse_verify({"url": "/orders", "text": "R-1"}).text == "R-1"
    assert parse_verify({"get": "/api/orders?reference=R-1", "path": "orders"}).path == "orders"
    assert parse_verify({"url": "/orders", "text": "R-1"}).wait == 5.0
    assert parse_verify({"get": "/api/orders/R-1", "path": "id", "absent_status": 404}).absent_status == 404
    assert parse_verify({"url": "/orders", "text": "R-1", "wait": 20}).to_dict()["wait"] == 20
    for bad, said in (
        ({"url": "/orders"}, "text or selector"),
        ({"get": "/x", "text": "y"}, "get takes path"),
        ({"url": "/a", "get": "/b", "text": "t"}, "either url"),
        ({}, "either url"),
        ({"url": "/a", "text": "t", "colour": "red"}, "colour"),
        ({"url": "/a", "text": "t", "settle": -1}, "settle"),
        ({"url": "/a", "text": "t", "wait": 600}, "wait"),
        ({"get": "/a", "path": "p", "absent_status": 200}, "absent_status"),  # only an error status
        ({"get": "/a", "path": "p", "absent_status": 503}, "absent_status"),  # a server's error proves nothing
        ("/orders", "must be an object"),
    ):
        with pytest.raises(ValueError, match="verify") as raised:
            parse_verify(bad)
        assert said in str(raised.value), (bad, str(raised.value))


def test_a_verify_url_is_made_absolute_against_the_submits_page() -> None:
    """Relative URLs resolve against the page the submit is made on; a non-http one is refused."""
    spec = parse_verify({"get": "/api/orders?reference=R", "path": "orders"}).resolved("http://shop.test/orders/new")
    assert spec.get == "http://shop.test/api/orders?reference=R"
    with pytest.raises(ValueError, match="http"):
        parse_verify({"url": "javascript:alert(1)", "text": "x"}).resolved("http://shop.test/")


def test_a_call_survives_the_journal() -> None:
    """A call written as a journal event reads back the same (its epoch is the event's own)."""
    call = Call(
        seq=7,
        tool="submit",
        args={"ref": "e18", "selector": None, "idempotent": False},
        target=Target(selector="#submit", role="button", name="Place order", tag="button", type="submit"),
        key="order-1",
        verify=VerifySpec(get="http://shop.test/api/orders", path="orders"),
        snapshot="- button [ref=e18]",
        page_url="http://shop.test/orders/new",
    )
    back = Call.from_event(call.to_event(), epoch=3)
    assert back == Call(**{**call.__dict__, "epoch": 3})
    assert back.step_id == "t0007.submit" and back.is_effect
    assert not Call(1, "submit", {"idempotent": True}).is_effect


def _asked(verify: dict[str, Any] | None = None, ref: str = "e18") -> Call:
    spec = parse_verify(verify) if verify is not None else None
    return Call(0, "submit", {"ref": ref, "selector": None, "idempotent": False}, verify=spec)


def test_which_journaled_submit_a_call_repeats() -> None:
    """With a key: the submit journaled under it (same arguments: a retry; others: a conflict).
    Without: the session's last call, if it was this very submit (a lost answer retried); a
    relative verify URL matches the absolute one it was journaled as."""
    verify = {"get": "/api/orders?reference=R", "path": "orders"}
    journaled = Call(
        5,
        "submit",
        {"ref": "e18", "selector": None, "idempotent": False},
        key="k",
        verify=parse_verify(verify).resolved("http://shop.test/orders/new"),
        page_url="http://shop.test/orders/new",
    )
    fill = Call(6, "fill", {"value": "x"})
    assert retried_call([journaled], "k", _asked(verify)) is journaled and same_call(journaled, _asked(verify))
    assert not same_call(journaled, _asked(verify, ref="e19")), "other arguments under the same key: a conflict"
    assert not same_call(journaled, _asked({"get": "/api/orders?reference=S", "path": "orders"}))
    assert retried_call([journaled], "other", _asked(verify)) is None
    assert retried_call([journaled], None, _asked(verify)) is journaled, "keyless: the last call, repeated"
    assert retried_call([journaled, fill], None, _asked(verify)) is None, "something happened since: a new submit"
    assert retried_call([journaled], None, _asked(verify, ref="e19")) is None


def _attempt(no: int, state: AttemptState, decided_by: str, epoch: int = 1) -> AttemptRecord:
    return AttemptRecord(
        id=no,
        run_id="r",
        step_id="t0007.submit",
        kind="effect",
        attempt_no=no,
        request_key="r/t0007.submit",
        request_fingerprint="fp",
        state=state,
        lease_epoch=epoch,
        worker="w",
        intent_at=1.0,
        dispatched_at=2.0,
        finished_at=3.0,
        result={"url": "/orders/1"},
        decided_by=decided_by,
        evidence=None,
        error=None,
    )


S, F, N = AttemptState.SUCCEEDED, AttemptState.FAILED_BEFORE_SEND, AttemptState.NOT_DONE


@pytest.mark.parametrize(
    ("attempts", "call_epoch", "status"),
    [
        ([_attempt(1, S, "return")], 1, "committed"),  # done by the call itself
        ([_attempt(1, S, "outbox")], 1, "committed"),  # its recorded answer proved it
        ([_attempt(1, S, "verifier")], 1, "verified"),  # the verifier found it landed
        ([_attempt(1, F, "recovery:no_dispatch"), _attempt(2, S, "return", 2)], 1, "not_applied"),
        ([_attempt(1, N, "verifier"), _attempt(2, S, "return", 2)], 1, "not_applied"),
        ([_attempt(1, S, "return", 2)], 1, "not_applied"),  # the first server never got to its intent
        ([_attempt(1, F, "approval_pending"), _attempt(2, S, "return", 3)], 1, "committed"),
    ],
)
def test_a_done_submit_is_answered_from_its_attempts_alone(
    attempts: list[AttemptRecord], call_epoch: int, status: str
) -> None:
    """Every retry reads the same journal, so every retry is told the same thing."""
    assert submit_status(attempts, call_epoch) == status


def test_the_server_decides_which_submits_a_person_approves() -> None:
    """Every submit, or those on the listed hosts (host or host:port); the link names the console."""
    assert AgentPolicy(approve_all=True).approves("http://a.test/x")
    assert AgentPolicy(approve_hosts=("shop.test",)).approves("https://shop.test/orders")
    assert AgentPolicy(approve_hosts=("shop.test:8800",)).approves("http://shop.test:8800/orders")
    assert not AgentPolicy(approve_hosts=("shop.test",)).approves("http://other.test/")
    assert AgentPolicy(console_url="http://c.test/").link("r-1") == "http://c.test/runs/r-1"
    assert AgentPolicy().link("r-1") == "browserworker show r-1"


def test_may_send_rules_are_globs_with_or_without_methods_and_a_bad_one_is_refused() -> None:
    """A rule is a URL glob (any method) or ``"METHOD glob"``: it matches requests, API calls and
    socket messages alike; a rule that names methods and no URL, or no rule at all, is refused
    with what to write; the server's policy refuses it as it is made, not at the first call."""
    rules = MaySend("POST */collect*", "WEBSOCKET */presence*", "*/autosave*")
    assert rules(ChannelRequest("POST", "https://a.test/collect?v=2"))
    assert not rules(ChannelRequest("GET", "https://a.test/collect"))  # not a POST: not this rule's
    assert rules(ChannelRequest("PUT", "https://a.test/drafts/autosave"))
    assert rules(ChannelRequest("WEBSOCKET", "wss://a.test/presence"))
    assert not rules(ChannelRequest("POST", "https://a.test/orders"))
    assert not MaySend() and MaySend("*/x*") == MaySend(" */x* ")
    for bad, said in (("POST", "'POST *'"), ("POST|PUT", "names methods but no URL glob"), ("", "URL glob")):
        with pytest.raises(ValueError, match="may-send rule") as raised:
            MaySend(bad)
        assert said in str(raised.value), (bad, str(raised.value))
    with pytest.raises(ValueError, match="names methods"):
        AgentPolicy(may_send=("POST",))


def test_what_pages_may_send_is_sent_by_staging_steps_and_not_a_submits_dispatch() -> None:
    """With rules, a staging call's step may send what they match (nothing else), and a submit's
    effect does not count it as its dispatch (the rest counts as by default); without rules,
    neither may."""
    rules = MaySend("POST */collect*")
    fill = step_of(Call(seq=3, tool="fill", args={"value": "x", "selector": "#a"}), may_send=rules)
    submit = step_of(Call(seq=4, tool="submit", args={"selector": "#go"}), may_send=rules)
    assert isinstance(fill, Action) and isinstance(submit, Effect)
    assert fill.declares("POST", "https://a.test/collect") and not fill.declares("POST", "https://a.test/orders")
    assert not submit.is_dispatch("POST", "https://a.test/collect")
    assert submit.is_dispatch("POST", "https://a.test/orders") and not submit.is_dispatch("GET", "https://a.test/o")
    bare_fill = step_of(Call(seq=3, tool="fill", args={"value": "x", "selector": "#a"}))
    bare_submit = step_of(Call(seq=4, tool="submit", args={"selector": "#go"}))
    assert isinstance(bare_fill, Action) and not bare_fill.declares("POST", "https://a.test/collect")
    assert isinstance(bare_submit, Effect) and bare_submit.is_dispatch("POST", "https://a.test/collect")


def test_a_sockets_message_is_a_submits_dispatch_unless_its_rule_names_its_body() -> None:
    """A rule naming a socket alone lets its messages go with no submit, yet what a submit sends
    over that socket counts as the submit's dispatch (a page built on one socket sends its
    button's message there too); a rule naming the messages' body lets those off in a submit
    too, and only those."""
    ws = "ws://a.test/_stcore/stream"
    socket_only = step_of(Call(seq=4, tool="submit", args={"selector": "#go"}), may_send=MaySend(f"WEBSOCKET {ws}"))
    by_body = step_of(Call(seq=4, tool="submit", args={"selector": "#go"}), may_send=MaySend("WEBSOCKET */ws* *ping*"))
    fill = step_of(Call(seq=3, tool="fill", args={"value": "x", "selector": "#a"}), may_send=MaySend(f"WEBSOCKET {ws}"))
    assert isinstance(socket_only, Effect) and isinstance(by_body, Effect) and isinstance(fill, Action)
    assert fill.declares("WEBSOCKET", ws, ChannelRequest("WEBSOCKET", ws, "anything"))
    assert socket_only.is_dispatch("WEBSOCKET", ws, ChannelRequest("WEBSOCKET", ws, b"\x08place"))
    other = "ws://a.test/ws"
    assert not by_body.is_dispatch("WEBSOCKET", other, ChannelRequest("WEBSOCKET", other, '{"ping":1}'))
    assert by_body.is_dispatch("WEBSOCKET", other, ChannelRequest("WEBSOCKET", other, '{"place":1}'))


def test_a_refused_socket_is_named_with_the_rule_that_lets_the_page_use_it() -> None:
    """What a page sent between calls is told as it was; a socket whose message was refused is
    named once with the ``--may-send`` rule for it, and so is a socket a page's load was stopped
    for; a post refused between calls is named with a rule by its body, one let through with
    nothing more; a post a load was stopped for gets the general hint."""
    ws = "ws://a.test/_stcore/stream"
    notes = sent_between(
        [SentBetween("t0001.navigate", "WEBSOCKET", ws, True), SentBetween("t0002.fill", "WEBSOCKET", ws, True)]
    )
    assert notes[0] == f"the page sent between calls: WEBSOCKET {ws} (refused, after t0001.navigate)"
    assert [n for n in notes if "--may-send" in n] == [notes[2]] and f"--may-send 'WEBSOCKET {ws}'" in notes[2]
    let = sent_between([SentBetween("t0002.fill", "POST", "https://a.test/collect", False)])
    assert let == ["the page sent between calls: POST https://a.test/collect (let through, after t0002.fill)"]
    refused = sent_between([SentBetween("t0002.fill", "POST", "https://a.test/queue/join", True)])
    assert len(refused) == 2 and "--may-send 'POST https://a.test/queue/join *PART*'" in refused[1], refused
    assert f"--may-send 'WEBSOCKET {ws}'" in loads(StepOutcome("refused", refused=(f"WEBSOCKET {ws}",)))
    assert "analytics" in loads(StepOutcome("refused", refused=("POST https://a.test/collect",)))


def test_the_rule_a_stopped_call_names_matches_the_pages_next_load_too() -> None:
    """The ``--may-send`` rule a stopped call or a refused load names matches the same request of
    the page's next load: a query value the page makes anew (Dash's ``endId`` token, jQuery's
    ``_=`` timestamp) is a ``*``, the rest stays as sent (``filter[name]`` matched as itself), and
    it matches no other address. It says to name the request's body where a button posts there too
    (a Dash app's callbacks, its button's among them, all post to one address); a socket is named
    by its path, with the part of the message to name (NiceGUI's typing and its buttons share one
    socket), and a stopped fill says the field shows what the site never got. A click stopped for
    a form's post and an inline check an htmx page's timer sent meanwhile names both to choose from."""
    sent = "POST http://a.test/_dash-update-component?endId=UvhYrnJ9rXQNvzQx6knZ3nyF~f9556cec847&v=2"
    said = stopped("fill", StepOutcome("refused", refused=(sent,)))
    assert "--may-send 'POST http://a.test/_dash-update-component?endId=*&v=2'" in said, said
    assert "where a button posts to that address too, end the rule with a part of the body" in said
    rules = MaySend(said.split("--may-send '")[1].split("'")[0])
    assert rules(ChannelRequest("POST", "http://a.test/_dash-update-component?endId=lfTtPB1nmMFVBFIt5H5E~0b6c25&v=2"))
    assert not rules(ChannelRequest("POST", "http://a.test/_dash-update-component?endId=x&v=3"))
    assert not rules(ChannelRequest("POST", "http://a.test/orders?endId=lfTtPB1nmMFVBFIt5H5E~0b6c25&v=2"))
    jquery = loads(StepOutcome("refused", refused=("POST http://a.test/api/items?filter[name]=tea&_=1733580000123",)))
    assert "--may-send 'POST http://a.test/api/items?filter[[]name]=tea&_=*'" in jquery, jquery
    assert MaySend(jquery.split("--may-send '")[1].split("'")[0])(
        ChannelRequest("POST", "http://a.test/api/items?filter[name]=tea&_=1733580009999")
    )
    for readable in ("step=2&lang=en", "key=may-send-test_what_the_pa0", "ref=order-2026-12-07-0001"):
        kept = stopped("click", StepOutcome("refused", refused=(f"POST http://a.test/orders?{readable}",)))
        assert f"--may-send 'POST http://a.test/orders?{readable}'" in kept, "nothing made anew: the address as sent"
    uuid = loads(StepOutcome("refused", refused=("PUT http://a.test/drafts?id=3f2a9c1e-4b7d-4e21-9a0c-5d6e7f8a9b0c",)))
    assert "--may-send 'PUT http://a.test/drafts?id=*'" in uuid, uuid
    socket = "ws://a.test/_nicegui_ws/socket.io/?client_id=3a7c5645-2d8d-4859&EIO=4&transport=websocket"
    said = loads(StepOutcome("refused", refused=(f"WEBSOCKET {socket}",)))
    assert "--may-send 'WEBSOCKET ws://a.test/_nicegui_ws/socket.io/?*'" in said, "a socket by its path"
    assert MaySend(said.split("--may-send '")[1].split("'")[0])(
        ChannelRequest("WEBSOCKET", "ws://a.test/_nicegui_ws/socket.io/?client_id=other&EIO=4&transport=websocket")
    )
    both = stopped(
        "click", StepOutcome("refused", refused=("POST http://a.test/orders", "POST http://a.test/validate"))
    )
    assert "--may-send RULE, one of 'POST http://a.test/orders', 'POST http://a.test/validate' (the page's own)" in both
    typed = stopped("fill", StepOutcome("refused", refused=(f"WEBSOCKET {socket}",)))
    assert "the field shows what was typed, yet the site got none of it" in typed, typed
    assert "--may-send 'WEBSOCKET ws://a.test/_nicegui_ws/socket.io/?* *PART*', PART a part of the message" in typed
    between = sent_between([SentBetween("t0002.fill", "POST", "http://a.test/save?t=1733580000123", True)])
    assert "--may-send 'POST http://a.test/save?t=* *PART*'" in between[1], between


_CLICK_LOG = """Locator.click: Timeout 5000ms exceeded.
Call log:
  - waiting for locator("#buy")
    - locator resolved to <button id="buy">Buy</button>
  - attempting click action
    2 × waiting for element to be visible, enabled and stable
      - element is visible, enabled and stable
      - scrolling into view if needed
      - done scrolling
      - <p>We use cookies</p> from <div id="banner">…</div> subtree intercepts pointer events
    - retrying click action
      - waiting 500ms
"""


@pytest.mark.parametrize(
    ("log", "said"),
    [
        (_CLICK_LOG, '<div id="banner">…</div> subtree intercepts pointer events (something covers it'),
        (
            'Locator.fill: Timeout 5000ms exceeded.\nCall log:\n  - waiting for locator("#x")\n'
            '    - fill("a")\n  - attempting fill action\n    2 × waiting for element to be visible, enabled '
            "and editable\n      - element is not enabled\n    - retrying fill action\n    - waiting 20ms\n",
            "element is not enabled (the page keeps it disabled",
        ),
        (
            "Locator.hover: Timeout 5000ms exceeded.\nCall log:\n  - attempting hover action\n"
            "    - waiting for element to be visible and stable\n      - element is not visible\n"
            "    - retrying hover action\n",
            "element is not visible (it is hidden",
        ),
        (
            'Locator.click: Timeout 5000ms exceeded.\nCall log:\n  - waiting for locator("#y")\n',
            "no element on the page",
        ),
    ],
)
def test_an_element_that_will_not_take_an_action_is_told_with_what_stood_in_its_way(log: str, said: str) -> None:
    """A Playwright action's timeout on an element is raised again, the same class, naming the last
    thing its call log says of the element (not the waiting and retrying around it), with what to
    do; where the log only waited for an element, that none matched (a replay on another page)."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    from browserworker.agent._actionable import on_element

    async def timed_out() -> None:
        raise PlaywrightTimeout(log)

    with pytest.raises(PlaywrightTimeout) as raised:
        asyncio.run(on_element("click", timed_out()))
    assert said in str(raised.value) and "within 5 s" in str(raised.value), str(raised.value)
    assert "retrying" not in str(raised.value) and "waiting" not in str(raised.value)


def test_an_export_reads_a_proof_from_what_the_verifier_looks_for_not_from_the_sites_address() -> None:
    """Signed in as ``admin`` on a site under ``/admin/`` (Django's admin), then an order whose
    reference the verifier searches for: the exported flow types ``admin`` as given and keeps
    the site's addresses as they were; only the reference is the proof (a new run types its run
    id), in the verifier's text and in its search address alike."""
    site = "http://127.0.0.1:8811/admin"
    field = {"username": "#id_username", "reference": "#id_reference"}
    verify = parse_verify({"url": f"{site}/orders/order/?q=REF-2", "text": "REF-2", "absent_text": "0 results"})
    calls = [
        Call(1, "navigate", {"url": f"{site}/", "ok": True}),
        Call(2, "fill", {"value": "admin", "ok": True}, Target(field["username"], field="username")),
        Call(3, "submit", {"idempotent": True, "ok": True}, Target('input[type="submit"]')),
        Call(4, "navigate", {"url": f"{site}/orders/order/add/", "ok": True}),
        Call(5, "fill", {"value": "REF-2", "ok": True}, Target(field["reference"], field="reference")),
        Call(6, "submit", {"ok": True}, Target('input[name="_save"]'), key="save", verify=verify),
    ]
    source = _Writer("r-1", calls, {"t0006.submit"}, [], False).source("agent-r-1")
    assert "    username: str = 'admin'\n" in source
    assert "    reference: str | None = None  # the proof" in source
    assert f"await go_to(ctx.page, '{site}/')" in source
    assert f"await go_to(ctx.page, '{site}/orders/order/add/')" in source
    reference = "{(ctx.inputs.reference or ctx.run_id)}"
    assert f"'url': f'{site}/orders/order/?q={reference}', 'text': f'{reference}'" in source
    compile(source, "exported.py", "exec")


def test_an_export_writes_a_submit_that_sent_nothing_as_an_action_and_marks_one_the_page_showed_errors_after() -> None:
    """Flask-Admin's order form: the first Save was stopped by the browser's own check (quantity
    0 under ``min=1``), so its click sent nothing and it is exported as an action (it changes only
    the page, and a run fails if it sends); the second Save placed the order, an effect as
    usual; the third was answered with the form and its errors, an effect whose comment says
    to delete it if the site refused it."""
    verify = parse_verify({"url": "/admin/order/?search=FX-1", "text": "FX-1"}).resolved("http://h/admin/order/new/")
    save = Target('role=button[name="Save"]')
    calls = [
        Call(1, "navigate", {"url": "http://h/admin/order/new/", "ok": True}),
        Call(2, "fill", {"value": "FX-1", "ok": True}, Target("#reference", field="reference")),
        Call(3, "fill", {"value": "0", "ok": True}, Target("#quantity", field="quantity")),
        Call(4, "submit", {"ok": True}, save, key="bad", verify=verify),
        Call(5, "fill", {"value": "2", "ok": True}, Target("#quantity", field="quantity")),
        Call(6, "submit", {"ok": True}, save, key="good", verify=verify),
        Call(7, "submit", {"ok": True}, save, key="again", verify=verify),
    ]
    done = {"t0004.submit", "t0006.submit", "t0007.submit"}
    writer = _Writer(
        "r-1", calls, done, [], False, unsent=frozenset({"t0004.submit"}), refused=frozenset({"t0007.submit"})
    )
    source = writer.source("agent-r-1")
    unsent, good = (source.split(f'(id="t000{n}.submit"')[1].split("\n\n\n")[0] for n in (4, 6))
    assert source.count('@flow.step(id="t0004.submit")') == 1 and "t0004_submit_landed" not in source
    assert "click_and_settle(ctx.page, 'role=button[name=\"Save\"]', confirm=True)" in unsent
    assert source.count("@flow.effect(") == 2 and "@t0006_submit.verify" in source and "@t0007_submit.verify" in source
    assert "errors" not in good and "sent nothing" not in good
    refused_comment = source.split('@flow.effect(id="t0007.submit"')[0].rsplit("\n\n\n", 1)[1]
    assert "the page showed errors after this submit" in refused_comment and "delete" in refused_comment
    compile(source, "exported.py", "exec")


def test_an_export_names_an_input_by_its_label_where_the_page_made_up_the_fields_id() -> None:
    """NiceGUI's fields have no name and ids it makes up (``c5``); React's are ``:r1:``: an
    exported input is called by the field's label then (``item``), and by its name or a real id
    otherwise (``reference``, ``line1``); with no label, by the id all the same (``c9``)."""
    calls = [
        Call(1, "navigate", {"url": "http://h/", "ok": True}),
        Call(2, "fill", {"value": "tea", "ok": True}, Target("#c5", role="textbox", name="Item", field="c5")),
        Call(3, "fill", {"value": "2", "ok": True}, Target("#x", role="textbox", name="Quantity", field=":r1:")),
        Call(4, "fill", {"value": "R-1", "ok": True}, Target("#r", role="textbox", name="Ref", field="reference")),
        Call(5, "fill", {"value": "Main St", "ok": True}, Target("#a", role="textbox", name="Street", field="line1")),
        Call(6, "fill", {"value": "x", "ok": True}, Target("#c9", role="textbox", field="c9")),
    ]
    source = _Writer("r-1", calls, set(), [], False).source("agent-r-1")
    inputs = [
        line.split(":")[0].strip() for line in source.split("class Inputs")[1].split("\n\n\n")[0].splitlines()[3:]
    ]
    assert inputs == ["item", "quantity", "reference", "line1", "c9"], source
    compile(source, "exported.py", "exec")


def test_an_export_types_an_email_proof_as_an_email_of_the_run() -> None:
    """django-oscar's guest checkout: the email typed at its gateway is what the verify looks for
    (the shop's orders by email). A new run types its run id at the typed address's domain (the
    field takes nothing but an email), in the fill and in the verify's address alike."""
    verify = parse_verify({"get": "/verify/orders?email=g5@example.com", "path": "orders"}).resolved("http://h/")
    calls = [
        Call(1, "navigate", {"url": "http://h/checkout/", "ok": True}),
        Call(2, "fill", {"value": "g5@example.com", "ok": True}, Target("#id_username", field="username")),
        Call(3, "submit", {"ok": True}, Target("#place-order"), key="order", verify=verify),
    ]
    source = _Writer("r-1", calls, {"t0003.submit"}, [], False).source("agent-r-1")
    assert (
        "    username: str | None = None  # the proof its verifier looks for (default: the run id@example.com)"
        in source
    )
    assert """.fill((ctx.inputs.username or ctx.run_id + "@example.com"))""" in source
    assert """'get': f'http://h/verify/orders?email={(ctx.inputs.username or ctx.run_id + "@example.com")}'""" in source
    compile(source, "exported.py", "exec")


def test_an_export_encodes_a_proof_in_an_address_as_the_agent_did() -> None:
    """Roundup's new issue: the title the agent typed (with spaces) is what its verify looks for,
    on a search page whose address has the title percent-encoded (``%20``), and in a REST query
    form-encoded (``+``). Both are found as the proof, and a new run's proof goes into each
    address encoded the same way (``quote``, ``quote_plus``, imported); a site's path with no
    proof in it stays as it was."""
    title = "agent issue 42"
    search = parse_verify({"url": "/demo/issue?@search_text=agent%20issue%2042&@columns=title", "text": title})
    calls = [
        Call(1, "navigate", {"url": "http://h/demo/issue?@template=item", "ok": True}),
        Call(2, "fill", {"value": title, "ok": True}, Target("#title", field="title")),
        Call(3, "submit", {"ok": True}, Target("#submit_button"), key="issue", verify=search.resolved("http://h/")),
    ]
    source = _Writer("r-1", calls, {"t0003.submit"}, [], False).source("agent-r-1")
    proof = "(ctx.inputs.title or ctx.run_id)"
    assert "from urllib.parse import quote\n" in source
    assert (
        f"'url': f'http://h/demo/issue?@search_text={{quote({proof})}}&@columns=title', 'text': f'{{{proof}}}'"
        in source
    )
    assert "await go_to(ctx.page, 'http://h/demo/issue?@template=item')" in source
    compile(source, "exported.py", "exec")

    rest = parse_verify({"get": "/rest/data/issue?title=agent+issue+42", "path": "data.collection"})
    calls[2] = Call(3, "submit", {"ok": True}, Target("#submit_button"), key="issue", verify=rest.resolved("http://h/"))
    source = _Writer("r-1", calls, {"t0003.submit"}, [], False).source("agent-r-1")
    assert "    title: str | None = None  # the proof" in source, "found in the address alone, encoded"
    assert "from urllib.parse import quote_plus\n" in source
    assert f"'get': f'http://h/rest/data/issue?title={{quote_plus({proof})}}'" in source
    compile(source, "exported.py", "exec")


def test_a_replay_takes_the_page_where_a_done_submit_left_it() -> None:
    """A done submit is skipped by a replay; in its place the page goes to the address in its
    result (under the submit's number, so no call's step is taken). A submit in doubt, one done
    with no address (found by a verify), and any other call get no such step."""
    from dataclasses import replace

    from browserworker.agent._session import _landing

    submit = Call(7, "submit", {"selector": "#submit"}, key="k")
    done = replace(_attempt(1, S, "return"), result={"url": "http://shop.test/orders/1", "title": "Order 1"})
    landed = _landing(submit, done)
    assert landed is not None and landed.tool == "navigate" and landed.args["url"] == "http://shop.test/orders/1"
    assert landed.step_id == "t0007.navigate" and landed.args["ok"]
    assert _landing(submit, replace(done, state=AttemptState.UNKNOWN)) is None, "in doubt: recovered, not skipped"
    assert _landing(submit, replace(done, result={"verified": 1})) is None
    assert _landing(submit, replace(done, result={"url": "javascript:alert(1)"})) is None
    assert _landing(Call(8, "fill", {"value": "x"}), done) is None
