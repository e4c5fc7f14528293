"""Offline replays of the committed recordings (no sandbox runs for any of these tests):
plain replays compared with the recording, crash-and-resume replays decided by the recorded
verifier pages, duplicate dispatches refused, unmatched requests explained, the CLI."""

from __future__ import annotations

import errno
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from browserworker.recording import Recording, ReplayResult, replay
from tests.support.paths import ROOT, TEST_FLOWS

pytestmark = pytest.mark.browser

RECORDINGS = ROOT / "recordings"


def states(result, step: str = "submit") -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(str(a.state), str(a.decided_by)) for a in result.attempts_of(step)]


def recorded_results(name: str) -> dict[str, object]:
    journal = json.loads((RECORDINGS / name / "journal.json").read_text())
    return {a["step_id"]: a["result"] for a in journal["attempts"] if a["state"] == "SUCCEEDED"}


@pytest.fixture(scope="module")
def place_order_replay() -> tuple[ReplayResult, bool | None]:
    """One offline replay of recordings/place-order, run while a listener holds the recorded shop's
    port; returns the result and whether anything connected to that port (None: the port is taken)."""
    port = urlsplit(Recording.load(RECORDINGS / "place-order").meta["inputs"]["base_url"]).port
    listener: socket.socket | None = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # old connections in TIME_WAIT are fine
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(8)
        listener.setblocking(False)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        listener.close()
        listener = None
    try:
        result = replay(RECORDINGS / "place-order")
        if listener is None:
            return result, None
        try:
            listener.accept()
            return result, True
        except BlockingIOError:
            return result, False
    finally:
        if listener is not None:
            listener.close()


def test_place_order_replay_matches_the_recording(place_order_replay: tuple[ReplayResult, bool | None]) -> None:
    """The verifier flow replays offline to the recorded outcomes and results, and its verifier
    self-tests (before: not done, after: done) still agree with the recording."""
    result, _ = place_order_replay
    assert result.ok, result.report()
    assert result.state == "SUCCEEDED"
    for step, value in recorded_results("place-order").items():
        assert result.result_of(step) == value
    assert [(t.phase, t.said) for t in result.self_tests] == [("before", "not_done"), ("after", "done")]


def test_form_post_303_redirect_is_followed_offline(place_order_replay: tuple[ReplayResult, bool | None]) -> None:
    """The order form's POST gets the recorded 303 (the gate records it in the outbox) and the
    browser's follow-up GET of the Location is answered from the recording too."""
    result, _ = place_order_replay
    [submit] = result.attempts_of("submit")
    [response] = submit.evidence["responses"]
    assert (response["method"], response["status"], response["location"]) == ("POST", 303, "/orders/1")
    assert result.served_count("GET", "/orders/1") == 2  # the redirect hop, then read_confirmation


def test_nothing_reaches_the_recorded_origin(place_order_replay: tuple[ReplayResult, bool | None]) -> None:
    """A listener on the recorded shop's port gets no connection during the replay: every request is
    answered in the machine (the sandbox that made the recording is long gone)."""
    result, connected = place_order_replay
    if connected is None:
        pytest.skip("another process listens on the recorded shop's port")
    assert result.ok and connected is False


@pytest.mark.parametrize("name", ["place-order-api", "place-order-unverified", "place-order-503"])
def test_replay_matches_the_recording(name: str) -> None:
    """The other example recordings replay offline to the same step outcomes and results (the 503
    one through its recorded recovery: the verifier found the order), every request answered."""
    result = replay(RECORDINGS / name)
    assert result.ok, result.report()
    assert result.state == "SUCCEEDED"
    for step, value in recorded_results(name).items():
        assert result.result_of(step) == value


def test_crash_with_the_reply_lost_is_decided_by_the_recorded_verifier_page() -> None:
    """Killed after the order POST reached the (recorded) shop, before its reply: the resume re-runs
    login and the form offline, the verifier sees the recorded "after" page, and the order is not
    placed again."""
    result = replay(RECORDINGS / "place-order", crash_at="submit:reply_lost")
    assert result.crash_exit == -9
    assert result.state == "SUCCEEDED"
    assert states(result) == [("SUCCEEDED", "verifier")]
    assert "duplicate_prevented" in result.decisions()
    assert result.dispatches == {"submit": 1}
    assert result.result_of("submit") == recorded_results("place-order")["submit"]
    assert [a.attempt_no for a in result.attempts_of("login")] == [1, 2]


