"""An agent's session as the kit's other runs are: its site's budget applies, its login is saved
and reused under a session key, and it is taken up again after a reconnect (``resume``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from browserworker.agent import AgentPolicy, AgentService
from browserworker.mcp import build_server
from browserworker.sandbox.app import SESSION_COOKIE
from browserworker.states import RunState
from browserworker.store import Store, open_store
from tests.support.agent import Agent, order_verify
from tests.support.bw import BW

pytestmark = pytest.mark.browser


@asynccontextmanager
async def server(store: Store, policy: AgentPolicy | None = None) -> AsyncIterator[Agent]:
    """One server process's worth: its service, its browser, its sessions (handed back on exit)."""
    service = AgentService(store, policy=policy)
    try:
        async with Client(build_server(service)) as client:
            yield Agent(client)
    finally:
        await service.aclose()


def test_a_sites_budget_holds_a_new_session_and_leaves_nothing_waiting(tmp_path: Path, shop: Any) -> None:
    """With the site's limit key at one session at a time, a second session is refused with what
    holds it, its run cancelled (nothing left in a queue); once the first ends, a new one opens."""
    store = open_store(tmp_path / "browserworker.db")
    key = shop.url.split("://", 1)[1]
    store.set_limit(key, concurrency=1)

    async def scenario() -> None:
        async with server(store, AgentPolicy(wait=0.5)) as agent:
            first = await agent.call("open_session", site=f"{shop.url}/")
            assert first["limit_key"] == key
            said = await agent.error("open_session", site=f"{shop.url}/orders")
            assert f"the budget of {key}" in said
            await agent.call("close_session", run_id=first["run_id"])
            third = await agent.call("open_session", site=f"{shop.url}/")
            await agent.call("close_session", run_id=third["run_id"])

    asyncio.run(scenario())
    states = sorted(str(r.state) for r in store.list_runs(None, limit=10))
    assert states == ["CANCELLED", "SUCCEEDED", "SUCCEEDED"]


def test_a_saved_login_is_reused_by_the_next_session_of_its_key(tmp_path: Path, shop: Any) -> None:
    """A session opened with a session key signs in and saves its login (sealed); the next session
    of that key starts signed in: no login page, no second login at the shop."""
    store = open_store(tmp_path / "browserworker.db")
    logins = shop.logins("demo")

    async def scenario() -> None:
        async with server(store) as agent:
            opened = await agent.call("open_session", site=f"{shop.url}/login?next=/orders/new", session_key="shop")
            assert opened["saved_login"] == "none"
            run_id = opened["run_id"]
            await agent.call("fill", run_id=run_id, selector="#username", value="demo")
            await agent.call("fill", run_id=run_id, selector="#password", value="demo")
            await agent.call("submit", run_id=run_id, selector="#login", idempotent=True)
            saved = await agent.call("save_login", run_id=run_id)
            assert saved["saved_login"] == "saved"
            await agent.call("close_session", run_id=run_id)
            again = await agent.call("open_session", site=f"{shop.url}/orders/new", session_key="shop")
            assert again["saved_login"] == "reused" and again["url"].endswith("/orders/new"), again
            await agent.call("close_session", run_id=again["run_id"])
            plain = await agent.call("open_session", site=f"{shop.url}/")
            assert "no session_key" in await agent.error("save_login", run_id=plain["run_id"])
            await agent.call("close_session", run_id=plain["run_id"])

    asyncio.run(scenario())
    assert shop.logins("demo") == logins + 1


def test_a_login_saved_again_replaces_one_the_site_has_ended(tmp_path: Path, shop: Any) -> None:
    """A session starts from its key's saved login; the site ends that login (as an expiry
    would), so the agent signs in again and saves: the new login replaces the dead one (the
    session started from it, but what it holds now is saved), and the next session of the key
    starts signed in."""
    store = open_store(tmp_path / "browserworker.db")
    logins = shop.logins("demo")

    async def sign_in(agent: Agent, run_id: str) -> None:
        await agent.call("fill", run_id=run_id, selector="#username", value="demo")
        await agent.call("fill", run_id=run_id, selector="#password", value="demo")
        await agent.call("submit", run_id=run_id, selector="#login", idempotent=True)

    async def scenario() -> None:
        async with server(store) as agent:
            first = await agent.call("open_session", site=f"{shop.url}/login?next=/orders/new", session_key="shop")
            await sign_in(agent, first["run_id"])
            assert (await agent.call("save_login", run_id=first["run_id"]))["saved_login"] == "saved"
            await agent.call("close_session", run_id=first["run_id"])
            shop.revoke_sessions("demo")
            again = await agent.call("open_session", site=f"{shop.url}/orders/new", session_key="shop")
            assert again["saved_login"] == "reused" and "/login" in again["url"], "the saved login is dead"
            assert "site has ended that login" in again["notes"][0], again
            await sign_in(agent, again["run_id"])
            assert (await agent.call("save_login", run_id=again["run_id"]))["saved_login"] == "saved"
            await agent.call("close_session", run_id=again["run_id"])
            third = await agent.call("open_session", site=f"{shop.url}/orders/new", session_key="shop")
            assert third["url"].endswith("/orders/new") and "notes" not in third, third
            await agent.call("close_session", run_id=third["run_id"])

    asyncio.run(scenario())
    assert shop.logins("demo") == logins + 2


