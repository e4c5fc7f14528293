"""Recording and replaying a page that builds itself after its load, as single-page apps do
(Gradio's, for one): what it asks for across a step's end is recorded with its answer, the
values it makes up (a session id drawn at each load) and the state it keeps in ``localStorage``
(the run id it was typed, a word) do not keep its replay from matching."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from browserworker.flow import load_flow
from browserworker.recording import REDACTED, Recording, record, replay
from browserworker.runtime import BrowserSettings, Engine, RunRequest, prepare_run
from browserworker.store.sqlite import SQLiteStore
from tests.support.paths import TEST_FLOWS
from tests.support.spa_target import SpaTarget

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def entries(rec: Recording) -> list[dict[str, Any]]:
    return [e for _, es in rec.segments() for e in es]


def test_a_single_page_app_is_recorded_whole_and_replays_offline(tmp_path: Path) -> None:
    """The page's parts, asked for after its load while the step that opened it has returned, are
    each recorded with their answer (none cut off without one, none lost between two segments);
    the run id the page keeps in ``localStorage`` is not taken for a secret, nor is the word it
    keeps beside it; with the target stopped, the replay answers the session id the page draws
    anew as the recorded one, matches the recording, and a crash as the order's reply is lost
    resumes to the verifier's proof."""
    store = SQLiteStore(tmp_path / "bw.db")
    with SpaTarget() as target:
        try:
            loaded = load_flow(TEST_FLOWS / "spa_order.py")
            run, _ = prepare_run(store, RunRequest(loaded=loaded, run_id="rec-spa-1", inputs={"base_url": target.url}))
            engine = Engine(store, browser=BrowserSettings.discover())
            final = asyncio.run(record(engine, loaded, run, name=tmp_path / "rec")).run
        finally:
            store.close()
        assert final.state == "SUCCEEDED"
        assert target.orders == {"rec-spa-1": 1} and target.previews >= 1

    rec = Recording.load(tmp_path / "rec")
    recorded = entries(rec)
    parts = sorted(e["request"]["url"].rsplit("=", 1)[1] for e in recorded if "/part.js" in e["request"]["url"])
    assert parts == ["1", "2", "3", "4"], parts
    cut = [
        e["request"]["url"]
        for e in recorded
        if e["response"]["status"] <= 0
        and not any(stream in e["request"]["url"] for stream in ("/events", "/heartbeat/"))
    ]
    assert not cut, f"recorded with no answer: {cut}"
    assert rec.meta["run_id"] == "rec-spa-1"
    assert not [e["request"]["url"] for e in recorded if REDACTED in e["request"]["url"]]

    result = replay(tmp_path / "rec")  # the target is stopped: every answer comes from the recording
    assert result.ok, result.report()
    assert [n for n in result.notes if "the page made up" in n], result.report()

    crashed = replay(tmp_path / "rec", crash_at="order:reply_lost")
    assert crashed.state == "SUCCEEDED", crashed.report()
    assert crashed.attempts_of("order")[-1].decided_by == "verifier", crashed.report()