def test_crash_after_dispatch_before_release_is_verified_not_done_and_replayed_once() -> None:
    """Killed at after_dispatch: the gate committed the dispatch but the request was never released,
    so the recorded "before" page makes the verifier say not done and the effect is replayed with
    the same key: exactly one order POST answered in all."""
    result = replay(RECORDINGS / "place-order", crash_at="submit:after_dispatch", settle=0)
    assert states(result) == [("NOT_DONE", "verifier"), ("SUCCEEDED", "return")]
    assert {a.request_key for a in result.attempts_of("submit")} == {"rec-place-order/submit"}
    assert result.dispatches == {"submit": 1}
    assert result.state == "SUCCEEDED" and result.refusals == []


def test_crash_after_the_response_is_confirmed_from_the_outbox() -> None:
    """Killed after the 303 reached the outbox: recovery confirms it without asking the verifier."""
    result = replay(RECORDINGS / "place-order", crash_at="submit:after_response")
    assert states(result) == [("SUCCEEDED", "outbox")]
    assert result.result_of("submit") == recorded_results("place-order")["submit"]
    assert result.dispatches == {"submit": 1}


def test_idempotent_flow_crash_replays_with_the_same_key() -> None:
    """The idempotent API flow, killed with its reply lost, is replayed with the same key; the
    recording may answer that repeat because the effect is idempotent."""
    result = replay(RECORDINGS / "place-order-api", crash_at="submit:reply_lost")
    assert states(result) == [("UNKNOWN", "recovery:dispatched"), ("SUCCEEDED", "return")]
    assert result.dispatches == {"submit": 2}
    assert result.result_of("submit") == recorded_results("place-order-api")["submit"]


def test_a_duplicate_dispatch_is_refused_not_answered(tmp_path: Path) -> None:
    """A flow edited to claim idempotency its target lacks: after a crash it replays the POST; the
    replay refuses that second dispatch (it would be a duplicate) instead of answering it, and stops
    the run rather than let it retry forever."""
    result = replay(
        RECORDINGS / "place-order-unverified",
        crash_at="submit:reply_lost",
        settle=0,
        flow=TEST_FLOWS / "unverified_marked_idempotent.py",
    )
    assert result.dispatches == {"submit": 1}
    assert any("would be a duplicate" in r for r in result.refusals)
    assert any("a live run would have placed a duplicate" in m for m in result.mismatches)
    assert result.state not in ("SUCCEEDED", "FAILED") and not result.ok


def test_a_changed_request_is_refused_with_the_closest_recorded_one() -> None:
    """Replayed with another item, the order POST is not in the recording: it is refused (nothing is
    sent), the result names the closest recorded request, and the replay does not match."""
    result = replay(RECORDINGS / "place-order", inputs={"item": "coffee"}, settle=0)
    assert not result.ok and result.exit_code == 1
    [refusal] = result.refusals
    assert "not in the recording" in refusal and "body.item 'coffee' (recorded 'tea')" in refusal
    assert any(m.startswith("submit #1 state: recorded 'SUCCEEDED'") for m in result.mismatches)


def bw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "browserworker", *args], capture_output=True, text=True, timeout=180, cwd=ROOT
    )


def test_cli_replay_prints_a_diff_and_exits_1_on_mismatch(tmp_path: Path) -> None:
    """`browserworker replay` exits 0 when the replay matches; for a recording whose journal says
    otherwise it prints the difference and exits 1."""
    good = bw("replay", "recordings/place-order-api")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "matches the recording" in good.stdout
    copy = tmp_path / "place-order-api"
    shutil.copytree(RECORDINGS / "place-order-api", copy)
    meta = json.loads((copy / "meta.json").read_text())
    meta["flow"]["file"] = str(ROOT / "flows" / "place_order_api.py")
    (copy / "meta.json").write_text(json.dumps(meta))
    journal = json.loads((copy / "journal.json").read_text())
    journal["attempts"][-1]["result"] = {"order_id": "999"}
    (copy / "journal.json").write_text(json.dumps(journal))
    bad = bw("replay", str(copy))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "DIFFERS from the recording" in bad.stdout
    assert "submit #1 result: recorded {'order_id': '999'}, replayed {'order_id': '2'}" in bad.stdout


