"""``browserworker mcp`` as a desktop client runs it (a stdio subprocess), killed in the middle
of a submit: the agent's retry of the same call is answered from the journal and the shop,
never by a second click. The business outcome is checked on the shop: exactly one order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from browserworker.runtime import generate_key
from browserworker.states import RunState
from browserworker.store import open_store
from tests.support.agent import gone, kill_servers, order_verify, stdio_agent
from tests.support.bw import BW

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# what the retry may be told after a kill at each point of a submit (docs/agents.md)
EXPECTED = {
    "before_intent_commit": {"not_applied"},
    "after_intent_commit": {"not_applied"},
    "dispatch_held": {"not_applied"},
    "after_dispatch_commit": {"not_applied"},
    # released: it may or may not have reached the shop before the kill
    "after_dispatch": {"not_applied", "verified"},
    "reply_lost": {"verified"},
    "after_response": {"verified", "committed"},
    "before_outcome_commit": {"verified", "committed"},
}


async def _crash_then_retry(
    db: str,
    base_url: str,
    point: str,
    reference: str,
    verify: Any,
    env: dict[str, str] | None = None,
    *,
    user: str = "demo",
    between: Callable[[], None] = lambda: None,
) -> tuple[str, Any, Any]:
    """Sign in as ``user`` (password ``user``) and submit an order with the server set to SIGKILL
    itself at ``point``; then, after ``between``, retry the same call twice in a new server.
    Returns the run id and the two answers."""
    submit: dict[str, Any] = {"selector": "#submit", "effect_key": "order-1"}
    if verify is not None:
        submit["verify"] = verify
    run_id = ""
    with pytest.raises(BaseException) as died:  # noqa: PT012 - the call dies with the server
        async with stdio_agent(db, env={"BROWSERWORKER_FAULTS": f"{point}=kill", **(env or {})}) as agent:
            run_id = await agent.sign_in(base_url, user, user)
            await agent.fill_order(run_id, reference)
            await agent.client.call_tool("submit", {"run_id": run_id, **submit})
    assert run_id, f"the session never opened: {died.value!r}"
    kill_servers(db)
    assert await gone(db)
    between()
    async with stdio_agent(db, env=env) as agent:
        first = await agent.call("submit", run_id=run_id, **submit)
        again = await agent.call("submit", run_id=run_id, **submit)
    return run_id, first, again


@pytest.mark.parametrize("point", list(EXPECTED))
def test_killed_at_each_point_of_a_submit_the_retry_places_one_order(tmp_path: Path, shop: Any, point: str) -> None:
    """SIGKILL of the server at ``point``, then the agent's retry of the same call in a new
    server: exactly one order on the shop, and the answer says how it came about."""
    reference = f"{point}-{tmp_path.name}"[:60]
    db = str(tmp_path / "browserworker.db")
    run_id, first, again = asyncio.run(_crash_then_retry(db, shop.url, point, reference, order_verify(reference)))
    assert first["status"] in EXPECTED[point], first
    assert again["status"] == first["status"] and again["result"] == first["result"], "every retry answered alike"
    assert "taken up by this server" in " ".join(first.get("notes", []))
    assert len(shop.orders(reference)) == 1, f"{point}: {shop.orders(reference)}"
    store = open_store(db)
    run = store.get_run(run_id)
    # taken up under a fresh lease, handed back (QUEUED) when the second server stopped
    assert run is not None and run.state == RunState.QUEUED and run.lease_epoch >= 2
    dispatched = [a for a in store.attempts(run_id) if a.kind == "effect" and a.dispatched_at is not None]
    if first["status"] == "not_applied":
        assert [a.state.name for a in store.attempts(run_id) if a.kind == "effect"][-1] == "SUCCEEDED"
        assert dispatched[-1].lease_epoch >= 2, "done once, under the new lease"


def _crash_and_lock_out(tmp_path: Path, shop: Any, point: str, name: str) -> tuple[str, str, str, Any, Any]:
    """:func:`_crash_then_retry` at ``point`` as a user of its own whose password changes before
    the retries, so the replayed sign-in fails and the session cannot be re-opened where it was.
    Returns the store's path, the order's reference, the run id and the two answers."""
    user = f"{name}-{tmp_path.name}"[-40:]
    shop.add_user(user, user)
    reference = f"{name}-{tmp_path.name}"[:60]
    db = str(tmp_path / "browserworker.db")
    run_id, first, again = asyncio.run(
        _crash_then_retry(
            db,
            shop.url,
            point,
            reference,
            order_verify(reference),
            user=user,
            between=lambda: shop.add_user(user, "changed"),
        )
    )
    return db, reference, run_id, first, again


def test_a_submit_that_landed_is_verified_though_its_page_cannot_be_reopened(tmp_path: Path, shop: Any) -> None:
    """Killed after the shop took the order, the session cannot be re-opened where it was: its
    user's password changed meanwhile, so the replayed sign-in fails and the order form is not
    there to fill. The submit is still decided by its verify, read on a page of its own:
    ``verified``, the replay's failure told in the answer's note; nothing is clicked; one order."""
    db, reference, run_id, first, again = _crash_and_lock_out(tmp_path, shop, "reply_lost", "moved")
    assert first["status"] == "verified", first
    assert "could not be re-opened where it was" in first["note"] and "t0007.submit" in first["note"], first
    assert again["status"] == "verified" and again["result"] == first["result"]
    assert len(shop.orders(reference)) == 1
    effects = [a for a in open_store(db).attempts(run_id) if a.kind == "effect"]
    assert [(a.state.name, a.decided_by) for a in effects] == [("SUCCEEDED", "verifier")], "decided, not redone"


def test_a_submit_in_doubt_whose_page_cannot_be_reopened_and_verify_finds_nothing_goes_to_review(
    tmp_path: Path, shop: Any
) -> None:
    """Killed once the submit's dispatch was journaled, before its request went, the session
    cannot be re-opened where it was (its user's password changed meanwhile), and the verify finds
    no order. Sending it again would need the order form the replay could not make: the retry
    is answered needs_review with the console's link, every later retry alike, the run waits in
    the review queue, and nothing reached the shop."""
    db, reference, run_id, first, again = _crash_and_lock_out(tmp_path, shop, "after_dispatch_commit", "stuck")
    assert first["status"] == "needs_review" and "show" in first["review"], first
    assert "could not be re-opened where it was" in first["reason"] and "did not find it done" in first["reason"]
    assert again["status"] == "needs_review" and again["reason"] == first["reason"]
    assert shop.orders(reference) == []
    store = open_store(db)
    run = store.get_run(run_id)
    assert run is not None and run.state == RunState.NEEDS_REVIEW
    effects = [a for a in store.attempts(run_id) if a.kind == "effect"]
    assert len(effects) == 1 and effects[0].state.name == "INTENT", "left as journaled, for a person"
    shown = json.loads(BW(db=Path(db)).run("show", run_id, "--json").stdout)
    assert [e["kind"] for e in shown["events"]].count("decision") >= 1, "the needs_review decision is journaled"


def test_an_uncertain_submit_without_a_verifier_goes_to_review_never_to_a_retry(
    tmp_path: Path, shop: Any, bw: BW
) -> None:
    """Killed after the shop took the order but before its answer was journaled, a submit with no
    verifier cannot be proven: the retry is answered needs_review with the console's link, the
    run waits in the review queue, and the shop has one order."""
    reference = f"review-{tmp_path.name}"
    db = str(tmp_path / "browserworker.db")
    run_id, first, again = asyncio.run(_crash_then_retry(db, shop.url, "reply_lost", reference, None))
    assert first["status"] == "needs_review" and "show" in first["review"], first
    assert again["status"] == "needs_review"
    assert len(shop.orders(reference)) == 1
    shown = json.loads(BW(db=Path(db)).run("show", run_id, "--json").stdout)
    assert shown["run"]["state"] == "NEEDS_REVIEW"


def test_a_verify_that_says_not_done_does_not_overrule_the_shops_recorded_answer(tmp_path: Path, shop: Any) -> None:
    """Killed once the shop's 303 to the order was recorded, a submit whose verify looks for what
    the shop never shows (a first submit: nothing has proven its verify yet) is not made again on
    the verify's *not done*: the recorded success goes to a person (needs_review), one order."""
    reference = f"blind-{tmp_path.name}"
    blind = {"url": f"/orders?reference={reference}", "text": f"{reference}-never-shown", "wait": 1}
    db = str(tmp_path / "browserworker.db")
    _, first, again = asyncio.run(_crash_then_retry(db, shop.url, "after_response", reference, blind))
    assert first["status"] == "needs_review" and "did not find" in first["reason"], first
    assert again["status"] == "needs_review"
    assert len(shop.orders(reference)) == 1, "the verify's not done did not make the order again"


def test_approval_parks_the_submit_across_a_server_restart(tmp_path: Path, shop: Any) -> None:
    """With --approve-submits the submit is parked with its screenshot (nothing sent) and the agent
    told awaiting_approval; the server goes away; a person approves; a new server's retry sends it
    once: committed, one order."""
    reference = f"approve-{tmp_path.name}"
    db = tmp_path / "browserworker.db"
    verify = order_verify(reference)

    async def park() -> tuple[str, Any]:
        async with stdio_agent(db, "--approve-submits") as agent:
            run_id = await agent.sign_in(shop.url)
            await agent.fill_order(run_id, reference)
            parked = await agent.call("submit", run_id=run_id, selector="#submit", verify=verify)
            polled = await agent.call("submit", run_id=run_id, selector="#submit", verify=verify)
            assert polled["status"] == "awaiting_approval"
            return run_id, parked

    run_id, parked = asyncio.run(park())
    assert parked["status"] == "awaiting_approval", parked
    assert shop.orders(reference) == []
    store = open_store(db)
    (approval,) = store.approvals.of_run(run_id)
    assert approval.step_id == "t0007.submit" and approval.screenshot and Path(approval.screenshot).exists()
    done = BW(db=db).run("approve", run_id, "t0007.submit", "--by", "tester")
    assert done.returncode == 0, done.stderr

    async def retry() -> Any:
        async with stdio_agent(db, "--approve-submits") as agent:
            return await agent.call("submit", run_id=run_id, selector="#submit", verify=verify)

    answer = asyncio.run(retry())
    assert answer["status"] == "committed", answer
    assert len(shop.orders(reference)) == 1


def test_a_session_on_postgresql_is_taken_up_by_another_server(tmp_path: Path, shop: Any, pg_url: str) -> None:
    """The same with the store on PostgreSQL (servers on many hosts, sharing the sealing key of
    saved logins and secrets): killed after the intent, the next server's retry (its replay typing
    the sealed password again) places the order once."""
    reference = f"pg-{tmp_path.name}"[:60]
    env = {"BROWSERWORKER_SESSION_KEY": generate_key()}
    run_id, first, _ = asyncio.run(
        _crash_then_retry(pg_url, shop.url, "after_intent_commit", reference, order_verify(reference), env)
    )
    assert first["status"] == "not_applied"
    assert len(shop.orders(reference)) == 1


def test_stdio_server_lists_its_tools_and_speaks_only_protocol_on_stdout(tmp_path: Path) -> None:
    """A client that launches the server over stdio initializes, lists the tools and gets a clear
    tool error for an unknown run (anything else on stdout would break the protocol)."""

    async def talk() -> tuple[set[str], str]:
        async with stdio_agent(tmp_path / "browserworker.db") as agent:
            names = {t.name for t in (await agent.client.list_tools()).tools}
            return names, await agent.error("status", run_id="r-unknown")

    names, said = asyncio.run(talk())
    assert {"open_session", "snapshot", "fill", "submit", "resume"} <= names
    assert "no agent session 'r-unknown'" in said
