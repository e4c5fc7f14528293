"""Console sessions kept in the store, tried with a captured cookie over the app itself (no
browser, no server): signing out, signing out everywhere, a changed token and an expired
session each leave a saved cookie worth nothing; and a refused `console` start writes nothing."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from browserworker.console.app import create_app
from browserworker.console.auth import SESSION_SECONDS, load_keys
from browserworker.store import SQLStore, open_store
from browserworker.store.records import NewRun
from browserworker.store.testing import backdate_console_sessions

OPERATOR, VIEWER = "op-token-" + "a" * 24, "ro-token-" + "b" * 24
ENV = {"BROWSERWORKER_CONSOLE_TOKEN": OPERATOR, "BROWSERWORKER_CONSOLE_READONLY_TOKEN": VIEWER}


def _app(store: SQLStore, tmp_path: Path, env: dict[str, str] = ENV) -> Any:
    keys, _ = load_keys(tmp_path / "keys", env)
    return create_app(store, keys, evidence_dir=tmp_path / "evidence", recordings_dir=tmp_path)


def _client(app: Any, cookie: str | None = None) -> httpx.AsyncClient:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
    if cookie is not None:
        client.cookies.set("bw_console", cookie)
    return client


async def _sign_in(client: httpx.AsyncClient, token: str, name: str = "ann") -> str:
    done = await client.post("/login", data={"name": name, "token": token})
    assert done.status_code == 303, done.text
    return client.cookies["bw_console"]


async def _csrf(client: httpx.AsyncClient) -> str:
    page = await client.get("/runs")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def _run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())


def test_sign_out_ends_the_session_of_a_captured_cookie(any_store: SQLStore, tmp_path: Path) -> None:
    """After Sign out, a saved copy of the cookie loads no page (sent to the login) and its
    cancel POST, with the session's CSRF token, is refused (401) and cancels nothing."""
    any_store.create_run(NewRun(id="keep-1", flow_name="f", inputs={}, queue="q"))
    app = _app(any_store, tmp_path)

    async def use() -> None:
        async with _client(app) as client:
            captured = await _sign_in(client, OPERATOR)
            csrf = await _csrf(client)
            assert (await client.get("/review")).status_code == 200
            out = await client.post("/logout", data={"csrf": csrf})
            assert out.status_code == 303 and out.headers["location"] == "/login"
        async with _client(app, captured) as thief:
            page = await thief.get("/review")
            assert page.status_code == 303 and page.headers["location"] == "/login"
            cancel = await thief.post("/runs/action", data={"action": "cancel", "run": "keep-1", "csrf": csrf})
            assert cancel.status_code == 401

    _run(use)
    assert any_store.get_run("keep-1").state == "QUEUED"  # type: ignore[union-attr]
    assert any_store.console_sessions.count() == 0


def test_sign_out_everywhere_ends_every_session_of_that_name_and_role(any_store: SQLStore, tmp_path: Path) -> None:
    """Sign out everywhere from one browser ends both of Ann's operator sessions; Bob's session
    and Ann's read-only session go on."""
    app = _app(any_store, tmp_path)

    async def use() -> None:
        async with _client(app) as first, _client(app) as second, _client(app) as bob, _client(app) as viewer:
            await _sign_in(first, OPERATOR)
            other = await _sign_in(second, OPERATOR)
            await _sign_in(bob, OPERATOR, "bob")
            await _sign_in(viewer, VIEWER)
            done = await first.post("/logout", data={"csrf": await _csrf(first), "everywhere": "1"})
            assert done.status_code == 303
            async with _client(app, other) as saved:
                assert (await saved.get("/runs")).status_code == 303
            assert (await bob.get("/runs")).status_code == 200
            assert (await viewer.get("/runs")).status_code == 200

    _run(use)
    assert any_store.console_sessions.count() == 2


def test_a_changed_token_ends_its_sessions(any_store: SQLStore, tmp_path: Path) -> None:
    """A console started with a new operator token refuses a cookie signed in with the old one
    (the keys file, and so the cookie's signature, unchanged); the start's clean-up deletes
    that session's row and keeps the read-only one, whose token did not change."""
    old = _app(any_store, tmp_path)

    async def sign_in_both() -> tuple[str, str]:
        async with _client(old) as op, _client(old) as ro:
            return await _sign_in(op, OPERATOR), await _sign_in(ro, VIEWER, "vic")

    captured, viewer = asyncio.run(sign_in_both())
    rotated = {**ENV, "BROWSERWORKER_CONSOLE_TOKEN": "op-token-" + "c" * 24}
    keys, _ = load_keys(tmp_path / "keys", rotated)
    new = create_app(any_store, keys, evidence_dir=tmp_path / "evidence", recordings_dir=tmp_path)

    async def use() -> None:
        async with _client(new, captured) as saved:
            assert (await saved.get("/runs")).status_code == 303
        async with _client(new, viewer) as ro:
            assert (await ro.get("/runs")).status_code == 200

    _run(use)
    assert any_store.console_sessions.end_stale({r: keys.token_key(r) for r in keys.hashes}) == 1
    assert any_store.console_sessions.count() == 1