def test_cli_crash_replay_of_the_unverified_flow_parks_for_review() -> None:
    """`browserworker replay --crash-at` on the flow without verifier or idempotency, its reply lost:
    the resumed run is UNKNOWN and NEEDS_REVIEW (exit 3), the submit dispatched once, never retried."""
    done = bw("replay", "recordings/place-order-unverified", "--crash-at", "submit:reply_lost", "--json")
    assert done.returncode == 3, done.stdout + done.stderr
    view = json.loads(done.stdout)
    assert view["run"]["state"] == "NEEDS_REVIEW"
    [submit] = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert (submit["state"], submit["decided_by"]) == ("UNKNOWN", "recovery:dispatched")
    assert len(submit["outbox"]) == 1 and submit["outbox"][0]["status"] is None
    assert "replay crashed (SIGKILL) at submit:reply_lost" in done.stderr


def write_https_recording(root: Path) -> None:
    """A hand-made recording of tests/flows/https_form.py against https://shop.test (no such site)."""

    def entry(
        i: int,
        method: str,
        path: str,
        status: int,
        body: str = "",
        location: str | None = None,
        post: str | None = None,
    ) -> dict[str, object]:
        request: dict[str, object] = {
            "method": method,
            "url": f"https://shop.test{path}",
            "headers": [],
            "cookies": [],
            "queryString": [],
        }
        if post is not None:
            request["postData"] = {"mimeType": "application/x-www-form-urlencoded", "text": post}
        headers = [{"name": "content-type", "value": "text/html"}] + (
            [{"name": "location", "value": location}] if location else []
        )
        return {
            "request": request,
            "response": {
                "status": status,
                "headers": headers,
                "cookies": [],
                "content": {"mimeType": "text/html", "text": body},
            },
            "_browserworker": {"id": f"0001.{i}", "dispatch": method == "POST"},
        }

    segment = {
        "segment": 1,
        "phase": "step",
        "step": "submit",
        "kind": "effect",
        "attempt": 1,
        "pass": 1,
        "dispatches": 0,
    }
    har = {
        "log": {
            "version": "1.2",
            "entries": [
                entry(
                    0,
                    "GET",
                    "/form",
                    200,
                    '<form method="post" action="/form"><input name="a" value="1"><button id="go">go</button></form>',
                ),
                entry(1, "POST", "/form", 303, location="/done", post="a=1"),
                entry(2, "GET", "/done", 200, '<p id="done">thanks</p>'),
            ],
            "_browserworker": segment,
        }
    }
    (root / "network").mkdir(parents=True)
    (root / "network" / "0001-submit.har").write_text(json.dumps(har))
    result = {"url": "https://shop.test/done", "text": "thanks"}
    (root / "meta.json").write_text(
        json.dumps(
            {
                "format": "browserworker-recording/1",
                "name": "https-form",
                "status": "complete",
                "run_id": "rec-https",
                "flow": {
                    "name": "https-form",
                    "file": str(TEST_FLOWS / "https_form.py"),
                    "hash": None,
                    "steps": [{"id": "submit", "kind": "effect", "idempotent": False, "verifier": False}],
                },
                "inputs": {"base_url": "https://shop.test"},
                "secret_fields": [],
                "verifiers": [],
                "segments": [{**segment, "file": "network/0001-submit.har", "entries": 3}],
            }
        )
    )
    (root / "journal.json").write_text(
        json.dumps(
            {
                "run": {"state": "SUCCEEDED"},
                "attempts": [
                    {
                        "step_id": "submit",
                        "attempt_no": 1,
                        "kind": "effect",
                        "state": "SUCCEEDED",
                        "decided_by": "return",
                        "request_key": "rec-https/submit",
                        "dispatched": True,
                        "result": result,
                        "fingerprint": "[redacted]",
                    }
                ],
            }
        )
    )


@pytest.mark.skipif(shutil.which("openssl") is None, reason="answering HTTPS redirect hops needs openssl")
def test_https_redirect_hop_is_answered_offline(tmp_path: Path) -> None:
    """An HTTPS form POST answered 303: the browser's follow-up GET (outside Playwright's routing)
    is answered by the replay proxy over TLS from the recording, so the page lands on /done."""
    write_https_recording(tmp_path / "rec")
    result = replay(tmp_path / "rec")
    assert result.ok, result.report()
    assert result.result_of("submit") == {"url": "https://shop.test/done", "text": "thanks"}
    assert result.served_count("GET", "/done") == 1
