"""Login sessions reused across runs and workers: one login per key, revoked sessions replaced,
sealed at rest, never in recordings or logs, racing logins, the `sessions` commands, expiry."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from browserworker import Flow
from browserworker.control import enqueue
from browserworker.errors import FlowDefinitionError, InputError
from browserworker.flow import load_flow
from browserworker.recording import replay
from browserworker.runtime import SessionSettings, generate_key
from browserworker.runtime._login_sessions import ENV_KEY, Sealer, SessionUnreadable, sealer_for
from browserworker.store import open_store
from tests.support.bw import BW
from tests.support.fleet import start_worker, wait_until_done
from tests.support.paths import TEST_FLOWS

FLOW = TEST_FLOWS / "session_order.py"
PASSWORD = "pw-for-sessions"


def new_user(shop: Any) -> str:
    user = f"u{uuid.uuid4().hex[:10]}"
    shop.add_user(user, PASSWORD)
    return user


def inputs(shop: Any, user: str, item: str) -> list[str]:
    return [
        "--input",
        f"base_url={shop.url}",
        "--input",
        f"item={item}",
        "--input",
        f"username={user}",
        "--input",
        f"password={PASSWORD}",
    ]


def key_env(store_target: str) -> dict[str, str]:
    """PostgreSQL has no file beside its database: its workers share a key from the environment."""
    return {ENV_KEY: generate_key()} if "://" in store_target else {}


def run(bw: BW, db: str, shop: Any, user: str, item: str, *extra: str, env: dict[str, str] | None = None) -> Any:
    done = bw.run("run", str(FLOW), "--db", db, *inputs(shop, user, item), *extra, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def decisions(bw: BW, db: str, run_id: str, env: dict[str, str] | None = None) -> list[str]:
    shown = bw.run("show", run_id, "--db", db, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    return [
        e["decision"]
        for e in json.loads(shown.stdout)["events"]
        if e["decision"] and e["decision"].startswith("session_")
    ]


def last_run_id(db: str) -> str:
    store = open_store(db)
    try:
        return store.list_runs(limit=1)[0].id
    finally:
        store.close()


def row(db: str, key: str) -> Any:
    store = open_store(db)
    try:
        return store.login_sessions.get(key)
    finally:
        store.close()


def saved_cookie(db: str, key: str, env: dict[str, str] | None = None) -> str:
    """The sandbox session cookie in the saved state (opened with the store's key: a library call)."""
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    store = open_store(db)
    try:
        sealer = sealer_for(store, SessionSettings.from_env())
        assert sealer is not None
        state = sealer.open(store.login_sessions.get(key).state, key)
    finally:
        store.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return next(c["value"] for c in state["cookies"] if c["name"] == "sandbox_session")


# -- the store: the login claim and versioned saves ---------------------------------------------


def test_two_connections_racing_for_a_login_claim_one_wins(store_target: str) -> None:
    """Two stores (two connections, two threads) claiming one key's login at once: exactly one
    wins; nobody claims past a save newer than the version it saw; an expired claim is taken
    over, and the stale writer whose claim was taken cannot overwrite the newer save."""
    a, b = open_store(store_target), open_store(store_target)
    try:
        gate = threading.Barrier(2)

        def claim(store: Any, owner: str) -> bool:
            gate.wait()
            return bool(store.login_sessions.claim("k", "f", owner, 30, 0))

        with ThreadPoolExecutor(2) as pool:
            won = dict(zip(("run-a", "run-b"), pool.map(claim, (a, b), ("run-a", "run-b")), strict=True))
        assert sorted(won.values()) == [False, True], won
        winner = next(o for o, w in won.items() if w)
        assert a.login_sessions.get("k").claimed(a.now()) and b.login_sessions.get("k").login_owner == winner
        (a if winner == "run-a" else b).login_sessions.release("k", winner)  # from here on, run-a holds it
        assert a.login_sessions.claim("k", "f", "run-a", 30, 0) and not b.login_sessions.claim("k", "f", "run-b", 30, 0)
        assert a.login_sessions.save("k", "f", "run-a", b"sealed-1", "kid", a.now(), 60) == 1
        saved = b.login_sessions.get("k")
        assert (saved.version, saved.login_owner, saved.state) == (1, None, b"sealed-1")
        # no claim for a caller that has not seen version 1 (it uses that one instead)
        assert not b.login_sessions.claim("k", "f", "run-b", 30, 0)
        # an expired claim is taken over; the old holder's late save of an earlier login is refused
        # (its login began a second before: each store's clock is a reading of the database's,
        # good to half a round trip, and a loaded host's round trips take milliseconds)
        early = a.now() - 1.0
        assert a.login_sessions.claim("k", "f", "run-a", 0.01, 1)
        deadline = time.monotonic() + 5
        while not b.login_sessions.claim("k", "f", "run-b", 30, 1):
            assert time.monotonic() < deadline
        assert b.login_sessions.save("k", "f", "run-b", b"sealed-2", "kid", b.now(), 60) == 2
        assert a.login_sessions.save("k", "f", "run-a", b"stale", "kid", early, 60) is None
        assert b.login_sessions.get("k").state == b"sealed-2"
        assert a.login_sessions.drop("k") and not b.login_sessions.drop("k")
    finally:
        a.close()
        b.close()


def test_sealed_state_needs_its_key_and_the_key_file_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state sealed with one key opens with it, not with another key nor under another
    session key; the SQLite key file is created 0600 once and never replaced."""
    monkeypatch.delenv(ENV_KEY, raising=False)
    state = {"cookies": [{"name": "sid", "value": "cookie-value-123"}], "origins": []}
    sealer = Sealer(os.urandom(32))
    sealed = sealer.seal(state, "alice")
    assert b"cookie-value-123" not in sealed and b"alice" not in sealed
    assert sealer.open(sealed, "alice") == state
    for other, key in ((Sealer(os.urandom(32)), "alice"), (sealer, "bob")):
        with pytest.raises(SessionUnreadable):
            other.open(sealed, key)
    store = open_store(tmp_path / "bw.db")
    try:
        first = sealer_for(store, SessionSettings.from_env())
        path = tmp_path / "bw.db.session-key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        text = path.read_text()
        assert sealer_for(store, SessionSettings.from_env()).key_id == first.key_id and path.read_text() == text
    finally:
        store.close()


def test_new_key_prints_a_key_the_store_seals_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sessions new-key` prints a fresh key each time; given as BROWSERWORKER_SESSION_KEY it is
    the store's sealing key (no key file is made); a malformed one is refused naming the command."""
    from click.testing import CliRunner

    from browserworker.cli import main
    from browserworker.runtime._login_sessions import SessionKeyError

    first, second = (CliRunner().invoke(main, ["sessions", "new-key"]) for _ in range(2))
    assert first.exit_code == 0 and second.exit_code == 0
    assert first.output.strip() != second.output.strip()
    monkeypatch.setenv(ENV_KEY, first.output.strip())
    store = open_store(tmp_path / "bw.db")
    try:
        sealer = sealer_for(store, SessionSettings.from_env())
        assert sealer.open(sealer.seal({"cookies": []}, "k"), "k") == {"cookies": []}
        assert not (tmp_path / "bw.db.session-key").exists()
        monkeypatch.setenv(ENV_KEY, "too-short")
        with pytest.raises(SessionKeyError, match="browserworker sessions new-key"):
            sealer_for(store, SessionSettings.from_env())
    finally:
        store.close()


def test_a_login_is_declared_once_first_and_only_with_a_session_key() -> None:
    """`@flow.login` needs `session=`, runs first whatever was declared before it, exists once,
    and its check must be `async def`; a session key that the inputs cannot give is an input
    error; a max age must be positive."""
    with pytest.raises(FlowDefinitionError, match="needs Flow"):
        Flow("plain").login(_noop)
    flow = Flow("keyed", session=lambda inputs: inputs.missing)
    flow.step(id="open")(_noop)
    login = flow.login(_noop)
    assert [s.id for s in flow.steps] == ["login", "open"] and flow.login_step is login
    with pytest.raises(FlowDefinitionError, match="already has a login"):
        flow.login(_noop)
    with pytest.raises(FlowDefinitionError, match="async def"):
        login.check(lambda ctx: True)  # type: ignore[arg-type, return-value]
    with pytest.raises(InputError, match="session key from the inputs failed"):
        flow.session_key(flow.validate_inputs({}))
    with pytest.raises(FlowDefinitionError, match="positive"):
        Flow("aged", session="k", session_max_age=0)
    assert Flow("aged", session="k", session_max_age=timedelta(hours=1)).session_max_age == 3600.0


async def _noop(ctx: Any) -> None:
    return None


# -- real runs ---------------------------------------------------------------------------------


@pytest.mark.browser
def test_twenty_runs_of_one_key_on_two_workers_log_in_once(store_target: str, tmp_path: Path, shop: Any) -> None:
    """20 runs for one user, drained by 2 worker processes at once, sign in once at the shop:
    one run logs in and saves the session, every other starts from it (racing runs wait for
    the login rather than logging in too); every run SUCCEEDED with its order placed once."""
    user = new_user(shop)
    env = key_env(store_target)
    store = open_store(store_target)
    loaded = load_flow(FLOW)
    try:
        ids = [
            enqueue(
                store,
                loaded,
                {"base_url": shop.url, "item": f"item-{i}", "username": user, "password": PASSWORD},
                run_id=f"s-{user}-{i:02d}",
            ).id
            for i in range(20)
        ]
    finally:
        store.close()
    procs = [start_worker(store_target, "--once", "-n", "2", env=env, log=tmp_path / f"w{i}.log") for i in range(2)]
    counts = wait_until_done(store_target, 20, timeout=240)  # type: ignore[arg-type]
    for p in procs:
        p.wait(60)
    assert counts["SUCCEEDED"] == 20, counts
    assert shop.logins(user) == 1
    for run_id in ids:
        assert len(shop.orders(f"{run_id}/submit")) == 1
    store = open_store(store_target)
    try:
        made = [e.decision for i in ids for e in store.events(i) if (e.decision or "").startswith("session_")]
        saved = store.login_sessions.get(user)
    finally:
        store.close()
    assert made.count("session_saved") == 1 and made.count("session_reused") == 19, made
    assert saved.uses == 20 and saved.version == 1
    cookie = saved_cookie(store_target, user, env)
    for i in range(2):  # nothing of the session in the workers' logs
        assert cookie not in (tmp_path / f"w{i}.log").read_text()


@pytest.mark.browser
def test_a_session_revoked_at_the_site_is_replaced_by_a_new_login(store_target: str, tmp_path: Path, shop: Any) -> None:
    """After the shop signs the user out, the next run's check fails: it logs in again (the
    shop counts 2 logins), replaces the saved state (a new version, saved later) and succeeds."""
    bw, user, env = BW(db=tmp_path / "bw.db"), new_user(shop), key_env(store_target)
    run(bw, store_target, shop, user, "tea", env=env)
    run(bw, store_target, shop, user, "tea", env=env)
    assert shop.logins(user) == 1
    before = row(store_target, user)
    shop.revoke_sessions(user)
    run(bw, store_target, shop, user, "tea", env=env)
    assert shop.logins(user) == 2
    after = row(store_target, user)
    assert after.version == before.version + 1 and after.saved_at > before.saved_at
    assert decisions(bw, store_target, last_run_id(store_target), env) == ["session_check_failed", "session_saved"]
    assert len(shop.orders()) >= 3 and all(len(shop.orders(f"{r.id}/submit")) == 1 for r in _runs(store_target))


def _runs(db: str) -> list[Any]:
    store = open_store(db)
    try:
        return store.list_runs()
    finally:
        store.close()


@pytest.mark.browser
def test_recordings_and_logs_never_hold_the_session_and_replays_follow_the_recorded_branch(
    tmp_path: Path, shop: Any
) -> None:
    """Recording a run that logs in and one that reuses the saved session: neither recording,
    nor the command's debug log, holds the session cookie or the username in the row's bytes;
    each recording replays offline as recorded (the login, or the reused session)."""
    bw, user = BW(db=tmp_path / "bw.db"), new_user(shop)
    db = str(bw.db)
    logs = [run(bw, db, shop, user, "tea", "--record", str(tmp_path / name)) for name in ("logged-in", "reused")]
    logs.append(bw.run("--log-level", "debug", "run", str(FLOW), "--db", db, *inputs(shop, user, "tea")))
    assert shop.logins(user) == 1
    cookie = saved_cookie(db, user)
    raw = row(db, user).state
    assert cookie.encode() not in raw and user.encode() not in raw
    for name in ("logged-in", "reused"):
        for path in (tmp_path / name).rglob("*"):
            if path.is_file():
                assert cookie not in path.read_text(errors="replace"), path
    for done in logs:
        assert cookie not in done.stdout + done.stderr
    results = {name: replay(tmp_path / name) for name in ("logged-in", "reused")}
    for name, result in results.items():
        assert result.ok, (name, result.report())
    made = {
        name: [e.decision for e in r.events if (e.decision or "").startswith("session_")] for name, r in results.items()
    }
    assert made == {"logged-in": ["session_saved"], "reused": ["session_reused"]}


@pytest.mark.browser
def test_sessions_commands_list_drop_and_expire(tmp_path: Path, shop: Any) -> None:
    """`sessions` lists the saved key (never its state), `--json` says it is readable and not
    expired, and unreadable under another key; a session past its max age is listed expired
    and the next run logs in again; `sessions drop` forgets it, and dropping an unknown key
    exits 2 naming it."""
    bw, user = BW(db=tmp_path / "bw.db"), new_user(shop)
    db = str(bw.db)
    run(bw, db, shop, user, "tea")
    cookie = saved_cookie(db, user)
    listed = bw.run("sessions", "--db", db)
    assert listed.returncode == 0 and user in listed.stdout and "session-order" in listed.stdout
    assert cookie not in listed.stdout
    data = json.loads(bw.run("sessions", "--db", db, "--json").stdout)
    mine = next(s for s in data["sessions"] if s["key"] == user)
    assert (mine["readable"], mine["expired"], mine["uses"], mine["version"]) == (True, False, 1, 1)
    other = json.loads(bw.run("sessions", "--db", db, "--json", env={ENV_KEY: generate_key()}).stdout)
    assert next(s for s in other["sessions"] if s["key"] == user)["readable"] is False
    short = {"BROWSERWORKER_SESSION_MAX_AGE": "1"}
    deadline = time.monotonic() + 10
    while not next(
        s
        for s in json.loads(bw.run("sessions", "--db", db, "--json", env=short).stdout)["sessions"]
        if s["key"] == user
    )["expired"]:
        assert time.monotonic() < deadline
    run(bw, db, shop, user, "tea", env=short)
    assert shop.logins(user) == 2
    dropped = bw.run("sessions", "drop", user, "--db", db)
    assert dropped.returncode == 0, dropped.stderr
    assert user not in bw.run("sessions", "--db", db).stdout
    missing = bw.run("sessions", "drop", user, "--db", db)
    assert missing.returncode == 2 and f"no saved login session with key '{user}'" in missing.stderr


@pytest.mark.browser
def test_postgresql_without_a_session_key_says_which_variable(pg_url: str, tmp_path: Path, shop: Any) -> None:
    """On PostgreSQL with no BROWSERWORKER_SESSION_KEY, a run of a flow with a session fails
    naming the variable (nothing is ordered), and `sessions` says it cannot read the sessions."""
    bw, user = BW(db=tmp_path / "bw.db"), new_user(shop)
    env = {k: v for k, v in os.environ.items() if k != ENV_KEY}
    done = bw.run("run", str(FLOW), "--db", pg_url, *inputs(shop, user, "tea"), env={**env, ENV_KEY: ""})
    assert done.returncode == 1 and ENV_KEY in done.stdout + done.stderr
    assert shop.logins(user) == 0
    listed = bw.run("sessions", "--db", pg_url, env={ENV_KEY: ""})
    assert listed.returncode == 0 and ENV_KEY in listed.stderr


def test_the_sandbox_counts_logins_and_revoked_sessions_are_logged_out(shop: Any) -> None:
    """The sandbox counts each successful login per user (GET /api/logins), and after
    POST /api/sessions/revoke a cookie issued before is treated as logged out."""
    import http.cookiejar
    import re
    import urllib.parse
    import urllib.request

    user = new_user(shop)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), NoRedirect, urllib.request.ProxyHandler({})
    )

    def status(path: str, form: dict[str, str] | None = None) -> tuple[int, str]:
        data = None if form is None else urllib.parse.urlencode(form).encode()
        try:
            with opener.open(shop.url + path, data=data, timeout=10) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    token = re.search(r'name="csrf_token" value="([^"]+)"', status("/login")[1]).group(1)  # type: ignore[union-attr]
    assert status("/login", {"csrf_token": token, "username": user, "password": PASSWORD})[0] == 303
    assert shop.logins(user) == 1 and status("/orders/new")[0] == 200
    shop.revoke_sessions(user)
    assert status("/orders/new")[0] == 303  # to /login: signed out on the server's side
    assert shop.logins(user) == 1
