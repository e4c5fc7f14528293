"""Recording live runs against the sandbox: nothing secret is written, the recording replays with
the sandbox stopped, verifier self-tests catch a broken verifier, and `run --record` is guarded."""

from __future__ import annotations

import asyncio
import json
import uuid
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from browserworker._redact import DEFAULT_FIELDS
from browserworker.flow import load_flow
from browserworker.recording import REDACTED, Recording, record, replay
from browserworker.runtime import BrowserSettings, Engine, RunRequest, prepare_run
from browserworker.sandbox.db import SandboxDB
from browserworker.sandbox.testing import start_sandbox
from browserworker.store.sqlite import SQLiteStore
from tests.support.bw import BW
from tests.support.channel_target import ChannelTarget
from tests.support.paths import TEST_FLOWS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


class CookieSpy:
    """A step observer that collects the browser's real cookie values, to search the recording for."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    async def before_step(self, ctx: Any, step: Any, context: Any) -> None:
        pass

    async def after_step(self, ctx: Any, step: Any, context: Any, attempt: Any) -> None:
        self.values |= {c["value"] for c in await context.cookies() if len(c["value"]) >= 8}


def texts(root: Path) -> dict[str, str]:
    """Every file of a recording as text, zip members (traces) unpacked."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as z:
                for name in z.namelist():
                    out[f"{path.relative_to(root)}!{name}"] = z.read(name).decode("utf-8", errors="replace")
        else:
            out[str(path.relative_to(root))] = path.read_bytes().decode("utf-8", errors="replace")
    return out


def entries(rec: Recording) -> list[dict[str, Any]]:
    return [e for _, es in rec.segments() for e in es]


def test_a_recording_keeps_no_secret_and_replays_with_the_sandbox_stopped(tmp_path: Path) -> None:
    """Recording a flow with a password, a secret API token (header, query, JSON) and a redact=
    field writes none of their values, nor any cookie value, to any file (traces included); the
    same redaction on replay lets the recording match, with the sandbox that served it stopped."""
    secret = {
        "password": f"pw-{uuid.uuid4().hex}",
        "api_token": f"tok-{uuid.uuid4().hex}",
        "note": f"note-{uuid.uuid4().hex}",
    }
    SandboxDB(tmp_path / "shop.db").add_user("tester", secret["password"])
    shop = start_sandbox(tmp_path / "shop.db")
    spy = CookieSpy()
    store = SQLiteStore(tmp_path / "bw.db")
    try:
        loaded = load_flow(TEST_FLOWS / "secret_order.py")
        run, _ = prepare_run(
            store,
            RunRequest(
                loaded=loaded, run_id="rec-secret", inputs={"base_url": shop.url, "username": "tester", **secret}
            ),
        )
        engine = Engine(store, browser=BrowserSettings.discover())
        final = asyncio.run(record(engine, loaded, run, name=tmp_path / "rec", trace=True, extensions=[spy])).run
    finally:
        shop.stop()
        store.close()
    assert final.state == "SUCCEEDED"
    assert spy.values, "the run should have had a session cookie"

    files = texts(tmp_path / "rec")
    assert any(name.startswith("trace/") for name in files) and any(name.startswith("bodies/") for name in files)
    for value in [*secret.values(), *spy.values]:
        leaks = [name for name, text in files.items() if value in text]
        assert not leaks, f"{value[:12]}... written to {leaks}"

    rec = Recording.load(tmp_path / "rec")
    assert rec.meta["secret_fields"] == sorted(
        DEFAULT_FIELDS | {"password", "api_token", "note"}
    )  # the flow's, and the default names
    assert rec.meta["password_fields"] == ["password"]
    assert rec.meta["inputs"]["api_token"] == REDACTED and rec.meta["inputs"]["username"] == "tester"
    [lookup] = [e for e in entries(rec) if "/api/orders?" in e["request"]["url"]]
    query = parse_qs(urlsplit(lookup["request"]["url"]).query)
    assert query["token"] == [REDACTED] and query["note"] == [REDACTED]  # by value, and by the flow's redact=
    assert {h["name"].lower(): h["value"] for h in lookup["request"]["headers"]}["authorization"] == REDACTED

    result = replay(tmp_path / "rec")  # the shop is stopped: every answer comes from the recording
    assert result.ok, result.report()
    assert result.result_of("submit") == rec.journal["attempts"][2]["result"]


def test_a_pass_resumed_after_a_crash_opens_its_pages_as_a_fresh_session_did(tmp_path: Path) -> None:
    """A flow opens the order form before signing in: recorded, that address was answered with
    the sign-in form, then (after signing in) with the order form. Replayed with a crash as the
    order's reply is lost, the resumed pass (a new context, signed out) is answered as the
    recording's was at each step: the sign-in form first, so it signs in, and its verifier finds
    the order; it is not handed the signed-in page, whose missing sign-in form it would wait for."""
    shop = start_sandbox(tmp_path / "shop.db")
    store = SQLiteStore(tmp_path / "bw.db")
    try:
        loaded = load_flow(TEST_FLOWS / "signin_first.py")
        run, _ = prepare_run(
            store, RunRequest(loaded=loaded, run_id="rec-signin", inputs={"base_url": shop.url, "item": "tea"})
        )
        engine = Engine(store, browser=BrowserSettings.discover())
        final = asyncio.run(record(engine, loaded, run, name=tmp_path / "rec")).run
    finally:
        shop.stop()
        store.close()
    assert final.state == "SUCCEEDED"
    forms = [e for e in entries(Recording.load(tmp_path / "rec")) if e["request"]["url"].endswith("/orders/new")]
    statuses = [e["response"]["status"] for e in forms]
    assert statuses[0] == 303 and 200 in statuses, f"answered differently before and after signing in: {statuses}"

    result = replay(tmp_path / "rec", crash_at="submit:reply_lost")
    assert result.state == "SUCCEEDED", result.report()
    assert [a.state for a in result.attempts_of("sign_in")] == ["SUCCEEDED", "SUCCEEDED"], "signed in again"
    assert result.attempts_of("submit")[-1].decided_by == "verifier", result.report()


