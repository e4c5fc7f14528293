"""Recording internals without a browser: redaction rules, the replay router's matching, the format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr

from browserworker.errors import UsageError
from browserworker.flow import load_flow
from browserworker.recording import REDACTED, Recording, Redactor, ReplayRouter, recording_path
from browserworker.recording.files import Ledger
from browserworker.recording.recorder import stored_tokens
from browserworker.recording.replayer import compare, parse_crash_at
from browserworker.recording.router import _made_up, request_key
from browserworker.recording.selftest import SelfTest
from tests.support.paths import ROOT

RECORDINGS = ROOT / "recordings"


def router_for(name: str, tmp_path: Path, **kw: object) -> ReplayRouter:
    rec = Recording.load(RECORDINGS / name)
    return ReplayRouter(rec, Ledger(tmp_path / "ledger.jsonl"), Redactor.from_names(rec.meta["secret_fields"]), **kw)  # type: ignore[arg-type]


def origin(name: str) -> str:
    return str(Recording.load(RECORDINGS / name).meta["inputs"]["base_url"])


def recorded_request(name: str, method: str, path: str) -> dict:
    rec = Recording.load(RECORDINGS / name)
    for _, entries in rec.segments():
        for e in entries:
            if e["request"]["method"] == method and e["request"]["url"].split("?")[0].endswith(path):
                return e["request"]
    raise AssertionError(f"{method} {path} not in {name}")


FORM = {"content-type": "application/x-www-form-urlencoded"}


# -- redaction -------------------------------------------------------------------------------


def test_redactor_masks_cookies_and_auth_headers_but_keeps_names() -> None:
    """Cookie and Set-Cookie keep cookie names and attributes; Authorization headers lose their value."""
    red = Redactor.for_run([], {})
    assert red.header("Cookie", "a=1; sess=xyz") == "a=[redacted]; sess=[redacted]"
    assert red.header("set-cookie", "sess=xyz; Path=/; HttpOnly") == "sess=[redacted]; Path=/; HttpOnly"
    assert red.header("Authorization", "Bearer abc") == REDACTED
    assert red.header("Proxy-Authorization", "Basic abc") == REDACTED
    assert red.header("Accept", "text/html") == "text/html"


def test_redactor_masks_named_fields_in_forms_json_and_query_strings() -> None:
    """Fields the flow names (and password-like defaults) are masked wherever they appear; others stay."""
    red = Redactor.for_run(["note"], {"note": "n"})
    assert (
        red.body("item=tea&note=hello&password=pw", "application/x-www-form-urlencoded")
        == "item=tea&note=%5Bredacted%5D&password=%5Bredacted%5D"
    )
    assert json.loads(red.body('{"item": "tea", "nested": {"note": "x"}}', "application/json")) == {
        "item": "tea",
        "nested": {"note": REDACTED},
    }
    assert red.url("http://h/p?note=abc&ref=r%2F1") == "http://h/p?note=%5Bredacted%5D&ref=r%2F1"


def test_redactor_scrubs_secret_input_values_everywhere_unless_unsafe() -> None:
    """A secret input's value is scrubbed in any text (also URL-encoded); a value equal to a public
    input, or too short, is left to the field rules and reported."""
    red = Redactor.for_run(
        ["password", "token", "pin"],
        {"password": SecretStr("demo"), "username": "demo", "token": "tok/en-1234", "pin": "12"},
    )
    assert red.scrub("a tok/en-1234 b tok%2Fen-1234") == "a [redacted] b [redacted]"
    assert red.scrub("user demo") == "user demo"
    assert len(red.warnings) == 2 and "password" in red.warnings[0] + red.warnings[1]
    assert "demo" in red.trace_values  # traces are scrubbed of it anyway


def test_live_request_is_redacted_before_matching(tmp_path: Path) -> None:
    """A login POST with another password (and fields in another order) still matches the redacted recording."""
    router = router_for("place-order", tmp_path)
    recorded = recorded_request("place-order", "POST", "/login")
    fields = dict(p.split("=", 1) for p in recorded["postData"]["text"].split("&"))
    fields["password"] = "a-completely-different-password"
    body = "&".join(f"{k}={v}" for k, v in reversed(list(fields.items())))
    answer = router.answer("POST", recorded["url"], FORM, body.encode())
    assert answer.refusal is None and answer.status == 303


# -- the router's matching rules ----------------------------------------------------------------------


def test_same_key_is_served_in_recorded_order_then_the_last_again(tmp_path: Path) -> None:
    """GET /orders/new was recorded twice (login's redirect, open_form): answers come in recorded
    order, and once used up the last one is served again (a repeatable GET)."""
    router = router_for("place-order", tmp_path)
    url = origin("place-order") + "/orders/new"
    ids = [router.answer("GET", url, {}, None).entry.id for _ in range(3)]  # type: ignore[union-attr]
    assert ids[0] != ids[1] and ids[1] == ids[2]
    assert ids == sorted(ids)


def test_a_steps_request_is_answered_as_that_step_was_afresh_in_each_pass(tmp_path: Path) -> None:
    """GET /orders/new was recorded in login (its redirect) and in open_form: asked by a step, it
    is answered with what that step got, whatever another step used; a new pass (a new context)
    is answered so again, though the ledger has served both."""
    router = router_for("place-order", tmp_path)
    url = origin("place-order") + "/orders/new"

    def asked_by(step: str) -> str:
        router.step = step
        return router.answer("GET", url, {}, None).entry.segment.step  # type: ignore[union-attr, return-value]

    assert [asked_by("open_form"), asked_by("login")] == ["open_form", "login"]
    router.new_pass()
    assert [asked_by("login"), asked_by("open_form"), asked_by("open_form")] == ["login", "open_form", "open_form"]


def test_a_dispatch_is_never_answered_twice(tmp_path: Path) -> None:
    """The recorded order POST is answered once; a second identical POST is refused as a duplicate."""
    router = router_for("place-order", tmp_path)
    recorded = recorded_request("place-order", "POST", "/orders")
    body = recorded["postData"]["text"].encode()
    first = router.answer("POST", recorded["url"], FORM, body)
    assert first.status == 303 and first.headers["location"].endswith("/orders/1")
    second = router.answer("POST", recorded["url"], FORM, body)
    assert second.refusal is not None and "would be a duplicate" in second.refusal


def test_an_idempotent_effect_may_be_answered_again(tmp_path: Path) -> None:
    """The API flow's effect is idempotent: a replayed dispatch gets the recorded answer again."""
    router = router_for("place-order-api", tmp_path)
    recorded = recorded_request("place-order-api", "POST", "/api/orders")
    headers = {"content-type": "application/json"}
    answers = [router.answer("POST", recorded["url"], headers, recorded["postData"]["text"].encode()) for _ in range(2)]
    assert [a.status for a in answers] == [201, 201] and answers[1].repeat
    assert router.dispatches_served("submit") == 2


def test_verifier_pages_follow_the_state_of_the_replayed_server(tmp_path: Path) -> None:
    """The verifier's page is the recorded "before" page until the effect's dispatch was answered
    (in this process or a crashed one sharing the ledger), then the "after" page."""
    router = router_for("place-order", tmp_path)
    url = origin("place-order") + "/orders?ref=rec-place-order%2Fsubmit"
    before = router.answer("GET", url, {}, None)
    assert b"order-row" not in before.body and before.entry.segment.phase == "verify_before"  # type: ignore[union-attr]
    recorded = recorded_request("place-order", "POST", "/orders")
    router.answer("POST", recorded["url"], FORM, recorded["postData"]["text"].encode())
    resumed = router_for("place-order", tmp_path)  # a resume reads the ledger the crashed replay wrote
    after = resumed.answer("GET", url, {}, None)
    assert b"order-row" in after.body and after.entry.segment.phase == "verify_after"  # type: ignore[union-attr]


def _multipart(boundary: str, **fields: str) -> str:
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    upload = f'--{boundary}\r\nContent-Disposition: form-data; name="doc"; filename="a.txt"\r\n'
    return "".join(parts) + upload + f"Content-Type: text/plain\r\n\r\nhello\r\n--{boundary}--\r\n"


def test_a_multipart_form_matches_whatever_its_boundary() -> None:
    """Chromium draws a new boundary for each multipart post (Flask-Admin's forms are multipart),
    so a replayed post never has the recorded bytes: its key is its fields (a file by its name and
    content), a secret field redacted, in any order; a field of another value is another key."""
    redactor = Redactor.from_names(["password"])
    url = "http://shop.test/admin/order/new/"

    def key(boundary: str, **fields: str) -> tuple[str, str, str]:
        mime = f"multipart/form-data; boundary={boundary}"
        return request_key("POST", url, _multipart(boundary, **fields).encode(), mime, redactor)

    recorded = key("----WebKitFormBoundaryAAAA", reference="R-1", password="s3cret", quantity="2")
    assert key("----WebKitFormBoundaryZZZZ", quantity="2", password="other", reference="R-1") == recorded
    assert key("----WebKitFormBoundaryZZZZ", reference="R-2", password="s3cret", quantity="2") != recorded
    assert "s3cret" not in recorded[2] and '"doc":{"content":"hello","file":"a.txt"}' in recorded[2]


def test_unmatched_request_names_the_closest_recorded_one(tmp_path: Path) -> None:
    """An unknown request is refused with a message naming it, the closest recorded request and what differs."""
    router = router_for("place-order", tmp_path)
    recorded = recorded_request("place-order", "POST", "/orders")
    body = recorded["postData"]["text"].replace("item=tea", "item=coffee").encode()
    answer = router.answer("POST", recorded["url"], FORM, body)
    assert answer.refusal is not None
    assert f"POST {recorded['url']} not in the recording" in answer.refusal
    assert "closest recorded: POST" in answer.refusal and "entry 0007.0" in answer.refusal
    assert "body.item 'coffee' (recorded 'tea')" in answer.refusal
    assert router.refusals == [answer.refusal]


def test_the_browsers_own_icon_request_is_answered_404_when_the_recording_lacks_it(tmp_path: Path) -> None:
    """Chromium asks for /favicon.ico when it gets round to it: a replay whose recording has no
    such request answers it 404 (listed as the browser's own), not as a difference; any other
    unrecorded GET of the same site is still refused."""
    router = router_for("place-order", tmp_path)
    answer = router.answer("GET", origin("place-order") + "/favicon.ico", {}, None)
    assert (answer.refusal, answer.status, answer.failed) == (None, 404, False)
    assert router.refusals == [] and "/favicon.ico" in router.blocked[0]
    other = router.answer("GET", origin("place-order") + "/favicon.png", {}, None)
    assert other.refusal is not None and "not in the recording" in other.refusal


def test_a_post_sent_past_any_route_as_its_page_was_left_is_answered_204_offline(tmp_path: Path) -> None:
    """A beacon a page sends as it is left (Wagtail's editing-session release) passes Playwright's
    routing while recording, so no recording holds it; in a replay it reaches the loopback proxy and
    is answered 204, said in the replay's notes. Routed, or a GET, it is still refused."""
    router = router_for("place-order", tmp_path)
    url = f"{origin('place-order')}/admin/editing-sessions/release/73/"
    left = router.answer("POST", url, FORM, b"", unrouted=True)
    assert left.refusal is None and left.status == 204
    assert any("sent as its page was left" in note for note in router.blocked), router.blocked
    assert router.answer("POST", url, FORM, b"").refusal is not None
    assert router.answer("GET", url, {}, None, unrouted=True).refusal is not None


def test_a_websocket_is_refused_with_why(tmp_path: Path) -> None:
    """A page's WebSocket handshake is refused, saying that a recording holds none of a socket's
    messages (not pointing at the closest recorded request)."""
    router = router_for("place-order", tmp_path)
    answer = router.answer("GET", origin("place-order") + "/ws", {"Upgrade": "websocket"}, None)
    assert answer.refusal is not None and "opens a WebSocket" in answer.refusal
    assert "holds none of a socket's messages" in answer.refusal and "closest" not in answer.refusal


def test_crash_point_parsing_names_the_problem() -> None:
    """Crash points are STEP:POINT on an effect; anything else is a usage error saying why."""
    steps = list(load_flow(ROOT / "flows" / "place_order.py").flow.steps)
    assert parse_crash_at("submit:after_dispatch", steps) == ("submit", "after_dispatch")
    assert parse_crash_at("reply_lost:submit", steps) == ("submit", "reply_lost")
    with pytest.raises(UsageError, match="unknown crash point"):
        parse_crash_at("submit:later", steps)
    with pytest.raises(UsageError, match="not an effect"):
        parse_crash_at("login:after_dispatch", steps)


def test_compare_reports_each_difference_on_its_own_line() -> None:
    """The journal comparison names the step, attempt and field that differ."""
    recorded = json.loads((RECORDINGS / "place-order" / "journal.json").read_text())
    replayed = json.loads(json.dumps(recorded))
    assert compare(recorded, replayed, [], []) == []
    replayed["attempts"][2]["result"] = {"order_id": "7"}
    replayed["attempts"].append({**replayed["attempts"][0], "attempt_no": 2})
    lines = compare(recorded, replayed, [], [])
    assert "submit #1 result: recorded {'order_id': '1'}, replayed {'order_id': '7'}" in lines
    assert "login #2: not in the recording, replayed SUCCEEDED by return" in lines


# -- the format ---------------------------------------------------------------------------------


def test_recording_names_and_paths(tmp_path: Path) -> None:
    """A bare name lives under recordings/; a path stays a path; a bad name is refused."""
    assert recording_path("place-order", tmp_path) == tmp_path / "recordings" / "place-order"
    assert recording_path("some/dir") == Path("some/dir")
    with pytest.raises(UsageError):
        recording_path("bad name!")


def test_committed_recordings_are_complete_and_point_at_their_flows() -> None:
    """Every committed example recording is complete, names its flow file (which exists) and has no
    broken verifier."""
    names = sorted(p.name for p in RECORDINGS.iterdir() if (p / "meta.json").is_file())
    assert {"place-order", "place-order-api", "place-order-unverified"} <= set(names)
    for name in names:
        rec = Recording.load(RECORDINGS / name)
        assert rec.meta["status"] == "complete" and rec.meta["final_state"] == "SUCCEEDED", name
        assert rec.flow_path.is_file() and rec.meta["broken_verifiers"] == [], name
        assert rec.meta["inputs"]["password"] == REDACTED


def test_ledger_survives_a_new_reader(tmp_path: Path) -> None:
    """What one process served is seen by the next one that opens the ledger."""
    first = Ledger(tmp_path / "l.jsonl")
    first.add("0007.0")
    assert Ledger(tmp_path / "l.jsonl").count("0007.0") == 1


def test_a_broken_verifier_is_told_what_its_answer_means() -> None:
    """A verifier that finds the effect before it was made, one that misses it after, and one that
    cannot tell (a 404 it does not read as "not done") are each told what to look at."""
    early = SelfTest("submit", 1, "before", said="done", expected="not_done")
    blind = SelfTest("submit", 1, "after", said="not_done", expected="done")
    unsure = SelfTest("submit", 1, "before", said="unknown", expected="not_done", reason="GET /orders/R-1 answered 404")
    assert "already had this effect" in early.describe() and "does not find the effect" in blind.describe()
    told = unsure.describe()
    assert "(GET /orders/R-1 answered 404)" in told and "cannot tell" in told and "say not done there" in told, told


def test_only_what_looks_like_a_token_of_a_pages_stored_values_is_scrubbed_as_a_secret() -> None:
    """A page's localStorage holds tokens (a JWT, an opaque one, one inside JSON) and its own state:
    Wagtail keeps its icons' SVG and their address there, which, scrubbed as secrets, emptied the
    recorded icons and turned their address into ``http://host[redacted]``. Only the tokens count;
    a path, a number, markup, a word, a type's or a file's name, a date do not: Gradio keeps such
    state (``markdown``, scrubbed, broke the address of its ``markdown-code`` module; a file's
    ``gradio.FileData`` and ``text/plain``, scrubbed, its post of the file)."""
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
    assert stored_tokens(jwt) == [jwt]
    assert stored_tokens("9f8e7d6c5b4a39281706") == ["9f8e7d6c5b4a39281706"]
    assert stored_tokens('{"auth": {"access_token": "opaque-TOKEN-123456", "expires": 1733550000}}') == [
        "opaque-TOKEN-123456"
    ]
    for state in (
        "/admin/sprite/?h=a85477f6",
        '<div hidden><svg><defs><symbol id="icon-arrow-down">',
        "1733550000000",
        "closed",
        "markdown",  # Gradio keeps its state beside what was typed
        '{"view": "markdown", "theme": "darkMode"}',
        '{"meta": {"_type": "gradio.FileData"}, "mime_type": "text/plain", "orig_name": "invoice.txt"}',
        '{"at": "2026-12-07T05:51:59Z"}',
    ):
        assert stored_tokens(state) == [], state


def test_an_address_a_scrubbed_secret_left_unparsable_is_matched_as_it_is(tmp_path: Path) -> None:
    """A recorded address whose host a scrubbed value broke (``http://host:5099[redacted]``) does
    not stop the replay from reading its recording: it is matched as it is."""
    key = request_key("GET", "http://127.0.0.1:5099[redacted]", None, None, Redactor.from_names([]))
    assert key == ("GET", "http://127.0.0.1:5099[redacted]", "")


def test_only_values_shaped_as_a_page_draws_them_stand_in_for_the_recorded_ones() -> None:
    """A replay takes a live value for the recorded one only where both look made up by the page
    (a session id in base 36, whose length varies; a UUID; a time in milliseconds); a word the
    flow typed, a different item, or tokens of other shapes still differ."""
    assert _made_up("acgjqqdf5e", "nxolohh8gdd")  # Gradio's session ids: 10 and 11 digits of base 36
    assert _made_up("0b8e2f6c-1d7a-4c2e-9f3b-5a6d7e8f9a0b", "7c1d9e3f-2a8b-4d5c-8e6f-1b2c3d4e5f6a")
    assert _made_up("1733550000123", "1733561234567")
    assert not _made_up("teapotcups", "coffeecups")  # words: no digit in either
    assert not _made_up("tea", "coffee")
    assert not _made_up("abc123def456", "abc123")  # lengths too far apart
    assert not _made_up("0b8e2f6c-1d7a-4c2e", "0b8e2f6c1d7a-4c2e-")  # its separators elsewhere


def test_no_part_of_a_public_input_is_taken_for_a_secret() -> None:
    """A page may store what the run typed or chose (Gradio keeps a file's name): a stored value
    found in a public input's value (a list of paths) is not a secret; a secret input's is."""
    red = Redactor.for_run(["password"], {"files": ["/srv/in/invoice-2026.txt"], "password": "pw-9f8e7d6c5b4a"})
    red.add_values(["invoice-2026.txt", "/srv/in/invoice-2026.txt", "tok-9f8e7d6c5b4a3928"])
    assert sorted(red.values) == ["pw-9f8e7d6c5b4a", "tok-9f8e7d6c5b4a3928"], red.values