def test_an_expired_session_is_refused(any_store: SQLStore, tmp_path: Path) -> None:
    """A session whose row's expiry has passed (back-dated, not waited for) loads no page."""
    app = _app(any_store, tmp_path)

    async def use() -> None:
        async with _client(app) as client:
            await _sign_in(client, OPERATOR)
            assert (await client.get("/runs")).status_code == 200
            assert backdate_console_sessions(any_store, SESSION_SECONDS + 1) == 1
            assert (await client.get("/runs")).status_code == 303

    _run(use)


def test_the_store_keeps_sessions_by_the_hash_of_their_id(any_store: SQLStore) -> None:
    """create/get/end on both stores: a session is found by its id while live, the row keeps only
    the id's SHA-256, end and end_all delete, end_stale clears expired rows and other tokens'."""
    s = any_store.console_sessions
    s.create("sid-1", "ann", "operator", "k-op", 60)
    s.create("sid-2", "ann", "operator", "k-op", 60)
    s.create("sid-3", "vic", "viewer", "k-ro", 60)
    found = s.get("sid-1")
    assert found is not None and (found.name, found.role, found.token_key) == ("ann", "operator", "k-op")
    assert s.get("sid-x") is None
    row = any_store.connector.read_one(
        "console_session_get", {"id_hash": hashlib.sha256(b"sid-1").hexdigest(), "now": any_store.now()}
    )
    assert row is not None and "sid-1" not in [str(v) for v in dict(row).values()]
    assert s.end("sid-1") and not s.end("sid-1") and s.get("sid-1") is None
    assert s.end_all("ann", "viewer") == 0 and s.end_all("ann", "operator") == 1
    s.create("sid-4", "bob", "operator", "k-op", 60)
    assert s.end_stale({"operator": "k-op", "viewer": "k-ro"}) == 0
    backdate_console_sessions(any_store, 120)
    assert s.get("sid-4") is None  # expired: refused before it is cleared
    assert s.end_stale({"operator": "k-op", "viewer": "k-ro"}) == 2 and s.count() == 0


def _files(where: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(where.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    "env, host, why",
    [
        ({"BROWSERWORKER_CONSOLE_TOKEN": "short"}, "127.0.0.1", "too short"),
        ({"BROWSERWORKER_CONSOLE_READONLY_TOKEN": "short"}, "127.0.0.1", "too short"),
        (
            {"BROWSERWORKER_CONSOLE_TOKEN": OPERATOR, "BROWSERWORKER_CONSOLE_READONLY_TOKEN": OPERATOR},
            "127.0.0.1",
            "must differ",
        ),
        ({"BROWSERWORKER_CONSOLE_TOKEN": OPERATOR}, "0.0.0.0", "BROWSERWORKER_CONSOLE_READONLY_TOKEN"),
    ],
)
def test_a_refused_start_writes_nothing_and_the_next_start_prints_both_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], host: str, why: str
) -> None:
    """`console` refused (a short token, equal tokens, or beyond loopback with only the operator
    token) exits 2 with the reason, prints no token and leaves the directory byte for byte as it
    was (no keys file, the database untouched); the next start without tokens prints both."""
    from click.testing import CliRunner

    from browserworker.cli import main

    db = tmp_path / "browserworker.db"
    open_store(db).close()
    before = _files(tmp_path)
    served: list[str] = []
    monkeypatch.setattr("browserworker.console.serve", lambda store, keys, **kw: served.append(kw["host"]))
    blank = {"BROWSERWORKER_CONSOLE_TOKEN": None, "BROWSERWORKER_CONSOLE_READONLY_TOKEN": None}
    refused = CliRunner().invoke(main, ["console", "--db", str(db), "--host", host], env={**blank, **env})
    assert refused.exit_code == 2 and why in refused.output and "shown once" not in refused.output
    assert _files(tmp_path) == before and served == []
    started = CliRunner().invoke(main, ["console", "--db", str(db)], env=blank)
    assert started.exit_code == 0, started.output
    assert "operator token (shown once" in started.output and "read-only token (shown once" in started.output
    assert served == ["127.0.0.1"]


def test_beyond_loopback_with_both_tokens_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With both tokens in the environment, a non-loopback --host is accepted and no token is printed."""
    from click.testing import CliRunner

    from browserworker.cli import main

    db = tmp_path / "browserworker.db"
    open_store(db).close()
    served: list[str] = []
    monkeypatch.setattr("browserworker.console.serve", lambda store, keys, **kw: served.append(kw["host"]))
    started = CliRunner().invoke(main, ["console", "--db", str(db), "--host", "0.0.0.0"], env=ENV)
    assert started.exit_code == 0, started.output
    assert "shown once" not in started.output and served == ["0.0.0.0"]