def test_a_recorded_socket_is_said_unreplayable_and_its_replay_sends_nothing(
    bw: BW, run_id: str, tmp_path: Path
) -> None:
    """A run whose page opens a WebSocket is recorded with a notice that a replay cannot answer
    the socket (``unreplayable`` in meta.json); its replay refuses the socket's handshake,
    saying why, so the page's socket never opens, and differs from the recording."""
    with ChannelTarget() as target:
        flow = str(TEST_FLOWS / "socket_page.py")
        done = bw.run(
            "run", flow, "--run-id", run_id, "--input", f"base_url={target.url}", "--record", str(tmp_path / "ws")
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "a WebSocket" in done.stderr and "replays refuse it" in done.stderr, done.stderr[-2000:]
        meta = json.loads((tmp_path / "ws" / "meta.json").read_text())
        socket = target.url.replace("http://", "ws://", 1) + "/ws"
        assert [u for u in meta["unreplayable"] if u.startswith(socket)], meta
        assert Recording.load(tmp_path / "ws").journal["attempts"][0]["result"] == {"title": "open"}
    result = replay(tmp_path / "ws")
    assert any("opens a WebSocket" in r for r in result.refusals), result.report()
    assert not result.ok and result.result_of("open_page") == {"title": ""}, "the socket never opened"


def test_recording_reports_a_broken_verifier_and_keeps_both_verifier_pages(
    bw: BW, shop: Any, run_id: str, tmp_path: Path
) -> None:
    """`run --record` asks the verifier before the dispatch and after the effect; a verifier that
    cannot find the landed effect is reported as broken in the output and in meta.json, and the
    run exits 7 although it SUCCEEDED (the recording is written); the pages the verifier saw
    both times are part of the recording."""
    done = bw.run(
        "run",
        str(TEST_FLOWS / "broken_verifier.py"),
        "--db",
        str(bw.db),
        "--run-id",
        run_id,
        "--record",
        str(tmp_path / "rec"),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
    )
    assert done.returncode == 7, done.stderr
    assert f"run {run_id}: SUCCEEDED" in done.stderr
    assert "verifier self-test before the dispatch: said not_done (ok)" in done.stderr
    assert "verifier BROKEN: after the effect it said not_done, expected done" in done.stderr
    assert "error: verifier BROKEN for submit" in done.stderr
    meta = json.loads((tmp_path / "rec" / "meta.json").read_text())
    assert meta["broken_verifiers"] == ["submit"]
    assert [(v["phase"], v["ok"]) for v in meta["verifiers"]] == [("before", True), ("after", False)]
    phases = [s["phase"] for s in meta["segments"] if s["step"] == "submit"]
    assert phases == ["verify_before", "step", "verify_after"]

    again = bw.run(
        "run",
        str(TEST_FLOWS / "broken_verifier.py"),
        "--db",
        str(bw.db),
        "--run-id",
        run_id,
        "--record",
        str(tmp_path / "rec2"),
    )
    assert again.returncode == 2 and "--record needs a new run" in again.stderr
    assert not (tmp_path / "rec2").exists()


def test_trace_needs_record(bw: BW) -> None:
    """`run --trace` without `--record` is a usage error (exit 2), nothing run."""
    done = bw.run_flow("place_order.py", "--trace", "--input", "base_url=http://127.0.0.1:9", "--input", "item=x")
    assert done.returncode == 2 and "--trace needs --record" in done.stderr
    assert not bw.db.exists()


def test_record_refuses_to_replace_an_existing_recording(bw: BW, tmp_path: Path) -> None:
    """`run --record NAME` into a name that already holds a recording exits 2 before anything is
    written (no run, no database, the recording untouched); `--force` is needed to replace it."""
    existing = tmp_path / "recordings" / "place-order"
    existing.mkdir(parents=True)
    (existing / "meta.json").write_text('{"kept": true}')
    done = bw.run_flow(
        "place_order.py", "--record", "place-order", "--input", "base_url=http://127.0.0.1:9", "--input", "item=x"
    )
    assert done.returncode == 2, done.stderr
    assert "already holds a recording" in done.stderr and "--force" in done.stderr
    assert not bw.db.exists()
    assert (existing / "meta.json").read_text() == '{"kept": true}'
    alone = bw.run_flow("place_order.py", "--force", "--input", "base_url=http://127.0.0.1:9", "--input", "item=x")
    assert alone.returncode == 2 and "--force needs --record" in alone.stderr
    assert not bw.db.exists()
