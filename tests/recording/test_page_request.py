"""Recording and replaying a flow whose every request goes through ``page.request`` (Playwright's
driver, not the browser, makes those): the login, the effect's POST, and a verifier and a count
probe that look the order up over HTTP are all in the recording and answered offline."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from browserworker.flow import load_flow
from browserworker.recording import Recording, record, replay
from browserworker.runtime import BrowserSettings, Engine, RunRequest, prepare_run
from browserworker.sandbox.db import SandboxDB
from browserworker.sandbox.testing import start_sandbox
from browserworker.store.sqlite import SQLiteStore
from tests.support.paths import TEST_FLOWS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def api_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording of the api-verifier flow, made against a sandbox that is stopped afterwards."""
    tmp = tmp_path_factory.mktemp("api-rec")
    SandboxDB(tmp / "shop.db").add_user("tester", "pw-api-verifier")
    shop = start_sandbox(tmp / "shop.db")
    store = SQLiteStore(tmp / "bw.db")
    try:
        loaded = load_flow(TEST_FLOWS / "api_verifier.py")
        run, _ = prepare_run(
            store,
            RunRequest(
                loaded=loaded,
                run_id="rec-api",
                inputs={"base_url": shop.url, "item": "tea", "username": "tester", "password": "pw-api-verifier"},
            ),
        )
        engine = Engine(store, browser=BrowserSettings.discover())
        recorded = asyncio.run(record(engine, loaded, run, name=tmp / "rec"))
        assert recorded.run.state == "SUCCEEDED"
        assert len(shop.orders()) == 1
    finally:
        shop.stop()
        store.close()
    return tmp / "rec"


def _api_entries(rec: Recording) -> list[tuple[str, str, str, int]]:
    out = []
    for segment, entries in rec.segments():
        for e in entries:
            out.append(
                (
                    segment.phase,
                    e["request"]["method"],
                    e["request"]["url"].split("?")[0].rsplit("/", 2)[-1],
                    e["response"]["status"],
                )
            )
    return out


def test_page_request_calls_are_in_the_recording(api_recording: Path) -> None:
    """Every page.request call is a recorded entry of the segment it was made in: the login's GET and
    POST, the effect's POST (marked as the dispatch) and the verifier's lookups before the dispatch
    and after the effect; both verifier self-tests pass (no "verifier BROKEN")."""
    rec = Recording.load(api_recording)
    seen = _api_entries(rec)
    assert ("step", "GET", "login", 200) in seen, seen
    assert any(entry[:3] == ("step", "POST", "login") for entry in seen), seen
    assert ("step", "POST", "orders", 201) in seen, seen
    assert ("verify_before", "GET", "orders", 200) in seen and ("verify_after", "GET", "orders", 200) in seen, seen
    dispatches = [e for _, entries in rec.segments() for e in entries if e.get("_browserworker", {}).get("dispatch")]
    assert [(e["request"]["method"], e["request"]["url"].rsplit("/", 1)[-1]) for e in dispatches] == [
        ("POST", "orders")
    ]
    assert rec.meta["broken_verifiers"] == [] and [v["ok"] for v in rec.meta["verifiers"]] == [True, True]
    assert rec.meta["unreplayable"] == []
    assert "pw-api-verifier" not in json.dumps([e for _, es in rec.segments() for e in es])


def test_a_page_request_flow_replays_offline(api_recording: Path) -> None:
    """With the shop stopped, the replay answers the page.request calls from the recording (through
    the replay proxy's tunnel for plain HTTP) and ends as recorded, with nothing refused."""
    result = replay(api_recording)
    assert result.ok, result.report()
    assert result.state == "SUCCEEDED" and result.refusals == []
    assert result.dispatches == {"submit": 1}


def test_a_crash_with_the_reply_lost_is_decided_by_the_recorded_api_lookup(api_recording: Path) -> None:
    """Killed after the order POST reached the recorded shop, before its reply: the resume's verifier
    looks the order up over page.request, gets the recorded "after" answer, and the order is not
    sent again."""
    result = replay(api_recording, crash_at="submit:reply_lost")
    assert result.crash_exit == -9
    assert result.state == "SUCCEEDED", result.report()
    assert [(str(a.state), str(a.decided_by)) for a in result.attempts_of("submit")] == [("SUCCEEDED", "verifier")]
    assert result.dispatches == {"submit": 1}
    assert "duplicate_prevented" in result.decisions()