def test_resume_reopens_the_page_where_it_was_and_redoes_no_submit(tmp_path: Path, shop: Any) -> None:
    """A server goes away with a session open (its run handed back); the agent reconnects to
    another and calls resume: the page is where it was (the form filled again, the login
    replayed), the order placed before is not placed again, and the session goes on."""
    store = open_store(tmp_path / "browserworker.db")
    first_ref, second_ref = f"resume-1-{tmp_path.name}", f"resume-2-{tmp_path.name}"
    state: dict[str, Any] = {}

    async def before() -> None:
        async with server(store) as agent:
            run_id = state["run_id"] = await agent.sign_in(shop.url)
            await agent.fill_order(run_id, first_ref)
            done = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(first_ref))
            assert done["status"] == "committed"
            await agent.call("navigate", run_id=run_id, url="/orders/new")
            await agent.fill_order(run_id, second_ref, item="cake")

    async def after() -> None:
        async with server(store) as agent:
            run_id = state["run_id"]
            resumed = await agent.call("resume", run_id=run_id)
            assert resumed["url"].endswith("/orders/new") and resumed["calls"] == 10
            assert any("replayed" in note for note in resumed["notes"])
            snap = await agent.call("snapshot", run_id=run_id)
            assert 'textbox "Reference" [ref=' in snap and second_ref in snap and "cake" in snap
            done = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(second_ref))
            assert done["status"] == "committed"
            await agent.call("close_session", run_id=run_id)

    asyncio.run(before())
    run = store.get_run(state["run_id"])
    assert run is not None and run.state == RunState.QUEUED, "handed back when its server stopped"
    asyncio.run(after())
    assert len(shop.orders(first_ref)) == 1 and len(shop.orders(second_ref)) == 1
    shown = BW(db=tmp_path / "browserworker.db").run("show", state["run_id"])
    assert "tool calls" in shown.stdout and "#3 fill #password [secret]" in shown.stdout, shown.stdout


def test_a_last_call_journaled_done_that_a_replay_cannot_redo_is_dropped_not_fatal(tmp_path: Path, shop: Any) -> None:
    """A staging call is journaled beside its action; a crash between that record and the mark
    that it was refused leaves it journaled as done. Taken up, the session replays it, sees it
    refused again (nothing sent), marks it undone and goes on: one note, no order."""
    store = open_store(tmp_path / "browserworker.db")
    reference = f"last-{tmp_path.name}"
    state: dict[str, Any] = {}

    async def before() -> None:
        async with server(store) as agent:
            run_id = state["run_id"] = await agent.sign_in(shop.url)
            await agent.fill_order(run_id, reference)
            seq = (await agent.call("status", run_id=run_id))["calls"] + 1
            state["seq"] = seq
            # what a server killed right after journaling a click, before marking it refused, leaves
            store.record_event(
                run_id,
                "tool_call",
                step_id=f"t{seq:04d}.click",
                detail={
                    "seq": seq,
                    "tool": "click",
                    "args": {"selector": "#submit", "ok": True},
                    "target": {"selector": "#submit"},
                },
            )

    async def after() -> None:
        async with server(store) as agent:
            resumed = await agent.call("resume", run_id=state["run_id"])
            assert any(f"t{state['seq']:04d}.click, was not redone (refused)" in n for n in resumed["notes"]), resumed
            assert resumed["url"].endswith("/orders/new")
            await agent.call("close_session", run_id=state["run_id"])

    asyncio.run(before())
    asyncio.run(after())
    assert shop.orders(reference) == []
    kinds = [e.kind for e in store.events(state["run_id"]) if e.kind.startswith("tool_call")]
    assert kinds[-1] == "tool_call_undone"


def test_a_session_signed_in_by_a_submit_is_taken_up_signed_in(tmp_path: Path, shop: Any) -> None:
    """An agent signs in with a plain submit (an effect: a replay never redoes it), so the shop's
    session cookie came from a submit. Taken up by another server, the session starts from the
    browser state that submit left (kept sealed in the journal): the order form, filled again,
    is still signed in; the shop saw one login, and the order is placed once. No cookie is
    journaled in clear."""
    store = open_store(tmp_path / "browserworker.db")
    reference = f"kept-{tmp_path.name}"
    logins = shop.logins("demo")
    state: dict[str, Any] = {}

    async def before() -> None:
        async with server(store) as agent:
            opened = await agent.call("open_session", site=f"{shop.url}/login?next=/orders/new")
            run_id = state["run_id"] = opened["run_id"]
            await agent.call("fill", run_id=run_id, selector="#username", value="demo")
            await agent.call("fill", run_id=run_id, selector="#password", value="demo")
            signed = await agent.call("submit", run_id=run_id, selector="#login", effect_key="sign-in")
            assert signed["status"] == "committed" and signed["url"].endswith("/orders/new"), signed
            await agent.fill_order(run_id, reference)

    async def after() -> None:
        async with server(store) as agent:
            run_id = state["run_id"]
            resumed = await agent.call("resume", run_id=run_id)
            assert resumed["url"].endswith("/orders/new"), resumed
            done = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))
            assert done["status"] == "committed", done
            await agent.call("close_session", run_id=run_id)

    asyncio.run(before())
    asyncio.run(after())
    assert shop.logins("demo") == logins + 1, "the replay did not sign in again"
    assert len(shop.orders(reference)) == 1
    kept = [e.detail for e in store.events(state["run_id"]) if e.kind == "state_kept"]
    assert kept and all(set(d) == {"sealed"} for d in kept), "kept after a submit, sealed"
    journaled = " ".join(str(e.detail) for e in store.events(state["run_id"]))
    assert "cookies" not in journaled and SESSION_COOKIE not in journaled
