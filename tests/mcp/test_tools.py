"""The agent tools' semantics through the MCP SDK's in-memory client, against the sandbox shop
in real Chromium: a test plays the agent (no model)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp import Client

from browserworker.agent import AgentPolicy, AgentService, export_flow
from browserworker.agent._calls import Call, journaled_calls, missed_verifies
from browserworker.agent._snapshot import Target, take_snapshot
from browserworker.agent._verify import parse_verify
from browserworker.flow import Action, Effect, load_flow
from browserworker.mcp import build_server
from browserworker.runtime import ApprovalSettings
from browserworker.states import RunState
from browserworker.store import Store, open_store
from tests.support.agent import Agent, order_verify
from tests.support.bw import BW
from tests.support.channel_target import ChannelTarget

pytestmark = pytest.mark.browser


PARK_AT_ONCE = ApprovalSettings(hold=0)
"""A submit waiting for a person parks its session at once (the tests decide after it has)."""


@asynccontextmanager
async def in_memory(
    store: Store, tmp: Path, policy: AgentPolicy | None = None, approvals: ApprovalSettings | None = None
) -> AsyncIterator[Agent]:
    service = AgentService(store, evidence_dir=tmp / "evidence", policy=policy, approvals=approvals)
    try:
        async with Client(build_server(service)) as client:
            yield Agent(client, service)
    finally:
        await service.aclose()


def play(tmp_path: Path, scenario: Callable[[Agent, Store], Awaitable[None]], **kw: Any) -> Store:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = open_store(tmp_path / "browserworker.db")

    async def go() -> None:
        async with in_memory(store, tmp_path, **kw) as agent:
            await scenario(agent, store)

    asyncio.run(go())
    return store


def test_tools_tell_the_truth_in_their_annotations(tmp_path: Path) -> None:
    """Read tools are read-only; staging tools change the page but nothing destructive; submit
    is the one destructive tool, idempotent per effect key."""
    seen: dict[str, Any] = {}

    async def scenario(agent: Agent, store: Store) -> None:
        for tool in (await agent.client.list_tools()).tools:
            seen[tool.name] = tool.annotations

    play(tmp_path, scenario)
    for name in ("snapshot", "find", "extract", "wait_for", "screenshot", "status"):
        assert seen[name].read_only_hint is True and seen[name].destructive_hint is False, name
    for name in ("navigate", "back", "click", "hover", "fill", "select", "check", "press", "upload"):
        assert seen[name].read_only_hint is False and seen[name].destructive_hint is False, name
    assert seen["submit"].destructive_hint is True and seen["submit"].idempotent_hint is True
    assert {"open_session", "resume", "close_session", "save_login"} <= set(seen)


def test_a_session_is_a_run_and_a_submit_lands_once(tmp_path: Path, shop: Any) -> None:
    """A session is a run (visible in the store like any other), every call a journaled step; a
    submit is committed, and the same call again (or the same key, no matter the arguments
    passed again) is answered from the journal: one order. The same key with other arguments is a
    conflict and changes nothing."""
    reference = f"mem-{tmp_path.name}"
    state: dict[str, Any] = {}

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = state["run_id"] = await agent.sign_in(shop.url)
        snap = await agent.call("snapshot", run_id=run_id)
        assert 'textbox "Item"' in snap and "[ref=e" in snap
        ref = next(line for line in snap.splitlines() if 'button "Place order"' in line).split("ref=")[1].rstrip("]")
        await agent.fill_order(run_id, reference)
        first = await agent.call("submit", run_id=run_id, ref=ref, effect_key="order-1", verify=order_verify(reference))
        assert first["status"] == "committed" and "/orders/" in first["result"]["url"]
        again = await agent.call("submit", run_id=run_id, ref=ref, effect_key="order-1", verify=order_verify(reference))
        assert again["status"] == "committed" and again["result"] == first["result"]
        other = await agent.call("submit", run_id=run_id, selector="#submit", effect_key="order-1")
        assert other["status"] == "conflict"
        status = await agent.call("status", run_id=run_id)
        assert status["state"] == "RUNNING" and status["submits"] == [
            {"seq": first["seq"], "effect_key": "order-1", "state": "SUCCEEDED"}
        ]
        assert Path(first["screenshot"]).exists(), "the submit's page is kept"
        closed = await agent.call("close_session", run_id=run_id)
        assert closed["state"] == "SUCCEEDED"

    store = play(tmp_path, scenario)
    assert len(shop.orders(reference)) == 1
    run = store.get_run(state["run_id"])
    assert run is not None and run.state == RunState.SUCCEEDED and run.flow_name == "agent" and run.queue == "agent"
    # in the order of the calls (a read call is journaled in the background: its event may come later)
    calls = sorted((e.detail for e in store.events(run.id) if e.kind == "tool_call"), key=lambda c: c["seq"])
    assert [c["tool"] for c in calls] == ["navigate", "fill", "fill", "submit", "snapshot", "fill", "fill", "submit"]
    assert [c["seq"] for c in calls] == list(range(1, 9))
    submit = calls[-1]
    assert submit["effect_key"] == "order-1" and submit["verify"]["get"].startswith(shop.url)
    assert 'button "Place order"' in submit["snapshot"], "the snapshot the agent acted on is kept"
    effect = [a for a in store.attempts(run.id) if a.step_id == "t0008.submit"]
    assert len(effect) == 1 and effect[0].state.name == "SUCCEEDED" and effect[0].dispatched_at is not None


def test_a_site_slow_to_answer_a_submit_is_waited_for_not_taken_for_a_refused_click(tmp_path: Path, shop: Any) -> None:
    """The shop takes 7 s to answer the order's POST (longer than an element has to take a
    click): the submit waits for the answer and is committed with it, one order; the click is not
    taken for one the button refused (which sent the submit to recovery and its verifier)."""
    reference = f"slow-{tmp_path.name}"

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = await agent.sign_in(shop.url)
        await agent.fill_order(run_id, reference)
        shop.set_faults(delay_before_commit=7, times=1)
        began = time.monotonic()
        placed = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))
        assert placed["status"] == "committed" and placed["responses"][0]["status"] == 303, placed
        assert time.monotonic() - began >= 7
        [attempt] = [a for a in store.attempts(run_id) if a.kind == "effect"]
        assert attempt.decided_by != "verifier" and attempt.attempt_no == 1

    play(tmp_path, scenario)
    assert len(shop.orders(reference)) == 1


def test_a_submit_whose_answer_never_settles_is_verified_and_its_page_opened_again_where_it_was(
    tmp_path: Path, shop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shop commits the order and then takes longer to answer than the submit waits (cut to
    2 s here, 30 s as shipped): the submit's outcome is in doubt, so the session's page is opened
    again and the order decided by its verify, ``verified``, one order. The page is the order
    form as the calls before the submit left it (replayed; the submit not redone), not a blank
    page, and the answer's note says so."""
    from browserworker.agent import _calls

    reference = f"unsettled-{tmp_path.name}"
    monkeypatch.setattr(_calls, "click_and_settle", partial(_calls.click_and_settle, timeout=2.0))

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = await agent.sign_in(shop.url)
        await agent.fill_order(run_id, reference)
        shop.set_faults(delay_after_commit=6, times=1)
        placed = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))
        assert placed["status"] == "verified", placed
        assert placed["url"].endswith("/orders/new") and "opened again" in placed["note"], placed
        form = await agent.call("snapshot", run_id=run_id)
        assert reference in str(form), "the calls before the submit were replayed"

    play(tmp_path, scenario)
    assert len(shop.orders(reference)) == 1


def test_a_submit_the_site_answers_with_a_server_error_is_told_with_what_its_verify_finds(
    tmp_path: Path, shop: Any
) -> None:
    """The shop answers an order's POST with a 500, once after taking the order and once before:
    each submit is done (its effect key used), and its note says the site answered with a server
    error and whether the verify finds the order; a verify that does not find an order the site
    failed to take is not told as a verify that misses what a submit did."""
    taken, refused = f"taken-{tmp_path.name}", f"refused-{tmp_path.name}"

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = await agent.sign_in(shop.url)
        for reference, fault in ((taken, "fail_after_commit"), (refused, "fail_before_commit")):
            await agent.call("navigate", run_id=run_id, url=f"{shop.url}/orders/new")
            await agent.fill_order(run_id, reference)
            shop.set_faults(**{fault: True}, times=1)
            answer = await agent.call(
                "submit", run_id=run_id, selector="#submit", effect_key=reference, verify=order_verify(reference)
            )
            assert answer["status"] == "committed" and answer["responses"][0]["status"] >= 500, answer
            assert "a server error" in answer["note"], answer
            found = "finds it done all the same" if reference == taken else "does not find it either"
            assert found in answer["note"] and "your verify did not find this submit" not in answer["note"], answer

    play(tmp_path, scenario)
    assert len(shop.orders(taken)) == 1 and shop.orders(refused) == []


def test_a_verify_that_misses_a_done_submit_is_told_and_its_not_done_trusted_no_more(tmp_path: Path, shop: Any) -> None:
    """Right after a submit is done its verify is read on a page of its own: one that does not find
    the order just placed (it looks for a text the list never shows, as a verify of a page that
    keeps the typed title in its <title> does) is told in the answer and journaled, and from then
    on a *not done* of its address is *unknown* in the session (after a crash a person decides,
    never a retry that would order twice), also for a server that takes the session up; a verify
    that finds its order is not told of. One that finds its proof before the submit (an earlier
    order's reference) is refused before anything is done: after a crash it would answer
    *verified* for a submit that never landed."""
    reference = f"missed-{tmp_path.name}"

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = await agent.sign_in(shop.url)
        await agent.fill_order(run_id, reference)
        blind = {"url": "/orders", "text": f"{reference}-never-shown"}
        done = await agent.call("submit", run_id=run_id, selector="#submit", effect_key="blind", verify=blind)
        assert done["status"] == "committed" and "your verify did not find this submit" in done["note"], done
        where = f"{shop.url}/orders"
        session = agent.service.live[run_id]
        assert session.missed == {where} and missed_verifies(store.events(run_id)) == {where}
        later = Call(
            99, "submit", {"ok": True}, Target("#submit"), key="later", verify=parse_verify(blind).resolved(where)
        )
        verdict = await session.step(later).verifier(SimpleNamespace(page=session.page))
        assert verdict.kind == "unknown" and "did not find a submit of this session" in verdict.reason, verdict
        await agent.call("navigate", run_id=run_id, url=f"{shop.url}/orders/new")
        await agent.fill_order(run_id, f"{reference}-2")
        earlier = {"url": f"/orders?reference={reference}", "text": reference}  # the first order's proof
        said = await agent.error("submit", run_id=run_id, selector="#submit", effect_key="early", verify=earlier)
        assert "finds its proof" in said and "nothing was done" in said, said
        seen = await agent.call(
            "submit", run_id=run_id, selector="#submit", effect_key="seen", verify=order_verify(f"{reference}-2")
        )
        assert seen["status"] == "committed" and "your verify" not in seen.get("note", ""), seen

    play(tmp_path, scenario)
    assert len(shop.orders(reference)) == 1 and len(shop.orders(f"{reference}-2")) == 1, (
        "the refused submit sent nothing"
    )


def test_a_login_the_site_refused_is_told_with_its_message(tmp_path: Path, shop: Any) -> None:
    """An idempotent submit (a login) with a wrong password: its answer carries the page's
    message and a note that the site may have refused it; signed in, the answer has neither."""

    async def scenario(agent: Agent, store: Store) -> None:
        opened = await agent.call("open_session", site=f"{shop.url}/login?next=/orders/new")
        run_id = opened["run_id"]
        await agent.call("fill", run_id=run_id, selector="#username", value="demo")
        await agent.call("fill", run_id=run_id, selector="#password", value="wrong", secret=True)
        refused = await agent.call("submit", run_id=run_id, selector="#login", idempotent=True)
        assert refused["alerts"] == ["Invalid username or password."], refused
        assert any("may have refused" in note for note in refused["notes"]), refused
        await agent.call("fill", run_id=run_id, selector="#password", value="demo", secret=True)
        signed = await agent.call("submit", run_id=run_id, selector="#login", idempotent=True)
        assert signed["url"].endswith("/orders/new") and "alerts" not in signed and "notes" not in signed, signed

    play(tmp_path, scenario)


def test_a_form_re_rendered_with_errors_is_told_and_a_new_key_sends_the_fix(tmp_path: Path, shop: Any) -> None:
    """The shop answers an invalid order with its form again (200, an alert): the submit is done as
    far as the journal knows, and its answer carries the response's status and the page's alert,
    saying to submit the fix with a new key; that key's submit places the one order."""
    reference = f"rerender-{tmp_path.name}"

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = await agent.sign_in(shop.url)
        await agent.fill_order(run_id, reference)
        await agent.call("fill", run_id=run_id, selector="#quantity", value="0")
        refused = await agent.call("submit", run_id=run_id, selector="#submit", effect_key="try-1")
        assert refused["status"] == "committed" and refused["responses"][0]["status"] == 200, refused
        assert any("Quantity must be" in a for a in refused["alerts"]) and "new effect_key" in refused["note"]
        again = await agent.call("submit", run_id=run_id, selector="#submit", effect_key="try-1")
        assert again["status"] == "committed", "the same key is answered from the journal, not sent again"
        assert shop.orders(reference) == []
        await agent.call("fill", run_id=run_id, selector="#quantity", value="2")
        fixed = await agent.call("submit", run_id=run_id, selector="#submit", effect_key="try-2")
        assert fixed["status"] == "committed" and fixed["responses"][0]["status"] == 303 and "alerts" not in fixed

    play(tmp_path, scenario)
    [order] = shop.orders(reference)
    assert order["quantity"] == 2


def test_extract_answers_the_first_elements_cut_in_the_page_and_counts_the_rest(tmp_path: Path) -> None:
    """``extract`` answers the text of the first 50 elements its selector finds, in their order,
    each cut at 20,000 characters, and says how many it left out; the page's own text with no
    selector; a selector that finds nothing is a tool error."""
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/rows"))["run_id"]
            rows = await agent.call("extract", run_id=run_id, selector="tr")
            assert rows["texts"] == [f"Row {i}\t{i}.00" for i in range(50)] and rows["not_shown"] == 70, rows
            long = await agent.call("extract", run_id=run_id, selector="#long")
            assert long["texts"] == [("word " * 4000)[:20_000]] and "not_shown" not in long, long
            page = await agent.call("extract", run_id=run_id)
            assert len(page["texts"]) == 1 and page["texts"][0].startswith("Row 0\t0.00\nRow 1"), page
            assert "not_shown" not in page and len(page["texts"][0]) == 20_000, page
            said = await agent.error("extract", run_id=run_id, selector="#nowhere")
            assert "matches nothing" in said, said

        play(tmp_path, scenario)


def test_a_secret_is_never_written_in_clear(tmp_path: Path, shop: Any) -> None:
    """A password field's value (and a value marked secret) is sealed in the journal: neither the
    database, the evidence nor a snapshot holds it; the snapshot shows that a value is there."""
    secret = f"s3cret-{tmp_path.name}"

    async def scenario(agent: Agent, store: Store) -> None:
        opened = await agent.call("open_session", site=f"{shop.url}/login")
        run_id = opened["run_id"]
        await agent.call("fill", run_id=run_id, selector="#password", value=secret)
        await agent.call("fill", run_id=run_id, selector="#username", value=secret, secret=True)
        snap = await agent.call("snapshot", run_id=run_id)
        assert secret not in snap and 'textbox "Password" [ref=e7]: ***' in snap
        await agent.call("close_session", run_id=run_id)

    store = play(tmp_path, scenario)
    store.close()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def _red_pixels(png: str) -> int:
    """Pixels of a screenshot in the secret field's red (its text: large bold red letters)."""
    from PIL import Image

    with Image.open(png) as image:
        rgb = image.convert("RGB").tobytes()
    return sum(1 for i in range(0, len(rgb), 3) if rgb[i] > 200 and rgb[i + 1] < 90 and rgb[i + 2] < 90)


def test_the_screenshots_kept_of_a_submit_hide_a_secret_typed_on_its_page(tmp_path: Path) -> None:
    """A value typed as a secret into a text field still shows on the page as it is submitted:
    the screenshot parked with its approval and the one kept after it (the session taken up
    again once approved, the secret typed again by the replay) hide its text: no pixel of its
    large red letters."""
    key = f"secret-shot-{tmp_path.name}"[:48]
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/secret?key={key}"))["run_id"]
            await agent.call("fill", run_id=run_id, selector="#code", value="WWWWWWWW", secret=True)
            parked = await agent.call("submit", run_id=run_id, selector="#go", effect_key="go")
            assert parked["status"] == "awaiting_approval"
            (approval,) = store.approvals.of_run(run_id)
            assert approval.screenshot and _red_pixels(approval.screenshot) == 0
            store.approvals.decide(run_id, approval.step_id, "approve", who="test")
            # the session is taken up again: its page re-built, the secret typed again from the journal
            done = await agent.call("submit", run_id=run_id, selector="#go", effect_key="go")
            assert done["status"] == "committed" and _red_pixels(done["screenshot"]) == 0

        play(tmp_path, scenario, policy=AgentPolicy(approve_all=True), approvals=PARK_AT_ONCE)
        assert site.landings(key) == 1


def test_a_staging_tool_that_would_send_is_held_and_told_to_use_submit(tmp_path: Path, shop: Any) -> None:
    """A click (or a key press) on a button that posts a form sends nothing: the agent is told
    what it would have sent and to use submit (idempotent for what changes nothing if sent again,
    a preview); the shop sees no order, the page is back on the form."""
    reference = f"held-{tmp_path.name}"

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = await agent.sign_in(shop.url)
        await agent.fill_order(run_id, reference)
        said = await agent.error("click", run_id=run_id, selector="#submit")
        assert f"would send POST {shop.url}/orders" in said and "use submit" in said
        assert "idempotent=true where sending it again changes nothing (a preview, a search)" in said
        assert f"--may-send 'POST {shop.url}/orders'" in said, said
        said = await agent.error("press", run_id=run_id, selector="#reference", key="Enter")
        assert "would send POST" in said and "use submit" in said
        page = await agent.call("extract", run_id=run_id, selector="h1")
        assert page["url"].endswith("/orders/new") and page["texts"] == ["New order"]
        await agent.fill_order(run_id, reference)
        done = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))
        assert done["status"] == "committed"
        held = [c for c in journaled_calls(store.events(run_id)) if c.tool in ("click", "press")]
        assert [c.args["ok"] for c in held] == [False, False], "journaled, and marked undone"

    play(tmp_path, scenario)
    assert len(shop.orders(reference)) == 1


def test_a_submit_presses_a_key_in_its_element_where_the_page_sends_on_enter(tmp_path: Path, shop: Any) -> None:
    """A box that sends on Enter (a chat's, a form with no button to click) has nothing to click:
    ``submit(..., key="Enter")`` presses the key in the element, its post held and journaled as a
    click's is, one order; the same call again is answered from the journal, the same key without
    the key press is a conflict; a key with no such name is refused with nothing journaled. The
    export presses the key too, and runs with no model."""
    reference = f"enter-{tmp_path.name}"
    state: dict[str, Any] = {}

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = state["run_id"] = await agent.sign_in(shop.url)
        await agent.fill_order(run_id, reference)
        calls = len(journaled_calls(store.events(run_id)))
        said = await agent.error("submit", run_id=run_id, selector="#reference", key="Ctrl+Enter")
        assert "key must be a key's name" in said and len(journaled_calls(store.events(run_id))) == calls
        asked = {"run_id": run_id, "selector": "#reference", "effect_key": "k1", "verify": order_verify(reference)}
        done = await agent.call("submit", **asked, key="Enter")
        assert done["status"] == "committed", done
        assert [(r["method"], r["url"]) for r in done["responses"]] == [("POST", f"{shop.url}/orders")], done
        again = await agent.call("submit", **asked, key="Enter")
        assert again["status"] == "committed" and again["seq"] == done["seq"], again
        assert (await agent.call("submit", **asked))["status"] == "conflict"

    store = play(tmp_path, scenario)
    assert len(shop.orders(reference)) == 1
    source = export_flow(store, state["run_id"])
    assert "lambda: ctx.page.locator('#reference').press('Enter'), confirm=True)" in source, source
    flow = tmp_path / "exported_flow.py"
    flow.write_text(source)
    runner = BW(db=tmp_path / "runs.db")
    done = runner.run("run", str(flow), "--db", str(runner.db), "--input", "password=demo", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["run"]["state"] == "SUCCEEDED", done.stdout + done.stderr
    run_id = json.loads(done.stdout)["run"]["id"]
    assert len(shop.orders(run_id)) == 1, "the exported run placed its own order, by Enter"


def test_a_verify_that_cannot_tell_before_its_submit_is_told_in_the_answer(tmp_path: Path) -> None:
    """A verify whose page answers 404 until the submit makes it (a wiki's new page): read before
    the submit, it cannot tell, and after a crash a person would decide. The submit goes (one
    landing), and its answer says so and what to declare (``absent_status``); declared, the
    answer says nothing of it."""
    key = f"undecided-{tmp_path.name}"[:48]
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/page/form?key={key}"))["run_id"]
            verify = {"url": f"/wiki/{key}", "text": key}
            done = await agent.call("submit", run_id=run_id, selector="#go", effect_key="one", verify=verify)
            assert done["status"] == "committed", done
            assert "before this submit your verify could not tell whether it had landed" in done["note"], done
            assert "a person would decide it" in done["note"] and "absent_status 404" in done["note"], done
            await agent.call("navigate", run_id=run_id, url=f"/page/form?key={key}-2")
            verify = {"url": f"/wiki/{key}-2", "text": key, "absent_status": 404}
            done = await agent.call("submit", run_id=run_id, selector="#go", effect_key="two", verify=verify)
            assert "before this submit" not in done.get("note", ""), done

        play(tmp_path, scenario)
        assert site.landings(key) == 1 and site.landings(f"{key}-2") == 1


def test_the_reports_a_browser_sends_of_its_own_are_no_send(tmp_path: Path) -> None:
    """A page under a Content-Security-Policy in report-only mode whose inline style breaks it
    (MoinMoin serves its pages so): Chromium posts a violation report as the page loads. The
    report is the browser's, not the page's, and changes nothing on the site: with no
    ``--may-send`` rule a session opens there and a link to it is followed (the click was
    stopped, its page's report taken for a POST only submit may send), and the reports reach
    the site. A script's fetch of the same type is the page's own send, and is still stopped."""
    key = f"csp-{tmp_path.name}"[:48]
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/csp?key={key}"))["run_id"]
            assert await asyncio.to_thread(site.wait_for, f"csp:{key}", 1, 20), "the load's report reached the site"
            clicked = await agent.call("click", run_id=run_id, selector="#go")
            assert clicked["url"].endswith("again=1") and "notes" not in clicked, clicked
            assert await asyncio.to_thread(site.wait_for, f"csp:{key}", 2, 20), "and the next page's"
            said = await agent.error("click", run_id=run_id, selector="#forge")
            assert "click was stopped" in said and "/csp-report" in said, said

        play(tmp_path, scenario)
        assert site.landings(f"forged:{key}") == 0


def test_what_the_operator_lets_pages_send_goes_with_no_submit(tmp_path: Path) -> None:
    """A page that posts analytics as it loads, as it is typed into, as a tab is clicked, as its
    button sends the effect and a second after. With no ``--may-send`` rule a session does not open
    there, nor navigate there (the load's post is held, never sent), and the error names the way
    out. With the rule
    ``POST */collect*``, opening, typing and clicking go and every post reaches the site (the
    last between calls, after the submit, with nothing reported); the submit's answer names only
    its own post, which lands once; the exported flow's steps may send those posts, and its
    effect does not count them."""
    key = f"may-send-{tmp_path.name}"[:48]
    with ChannelTarget() as site:
        page, collect = f"{site.url}/analytics?key={key}", f"{site.url}/collect?key={key}"

        async def rule_less(agent: Agent, store: Store) -> None:
            said = await agent.error("open_session", site=page)
            assert f"would send POST {collect}" in said and "as the page loads" in said
            assert f"browserworker mcp --may-send 'POST {collect}'" in said, "the rule that lets it go, ready to use"
            run_id = (await agent.call("open_session", site=f"{site.url}/done"))["run_id"]
            said = await agent.error("navigate", run_id=run_id, url=page)
            assert "navigate was stopped" in said and f"POST {collect}" in said and "--may-send" in said

        play(tmp_path / "no-rule", rule_less)
        assert site.landings(f"collect:{key}") == 0, "held, never sent"
        exported: dict[str, str] = {}

        async def with_rule(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=page))["run_id"]
            await agent.call("fill", run_id=run_id, selector="#note", value="hello")
            await agent.call("click", run_id=run_id, selector="#tab")
            assert site.landings(f"collect:{key}") == 3, "load, input, tab"
            verify = {"get": f"/count?key={key}", "path": "count"}
            done = await agent.call("submit", run_id=run_id, selector="#go", verify=verify)
            assert done["status"] == "committed"
            assert [r["url"] for r in done["responses"]] == [f"{site.url}/land?key={key}"], "only its own post"
            assert await asyncio.to_thread(site.wait_for, f"collect:{key}", 5, 20), "the beacons of go and later"
            assert "notes" not in await agent.call("extract", run_id=run_id, selector="#tab"), "nothing refused"
            exported["source"] = export_flow(store, run_id)

        play(tmp_path / "rule", with_rule, policy=AgentPolicy(may_send=("POST */collect*",)))
        assert site.landings(key) == 1
    source = tmp_path / "exported.py"
    source.write_text(exported["source"])
    steps = load_flow(source).flow.steps
    actions = [s for s in steps if isinstance(s, Action)]
    assert actions and all(a.declares("POST", collect) and not a.declares("POST", page) for a in actions)
    [effect] = [s for s in steps if isinstance(s, Effect)]
    assert not effect.is_dispatch("POST", collect) and effect.is_dispatch("POST", f"{site.url}/land?key={key}")


def test_a_may_send_rule_can_name_the_messages_of_a_socket_and_the_bodies_of_a_url(tmp_path: Path) -> None:
    """A live form (LiveView, Livewire) sends each key typed to the server over the socket and
    the URL its buttons use too. With no rule what a ``fill`` there sets off is never sent. With rules naming the
    body of what typing sends (``WEBSOCKET */ws land:check-*``, ``POST */land?key=upd-*
    *"calls":[]*``) typing goes; the buttons' message and post, on the same socket and URL, are
    still held from a ``click`` (never sent) and a ``submit`` sends its message once."""
    key = f"live-{tmp_path.name}"[:48]
    with ChannelTarget() as site:
        page = f"{site.url}/live?key={key}"

        async def rule_less(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=page))["run_id"]
            assert (await agent.call("wait_for", run_id=run_id, text="connected"))["met"] is True
            # the fill's answer may come before the page's sends reach the kit (a fill does not wait
            # for what it sets off): they are stopped all the same, never sent
            await agent.client.call_tool("fill", {"run_id": run_id, "selector": "#title", "value": "a"})
            await agent.call("extract", run_id=run_id, selector="#state")

        play(tmp_path / "no-rule", rule_less)
        assert site.landings(f"check-{key}") == 0 and site.landings(f"upd-{key}") == 0, "held, never sent"

        async def with_rules(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=page))["run_id"]
            assert (await agent.call("wait_for", run_id=run_id, text="connected"))["met"] is True
            await agent.call("fill", run_id=run_id, selector="#title", value="Spring sale")
            assert await asyncio.to_thread(site.wait_for, f"check-{key}", 1, 10), "the typing's message"
            assert await asyncio.to_thread(site.wait_for, f"upd-{key}", 1, 10), "the typing's post"
            said = await agent.error("click", run_id=run_id, selector="#save")
            assert "click was stopped" in said and "WEBSOCKET" in said, said
            said = await agent.error("click", run_id=run_id, selector="#publish")
            assert "click was stopped" in said and f"POST {site.url}/land?key=upd-{key}" in said, said
            verify = {"get": f"/count?key={key}", "path": "count"}
            saved = await agent.call("submit", run_id=run_id, selector="#save", verify=verify)
            assert saved["status"] == "committed", saved

        rules = ("WEBSOCKET */ws land:check-*", 'POST */land?key=upd-* *"calls":[]*')
        play(tmp_path / "rules", with_rules, policy=AgentPolicy(may_send=rules))
        assert site.landings(key) == 1, "the save's message, once"
        assert all(b'"calls":[]' in body for body in site.bodies(f"upd-{key}")), "the publish was never sent"


def test_a_page_built_on_its_socket_is_named_and_a_submit_holds_its_message_under_the_sockets_rule(
    tmp_path: Path,
) -> None:
    """An app that asks for its content over its socket (as Streamlit does) shows nothing with no
    rule, and the answer names the socket and the rule that lets the page use it. With that rule
    (the socket's URL alone) it shows its form and typing goes; a submit's click, whose message
    goes over the same socket, is still the submit's: held until journaled as sent, listed in
    the answer, landed once."""
    key = f"app-{tmp_path.name}"[:48]
    with ChannelTarget() as site:
        page, socket = f"{site.url}/socket-app?key={key}", site.url.replace("http://", "ws://", 1) + "/ws"

        async def rule_less(agent: Agent, store: Store) -> None:
            opened = await agent.client.call_tool("open_session", {"site": page})
            said = json.dumps(opened.structured_content) if not opened.is_error else str(opened.content)
            if not opened.is_error:  # the page asked after the load: refused between calls, told next
                waited = await agent.call(
                    "wait_for", run_id=opened.structured_content["run_id"], text="ready", timeout=2
                )
                assert waited["met"] is False
                said = json.dumps(waited)
            assert f"--may-send 'WEBSOCKET {socket}'" in said, said

        play(tmp_path / "no-rule", rule_less)

        async def with_rule(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=page))["run_id"]
            assert (await agent.call("wait_for", run_id=run_id, text="ready"))["met"] is True
            await agent.call("fill", run_id=run_id, selector="#ref", value="R-1")
            verify = {"get": f"/count?key={key}", "path": "count"}
            done = await agent.call("submit", run_id=run_id, selector="#place", verify=verify)
            assert done["status"] == "committed" and "note" not in done, done
            assert done["responses"] == [{"method": "WEBSOCKET", "url": socket, "status": None}], done
            submits = [a for a in store.attempts(run_id) if a.step_id.endswith(".submit")]
            assert [a.dispatched_at is not None for a in submits] == [True], "journaled as sent"

        play(tmp_path / "rule", with_rule, policy=AgentPolicy(may_send=(f"WEBSOCKET {socket}",)))
        assert site.landings(key) == 1


def test_a_message_a_fill_sets_off_after_its_answer_is_refused_and_told(tmp_path: Path) -> None:
    """A field whose typing the page sends over its socket a moment after the fill has been
    answered: the message is refused all the same (a staging tool never sends), and the next
    calls' answers say so, naming the fill; nothing reaches the site."""
    key = f"later-{tmp_path.name}"[:48]
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/typed-later?key={key}"))["run_id"]
            assert (await agent.call("wait_for", run_id=run_id, text="connected"))["met"] is True
            filled = await agent.call("fill", run_id=run_id, selector="#q", value="tea")
            assert "notes" not in filled, filled
            told = (await agent.call("wait_for", run_id=run_id, text="sent")).get("notes", [])
            told += [line for line in (await agent.call("snapshot", run_id=run_id)).splitlines() if "note:" in line]
            said = [n for n in told if n.startswith("the page sent between calls: WEBSOCKET")]
            assert len(said) == 1 and "refused" in said[0] and f"after t{filled['seq']:04d}.fill" in said[0], told
            assert len([n for n in told if "--may-send 'WEBSOCKET" in n]) == 1, "the socket named with its rule"

        play(tmp_path, scenario)
        assert site.landings(key) == 0


def test_a_long_poll_a_click_opens_does_not_hold_its_answer(tmp_path: Path) -> None:
    """A click that opens a long poll (a GET the site holds open, as a chat widget's or a
    stream's) is answered once the settle has waited a few seconds, with a note naming the GET,
    not after the call's whole timeout; the click is journaled as done."""
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/poll"))["run_id"]
            began = asyncio.get_running_loop().time()
            answer = await agent.call("click", run_id=run_id, selector="#more")
            took = asyncio.get_running_loop().time() - began
            assert took < 15, f"the answer waited {took:.1f} s"
            assert any(f"GET {site.url}/hold?s=40" in note for note in answer.get("notes", [])), answer
            assert (await agent.call("wait_for", run_id=run_id, text="polling"))["met"] is True
            await agent.service.live[run_id].flush()
            clicks = [c for c in journaled_calls(store.events(run_id)) if c.tool == "click"]
            assert [c.args.get("ok", True) for c in clicks] == [True], "journaled as done"

        play(tmp_path, scenario)


def test_a_submit_whose_answer_is_streamed_is_answered_while_it_streams(tmp_path: Path) -> None:
    """A chat's Send posts the message and the site streams its reply for 40 s: the submit is
    answered ``committed`` once the reply has been coming a few seconds (its status and headers
    came back), not failed at its timeout; the message lands once."""
    key = f"chat-{tmp_path.name}"[:48]
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/chat?key={key}"))["run_id"]
            began = asyncio.get_running_loop().time()
            verify = {"get": f"/count?key={key}", "path": "count"}
            sent = await agent.call("submit", run_id=run_id, selector="#send", verify=verify)
            took = asyncio.get_running_loop().time() - began
            assert sent["status"] == "committed" and took < 15, (sent, took)
            assert (await agent.call("wait_for", run_id=run_id, text="word word"))["met"] is True

        play(tmp_path, scenario)
        assert site.landings(key) == 1


def test_a_page_whose_load_does_not_come_is_answered_with_a_note(tmp_path: Path) -> None:
    """A page whose load event does not come (an image the site holds back), reached by
    ``open_session`` (a navigation, as ``navigate``) and by a link's ``click``: each is answered
    once the page is there and a few seconds have passed, with a note that it was still loading,
    not failed at the call's timeout; the page's content reads."""
    with ChannelTarget() as site:
        stuck = f"{site.url}/stuck"

        async def scenario(agent: Agent, store: Store) -> None:
            loop = asyncio.get_running_loop()
            began = loop.time()
            opened = await agent.call("open_session", site=stuck)
            run_id = opened["run_id"]
            went = [(opened, loop.time() - began)]
            assert "Stuck page" in await agent.call("snapshot", run_id=run_id)
            await agent.call("navigate", run_id=run_id, url=f"{site.url}/tostuck")
            began = loop.time()
            went.append((await agent.call("click", run_id=run_id, selector="#go"), loop.time() - began))
            for answer, took in went:
                assert took < 15, f"the answer waited {took:.1f} s"
                assert answer["url"] == stuck and any("still loading" in n for n in answer.get("notes", [])), answer
            assert "Stuck page" in await agent.call("snapshot", run_id=run_id)

        play(tmp_path, scenario)


def test_an_element_something_covers_is_told_at_once_not_waited_for(tmp_path: Path) -> None:
    """A cookie banner over the page: a click on the button it covers fails within seconds, not
    at the call's timeout, saying what covers it; a submit of that button is answered ``failed``
    (nothing sent) the same way; a field the page enables a second after it loads is filled.
    Once the banner is accepted, a submit with a new key goes, and the post lands once."""
    key = f"covered-{tmp_path.name}"[:48]
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            loop = asyncio.get_running_loop()
            run_id = (await agent.call("open_session", site=f"{site.url}/covered?key={key}"))["run_id"]
            began = loop.time()
            error = await agent.error("click", run_id=run_id, selector="#buy")
            assert loop.time() - began < 15, error
            assert "intercepts pointer events" in error and "banner" in error and "close that first" in error, error
            await agent.call("fill", run_id=run_id, selector="#late", value="enabled later")
            verify = {"get": f"/count?key={key}", "path": "count"}
            first = await agent.call("submit", run_id=run_id, selector="#buy", effect_key="buy", verify=verify)
            assert first["status"] == "failed" and "intercepts pointer events" in first["reason"], first
            assert "nothing was sent" in first["note"] and "new effect_key" in first["note"], first
            retried = await agent.call("submit", run_id=run_id, selector="#buy", effect_key="buy", verify=verify)
            assert retried["status"] == "failed" and retried["note"] == first["note"], retried
            assert site.landings(key) == 0
            await agent.call("click", run_id=run_id, selector="#accept")
            again = await agent.call("submit", run_id=run_id, selector="#buy", effect_key="buy-2", verify=verify)
            assert again["status"] == "committed", again

        play(tmp_path, scenario)
        assert site.landings(key) == 1


def test_text_in_plain_blocks_is_read_and_a_checkbox_drawn_by_its_label_is_checked(tmp_path: Path) -> None:
    """What a page writes in divs and spans (a total, a stock line, an order's confirmation) is in
    the snapshot, a line for each line shown (on a budget of their own, which never crowds out what
    can be acted on), and a div the page makes clickable has a ref; a label's text names its
    control and is not said again. Checkboxes and radios drawn by their labels (the input hidden, clipped under its label,
    of no size, under a box the label draws, in a card) are listed as such, named by their labels;
    ``check`` and ``click`` set them through the label, as a person does, at once, never through a
    link in the label; so does the session's exported flow, run with no model. A date typed as a
    date field does not take it (the browser leaves it empty) is a tool error naming the format,
    journaled as not done; ``select`` on a list box the page draws itself says to click it, and on a
    hidden ``<select>`` (one a select2 widget stands in for) to click the list the page draws."""
    exported: dict[str, str] = {}
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            loop = asyncio.get_running_loop()
            run_id = (await agent.call("open_session", site=f"{site.url}/styled"))["run_id"]
            shot = await agent.call("snapshot", run_id=run_id)
            texts = (
                "- text: Signed in as demo",
                "- text: Total: $5.00",
                "- text: Only 3 left",
                "- text: Order #1234 placed",
            )
            for line in texts:
                assert line in shot.splitlines(), shot
            assert 'button "More"' in shot and "text: More" not in shot and "text: Newsletter" not in shot, shot
            assert '  - link "terms"' in shot and "heading" not in shot, shot
            said = ["- text: By ordering you accept the", '- link "rules"', "- text: of the shop."]
            at = [next(i for i, line in enumerate(shot.splitlines()) if line.startswith(x)) for x in said]
            assert at == sorted(at) and at[2] - at[0] == 2, shot  # a text where it sits among elements
            await agent.call("click", run_id=run_id, ref=_ref_of(shot, 'generic "Add to cart" [cursor=pointer]'))
            session = agent.service.live[run_id]
            cut = await take_snapshot(session.page, 900, limit=3)  # text has a budget of its own
            assert cut.text.count("- text: ") == 3 and 'button "More"' in cut.text, cut.text
            assert "more lines of text not shown" in cut.text, cut.text
            shot = await agent.call("snapshot", run_id=run_id)
            assert 'generic "Added" [cursor=pointer]' in shot, shot
            refs = {
                name: _ref_of(shot, f'{role} "{name}"')
                for role, name in (
                    ("checkbox", "I accept the terms"),
                    ("checkbox", "Newsletter"),
                    ("checkbox", "Dark mode"),
                    ("checkbox", "Gift wrap"),
                    ("radio", "Pro $10 a month"),
                    ("radio", "Free $0"),
                )
            }
            began = loop.time()
            for name in ("I accept the terms", "Newsletter", "Gift wrap", "Pro $10 a month"):
                went = await agent.call("check", run_id=run_id, ref=refs[name])
                assert went["url"] == f"{site.url}/styled", went
            await agent.call("click", run_id=run_id, ref=refs["Dark mode"])
            await agent.call("check", run_id=run_id, ref=refs["I accept the terms"])  # checked already: left so
            assert loop.time() - began < 5, "no call waited for a hidden input"
            shot = await agent.call("snapshot", run_id=run_id)
            for name in ("I accept the terms", "Newsletter", "Dark mode", "Gift wrap", "Pro $10 a month"):
                assert f'"{name}" [checked]' in shot, shot
            await agent.call("click", run_id=run_id, ref=_ref_of(shot, 'radio "Free $0"'))
            await agent.call("check", run_id=run_id, ref=_ref_of(shot, 'checkbox "Newsletter"'), checked=False)
            shot = await agent.call("snapshot", run_id=run_id)
            assert '"Free $0" [checked]' in shot and '"Pro $10 a month" [ref=' in shot, shot
            assert '"Newsletter" [ref=' in shot, shot
            when = _ref_of(shot, 'textbox "Delivery"')
            refused = await agent.error("fill", run_id=run_id, ref=when, value="24/12/2026")
            assert "took nothing from '24/12/2026'" in refused and "YYYY-MM-DD" in refused, refused
            await agent.call("fill", run_id=run_id, ref=when, value="2026-12-24")
            assert 'textbox "Delivery" [ref=' in (shot := await agent.call("snapshot", run_id=run_id)), shot
            assert shot.split('textbox "Delivery" [ref=')[1].split("\n")[0].endswith(": 2026-12-24"), shot
            fills = [c.args for c in journaled_calls(store.events(run_id)) if c.tool == "fill"]
            assert [(f["value"], f["ok"]) for f in fills] == [("24/12/2026", False), ("2026-12-24", True)], fills
            drawn = _ref_of(shot, 'combobox "Size"')
            said = await agent.error("select", run_id=run_id, ref=drawn, values=["Large"])
            assert said.endswith(
                "select failed: it is not a <select> but a list the page draws itself: click it, "
                "take a snapshot, and click the option it shows"
            ), said
            said = await agent.error("select", run_id=run_id, selector="#colour", values=["Blue"])
            assert "<select> is hidden" in said and "select2" in said and "click that list" in said, said
            await agent.call("click", run_id=run_id, ref=drawn)
            shot = await agent.call("snapshot", run_id=run_id)
            assert "- listbox\n" in shot + "\n", "a list box is not named by its options' text"
            await agent.call("click", run_id=run_id, ref=_ref_of(shot, 'option "Large"'))
            assert 'combobox "Size: Large"' in await agent.call("snapshot", run_id=run_id)
            exported["source"] = export_flow(store, run_id)

        play(tmp_path, scenario)
        assert "await set_checked(ctx.page, '#terms', True)" in exported["source"], exported["source"]
        _runs_with_no_model(tmp_path, exported["source"])


def test_dialogs_are_answered_as_the_person_who_clicked_meant(tmp_path: Path) -> None:
    """A confirm guarding what a click does ("Delete it?") is dismissed, so nothing is sent; one
    guarding a submit ("Place it?") is accepted, the submit being the decision, and the post lands
    once; each answer names the dialog and its answer. A submit whose click sends nothing is
    answered with a note saying so (its key is done)."""
    key = f"dialogs-{tmp_path.name}"[:48]
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/confirm?key={key}"))["run_id"]
            deleted = await agent.call("click", run_id=run_id, selector="#del")
            assert deleted["dialogs"] == ["confirm: Delete it? (dismissed)"]
            idle = await agent.call("submit", run_id=run_id, selector="#noop", effect_key="noop")
            assert idle["status"] == "committed" and "sent nothing" in idle["note"] and "responses" not in idle
            verify = {"get": f"/count?key={key}", "path": "count"}
            placed = await agent.call("submit", run_id=run_id, selector="#go", effect_key="go", verify=verify)
            assert placed["status"] == "committed" and "note" not in placed
            assert placed["result"]["dialogs"] == ["confirm: Place it? (accepted)"]
            assert [r["url"] for r in placed["responses"]] == [f"{site.url}/land?key={key}"]

        play(tmp_path, scenario)
        assert site.landings(key) == 1 and site.landings(f"del-{key}") == 0


def test_a_submit_that_only_loads_a_page_and_the_messages_a_framework_shows_are_told(tmp_path: Path) -> None:
    """A submit of a search form (a GET: nothing the gate holds) leaves its page, which the journal
    counts as possibly sent: the answer says so in words, with no made-up response; the messages
    the page shows in a framework's markup (a message list, an error list in its form row) are
    each told once, and a hidden field error not at all."""
    key = f"messages-{tmp_path.name}"[:48]
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/messages?key={key}"))["run_id"]
            await agent.call("fill", run_id=run_id, selector="[name=q]", value="tea")
            searched = await agent.call("submit", run_id=run_id, selector="#search", effect_key="search")
            assert searched["status"] == "committed" and "responses" not in searched, searched
            assert searched["url"].startswith(f"{site.url}/messages?key=") and searched["url"].endswith("q=tea")
            note = searched["note"]
            assert f"the page {site.url}/messages?key={key} was left" in note and "possibly sent" in note, note
            assert "no request the gate holds" in note
            assert searched["alerts"] == [f"Saved {key}", "Reference taken\nReference"], searched

        play(tmp_path, scenario)
        assert site.landings(key) == 0


def test_a_new_tab_a_click_opens_is_closed_and_its_address_told(tmp_path: Path) -> None:
    """A link opening its page in a new tab, and a script opening another window: each click is
    answered with the address the tab opened and a note, the tab is closed (the session's page
    stays the one it was), and navigating there follows it."""
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/newtab"))["run_id"]
            for element, opened in (("#go", "/done?from=link"), ("#win", "/done?from=script")):
                answer = await agent.call("click", run_id=run_id, selector=element)
                assert answer["opened"] == [f"{site.url}{opened}"], answer
                assert answer["url"] == f"{site.url}/newtab" and "navigate" in answer["notes"][0], answer
            session = agent.service.live[run_id]
            assert session.page.context.pages == [session.page], "the tabs opened are closed"
            followed = await agent.call("navigate", run_id=run_id, url="/done?from=link")
            assert followed["url"] == f"{site.url}/done?from=link"

        play(tmp_path, scenario)


def test_back_returns_to_the_page_before_and_a_session_taken_up_again_goes_back_too(tmp_path: Path) -> None:
    """``back`` goes to the page before this one; on the session's first page it is a tool
    error, and the page stays where it was. A new server taking the session up re-builds its
    page through the back, and the session's export goes back too."""
    with ChannelTarget() as site:
        start = f"{site.url}/done?from=start"
        state: dict[str, str] = {}

        async def first(agent: Agent, store: Store) -> None:
            run_id = state["run_id"] = (await agent.call("open_session", site=start))["run_id"]
            assert "no page before this one" in await agent.error("back", run_id=run_id)
            assert (await agent.call("resume", run_id=run_id))["url"] == start
            await agent.call("navigate", run_id=run_id, url="/menu")
            await agent.call("navigate", run_id=run_id, url="/late")
            assert (await agent.call("back", run_id=run_id))["url"] == f"{site.url}/menu"

        async def again(agent: Agent, store: Store) -> None:
            resumed = await agent.call("resume", run_id=state["run_id"])
            assert resumed["url"] == f"{site.url}/menu", resumed
            assert export_flow(store, state["run_id"]).count("await go_back(ctx.page)") == 1

        play(tmp_path, first)
        play(tmp_path, again)


def test_a_field_with_an_input_mask_is_typed_key_by_key_when_asked(tmp_path: Path) -> None:
    """A phone field that formats each digit key: a plain fill sets the digits at once, and the
    page never formats them; ``slowly`` types them key by key, replacing what the field held, and
    it shows them formatted. A new server taking the session up types them the same way, and the
    session's export types key by key."""
    with ChannelTarget() as site:
        state: dict[str, str] = {}

        async def first(agent: Agent, store: Store) -> None:
            run_id = state["run_id"] = (await agent.call("open_session", site=f"{site.url}/mask"))["run_id"]
            phone = agent.service.live[run_id].page.locator("#phone")
            await agent.call("fill", run_id=run_id, selector="#phone", value="5551234567")
            assert await phone.input_value() == "5551234567"
            await agent.call("fill", run_id=run_id, selector="#phone", value="5551234567", slowly=True)
            assert await phone.input_value() == "(555) 123-4567"

        async def again(agent: Agent, store: Store) -> None:
            await agent.call("resume", run_id=state["run_id"])
            assert await agent.service.live[state["run_id"]].page.locator("#phone").input_value() == "(555) 123-4567"
            assert ".press_sequentially(ctx.inputs." in export_flow(store, state["run_id"])

        play(tmp_path, first)
        play(tmp_path, again)


def test_a_file_a_click_downloads_is_saved_only_where_the_operator_says(tmp_path: Path) -> None:
    """A click on an export link: with no ``--downloads`` directory the answer names the file and
    says it was not kept; with one, the file is saved there under its name (a second under a
    name of its own), and the answer gives where and its size. A ``navigate`` to the file's
    address downloads it the same way (not an error), the page left as it was; so does the
    session's exported flow, run with no model (where ``page.goto`` would raise)."""
    key = f"export-{tmp_path.name}"[:48]
    kept = tmp_path / "downloads"
    kept.mkdir()
    exported: dict[str, str] = {}
    with ChannelTarget() as site:

        async def not_kept(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/export?key={key}"))["run_id"]
            answer = await agent.call("click", run_id=run_id, selector="#csv")
            assert answer["downloads"] == [{"name": "orders.csv"}], answer
            assert "--downloads DIR" in answer["notes"][0], answer

        async def saved(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/export?key={key}"))["run_id"]
            first = (await agent.call("click", run_id=run_id, selector="#csv"))["downloads"]
            second = (await agent.call("click", run_id=run_id, selector="#csv"))["downloads"]
            went = await agent.call("navigate", run_id=run_id, url=f"/file?key={key}")
            assert went["url"] == f"{site.url}/export?key={key}", went
            third = went["downloads"]
            assert [d["saved"] for d in first + second + third] == [
                str(kept / name) for name in ("orders.csv", "orders (2).csv", "orders (3).csv")
            ]
            assert first[0]["size"] == len(f"order,key\n1,{key}\n")
            assert (kept / "orders (3).csv").read_text() == f"order,key\n1,{key}\n"
            exported["source"] = export_flow(store, run_id)

        play(tmp_path / "none", not_kept)
        play(tmp_path / "kept", saved, policy=AgentPolicy(downloads=str(kept)))
        assert "await go_to(ctx.page, " in exported["source"], exported["source"]
        _runs_with_no_model(tmp_path, exported["source"])


def test_a_menu_that_opens_under_the_mouse_is_opened_by_hover(tmp_path: Path) -> None:
    """An entry shown only while the mouse is over its menu is not in the snapshot until the
    agent hovers the menu; then it is, and its link is followed by ref."""
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/menu"))["run_id"]
            assert 'link "Orders"' not in await agent.call("snapshot", run_id=run_id)
            await agent.call("hover", run_id=run_id, selector="#menu")
            shot = await agent.call("snapshot", run_id=run_id)
            followed = await agent.call("click", run_id=run_id, ref=_ref_of(shot, 'link "Orders"'))
            assert followed["url"] == f"{site.url}/done?from=menu"

        play(tmp_path, scenario)


def test_wait_for_waits_until_the_page_shows_a_text_or_no_longer_does(tmp_path: Path) -> None:
    """Results that come a second after the click that asked for them: ``wait_for`` answers once
    the page shows them (a snapshot then has them), and once the spinner is gone; a text that
    never comes is ``met: false`` at the timeout, with a note, not an error; a wait_for with
    neither text nor gone, or a timeout out of range, is a tool error; each wait is journaled
    as a read call."""
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/late"))["run_id"]
            await agent.call("click", run_id=run_id, selector="#search")
            came = await agent.call("wait_for", run_id=run_id, text="3 RESULTS")
            assert came["met"] is True and came["url"] == f"{site.url}/late", came
            assert "3 results" in await agent.call("snapshot", run_id=run_id)
            assert (await agent.call("wait_for", run_id=run_id, gone="Searching"))["met"] is True
            never = await agent.call("wait_for", run_id=run_id, text="4 results", timeout=0.5)
            assert never["met"] is False and never["waited"] >= 0.5 and "snapshot" in never["notes"][0], never
            assert "either text" in await agent.error("wait_for", run_id=run_id)
            assert "either text" in await agent.error("wait_for", run_id=run_id, text="a", gone="b")
            assert "at most 30" in await agent.error("wait_for", run_id=run_id, text="a", timeout=31)
            await agent.service.live[run_id].flush()
            waits = [c.args for c in journaled_calls(store.events(run_id)) if c.tool == "wait_for"]
            assert [(w["text"], w["gone"]) for w in waits] == [
                ("3 RESULTS", None),
                (None, "Searching"),
                ("4 results", None),
            ]

        play(tmp_path, scenario)


def test_wait_for_reads_the_frames_the_page_shows(tmp_path: Path) -> None:
    """A result that comes in a frame of another origin (a card check in a payment form):
    ``wait_for`` answers once the frame shows it and once its spinner text is gone; a text that
    only a frame nobody sees (a tracker's) shows is not met."""
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/framed"))["run_id"]
            came = await agent.call("wait_for", run_id=run_id, text="card verified")
            assert came["met"] is True and came["url"] == f"{site.url}/framed", came
            assert (await agent.call("wait_for", run_id=run_id, gone="Checking the card"))["met"] is True
            hidden = await agent.call("wait_for", run_id=run_id, text="Tracking pixel", timeout=0.5)
            assert hidden["met"] is False, hidden

        play(tmp_path, scenario)


def _runs_with_no_model(tmp_path: Path, source: str) -> None:
    """An exported flow's ``source``, run with ``browserworker run``, succeeds."""
    flow = tmp_path / "exported_flow.py"
    flow.write_text(source)
    runner = BW(db=tmp_path / "runs.db")
    done = runner.run("run", str(flow), "--db", str(runner.db), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["run"]["state"] == "SUCCEEDED", done.stdout + done.stderr


def _ref_of(snapshot: str, element: str) -> str:
    """The ref a snapshot gives ``element`` (its role and name, e.g. ``textbox "Card"``)."""
    (line,) = [line for line in snapshot.splitlines() if element in line]
    return line.split("[ref=")[1].split("]")[0]


def test_fields_in_shadow_roots_and_frames_are_read_and_reached_by_ref(tmp_path: Path) -> None:
    """A custom element's field (in its open shadow root), editors (``contenteditable``, one a
    frame's whole document), a select's options, and a payment form in a frame of another
    origin are in the snapshot where the page shows them, the frame's under its own
    line; a fill by ref reaches each, a submit by ref inside the frame lands once, and the
    selectors journaled for them find the same elements on a fresh page (a second session)."""
    key = f"widgets-{tmp_path.name}"[:48]
    with ChannelTarget() as site:
        page = f"{site.url}/widgets?key={key}"

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=page))["run_id"]
            shot = await agent.call("snapshot", run_id=run_id)
            lines = shot.splitlines()
            frame = lines.index('- iframe "Payment"')
            card_line = next(i for i, line in enumerate(lines) if 'textbox "Card"' in line)
            assert card_line > frame and lines[card_line].startswith("    - textbox"), shot
            size = lines.index(f'- combobox "Size" [ref={_ref_of(shot, "combobox")}]: Medium')
            assert lines[size + 1 : size + 4] == [
                '  - option "Small"',
                '  - option "Medium" [selected]',
                '  - option "Large"',
            ]
            await agent.call("select", run_id=run_id, ref=_ref_of(shot, "combobox"), values=["Large"])
            nick, card = _ref_of(shot, 'textbox "Nickname"'), _ref_of(shot, 'textbox "Card"')
            await agent.call("fill", run_id=run_id, ref=nick, value="Ann")
            await agent.call("fill", run_id=run_id, ref=card, value="4242")
            await agent.call("fill", run_id=run_id, ref=_ref_of(shot, 'textbox "Comment"'), value="ring twice")
            notes = shot.splitlines()[lines.index('- iframe "Notes"') + 1]
            assert notes.startswith("  - textbox [ref="), shot
            await agent.call("fill", run_id=run_id, ref=notes.split("[ref=")[1].split("]")[0], value="leave it")
            shot = await agent.call("snapshot", run_id=run_id)
            assert [shot.count(f": {v}") for v in ("Ann", "4242", "ring twice", "leave it", "Large")] == [1] * 5, shot
            assert '  - option "Large" [selected]' in shot
            verify = {"get": f"/count?key={key}", "path": "count"}
            done = await agent.call(
                "submit", run_id=run_id, ref=_ref_of(shot, 'button "Pay"'), effect_key="pay", verify=verify
            )
            assert done["status"] == "committed", done
            targets = [c.target.selector for c in journaled_calls(store.events(run_id)) if c.target is not None]
            assert [("enter-frame" in t) for t in targets] == [False, False, True, False, True, True], targets
            fresh = (await agent.call("open_session", site=page))["run_id"]
            for target in targets:
                await agent.call("extract", run_id=fresh, selector=target)  # a selector that finds nothing is an error

        play(tmp_path, scenario)
        assert site.landings(key) == 1


def _uploads(tmp_path: Path) -> tuple[Path, Path]:
    """A directory the server uploads from (an invoice and a photo in it, and a link out of it)
    and a file outside it."""
    uploads, outside = tmp_path / "uploads", tmp_path / "private.txt"
    uploads.mkdir(parents=True)
    (uploads / "invoice.txt").write_text("INVOICE-7731")
    (uploads / "photo.txt").write_text("PHOTO-5512")
    outside.write_text("PRIVATE-0042")
    (uploads / "escape.txt").symlink_to(outside)
    return uploads, outside


async def _choose(agent: Agent, run_id: str, outside: Path) -> None:
    """Choose the invoice for the file input and the photo through the button in front of the
    hidden one, after the file outside and the link out of the directory are refused."""
    shot = await agent.call("snapshot", run_id=run_id)
    invoice, attach = _ref_of(shot, 'button "Invoice"'), _ref_of(shot, 'button "Attach photo"')
    for path in (str(outside), "escape.txt"):
        said = await agent.error("upload", run_id=run_id, paths=[path], ref=invoice)
        assert "not in a directory this server uploads from" in said, said
    await agent.call("upload", run_id=run_id, paths=["invoice.txt"], ref=invoice)
    await agent.call("upload", run_id=run_id, paths=["photo.txt"], ref=attach)
    shot = await agent.call("snapshot", run_id=run_id)
    (line,) = [line for line in shot.splitlines() if 'button "Invoice" [file]' in line]
    assert line.endswith("]: invoice.txt"), shot


def test_files_are_chosen_only_from_the_operators_directories_and_sent_by_the_submit(tmp_path: Path) -> None:
    """With no ``--files`` directory an upload is refused. With one, a file outside it (or a link
    out of it) is refused; one in it is chosen for a file input, another through the button that
    opens a hidden input's chooser, and nothing is sent until the submit. The submit waits for
    an approval; once approved, the session is taken up again and its page re-built, the files
    chosen again from the journal (the same content), and the one post carries both files."""
    key = f"upload-{tmp_path.name}"[:48]
    uploads, outside = _uploads(tmp_path)
    with ChannelTarget() as site:
        page = f"{site.url}/upload?key={key}"

        async def no_files(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=page))["run_id"]
            said = await agent.error("upload", run_id=run_id, paths=["invoice.txt"], selector="#doc")
            assert "browserworker mcp --files DIR" in said, said

        play(tmp_path / "none", no_files)

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=page))["run_id"]
            await _choose(agent, run_id, outside)
            assert site.landings(key) == 0
            verify = {"get": f"/count?key={key}", "path": "count"}
            parked = await agent.call("submit", run_id=run_id, selector="#go", effect_key="send", verify=verify)
            assert parked["status"] == "awaiting_approval"
            (approval,) = store.approvals.of_run(run_id)
            store.approvals.decide(run_id, approval.step_id, "approve", who="test")
            done = await agent.call("submit", run_id=run_id, selector="#go", effect_key="send", verify=verify)
            assert done["status"] == "committed", done
            chosen = [c.args["files"] for c in journaled_calls(store.events(run_id)) if c.tool == "upload"]
            assert [[(Path(f["path"]).name, f["size"]) for f in files] for files in chosen] == [
                [("invoice.txt", 12)],
                [("photo.txt", 10)],
            ]

        play(
            tmp_path / "files",
            scenario,
            policy=AgentPolicy(approve_all=True, files=(str(uploads),)),
            approvals=PARK_AT_ONCE,
        )
    [body] = site.bodies(key)
    assert b"INVOICE-7731" in body and b"PHOTO-5512" in body and b"PRIVATE" not in body


def test_a_self_signed_certificate_is_accepted_only_when_the_operator_says_so(tmp_path: Path) -> None:
    """A local application's HTTPS, with a certificate no browser trusts: a session does not
    open, and the error names the certificate. With the operator's ``ignore_https_errors`` it
    opens, and the session keeps the setting: taken up again after its submit's approval (its
    page re-built in a new context), its submit lands once, the verifier reading the site over
    the same TLS; its export writes the setting into the flow."""
    key = f"tls-{tmp_path.name}"[:48]
    with ChannelTarget(tls=True) as site:
        page = f"{site.url}/page/form?key={key}"

        async def refused(agent: Agent, store: Store) -> None:
            said = await agent.error("open_session", site=page)
            assert "could not open" in said and "--ignore-https-errors" in said, said

        play(tmp_path / "strict", refused)

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=page))["run_id"]
            verify = {"get": f"/count?key={key}", "path": "count"}
            parked = await agent.call("submit", run_id=run_id, selector="#go", effect_key="send", verify=verify)
            assert parked["status"] == "awaiting_approval", parked
            (approval,) = store.approvals.of_run(run_id)
            store.approvals.decide(run_id, approval.step_id, "approve", who="test")
            done = await agent.call("submit", run_id=run_id, selector="#go", effect_key="send", verify=verify)
            assert done["status"] == "committed", done
            assert 'context={"ignore_https_errors": True}' in export_flow(store, run_id)

        play(
            tmp_path / "local",
            scenario,
            policy=AgentPolicy(approve_all=True, ignore_https_errors=True),
            approvals=PARK_AT_ONCE,
        )
    assert site.landings(key) == 1


def test_a_file_changed_since_it_was_chosen_is_not_sent_by_a_replay(tmp_path: Path) -> None:
    """A session taken up again re-chooses its files from the journal only if their content is
    what it was: a photo changed while its submit waited for an approval stops the replay, with
    the reason, and nothing is sent."""
    key = f"upload-changed-{tmp_path.name}"[:48]
    uploads, outside = _uploads(tmp_path)
    with ChannelTarget() as site:

        async def scenario(agent: Agent, store: Store) -> None:
            run_id = (await agent.call("open_session", site=f"{site.url}/upload?key={key}"))["run_id"]
            await _choose(agent, run_id, outside)
            parked = await agent.call("submit", run_id=run_id, selector="#go", effect_key="send")
            assert parked["status"] == "awaiting_approval"
            (uploads / "photo.txt").write_text("PHOTO-EDITED")
            (approval,) = store.approvals.of_run(run_id)
            store.approvals.decide(run_id, approval.step_id, "approve", who="test")
            said = await agent.error("submit", run_id=run_id, selector="#go", effect_key="send")
            assert "replaying" in said and "photo.txt has changed since it was chosen" in said, said

        play(tmp_path, scenario, policy=AgentPolicy(approve_all=True, files=(str(uploads),)), approvals=PARK_AT_ONCE)
        assert site.landings(key) == 0


def test_bad_input_is_a_clear_tool_error_and_writes_nothing(tmp_path: Path, shop: Any) -> None:
    """An unknown run, an unknown ref, a stale ref (the page changed), a verify that is not valid,
    a site that is not a URL: each a tool error that says so, with nothing journaled."""

    async def scenario(agent: Agent, store: Store) -> None:
        assert "no agent session 'r-nope'" in await agent.error("snapshot", run_id="r-nope")
        assert "site must be an http(s) URL" in await agent.error("open_session", site="file:///etc/passwd")
        run_id = await agent.sign_in(shop.url)
        await agent.call("snapshot", run_id=run_id)
        before = len(store.events(run_id))
        assert "unknown ref 'e999'" in await agent.error("fill", run_id=run_id, ref="e999", value="x")
        await agent.call("navigate", run_id=run_id, url="/orders")
        before = len(store.events(run_id))
        assert "is stale" in await agent.error("fill", run_id=run_id, ref="e3", value="x")
        said = await agent.error("submit", run_id=run_id, selector="#nav-home", verify={"url": "/orders"})
        assert "invalid verify" in said and "text or selector" in said
        said = await agent.error("submit", run_id=run_id, selector="#nav-home", verify={"get": "/x", "text": "y"})
        assert "invalid verify" in said
        assert "matches nothing" in await agent.error("fill", run_id=run_id, selector="#nope", value="x")
        assert len(store.events(run_id)) == before, "a refused call journals nothing"
        assert not [a for a in store.attempts(run_id) if a.kind == "effect"]

    play(tmp_path, scenario)


def test_export_writes_a_flow_without_secrets(tmp_path: Path, shop: Any) -> None:
    """`export_flow` writes each page-changing call that succeeded as a step and the submit as an
    effect with its verifier; the password is a required SecretStr input, never its value; the
    reference the verifier looks for defaults to the run id."""
    from browserworker.agent import export_flow
    from browserworker.flow import Effect, load_flow

    reference = f"exp-{tmp_path.name}"
    state: dict[str, Any] = {}

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = state["run_id"] = await agent.sign_in(shop.url)
        await agent.fill_order(run_id, reference)
        await agent.error("click", run_id=run_id, selector="#submit")  # refused: left out
        await agent.call("fill", run_id=run_id, selector="#reference", value=reference)
        await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))

    store = play(tmp_path, scenario)
    source = export_flow(store, state["run_id"])
    assert "demo" in source.split("password")[0], "the username is a default"
    assert "password: SecretStr  #" in source and "'demo'" not in source.split("password: SecretStr")[1].split("\n")[0]
    path = tmp_path / "exported.py"
    path.write_text(source)
    flow = load_flow(path).flow
    kinds = [(s.id, type(s).__name__) for s in flow.steps]
    assert kinds == [
        ("t0001.navigate", "Action"),
        ("t0002.fill", "Action"),
        ("t0003.fill", "Action"),
        ("t0004.submit", "Action"),
        ("t0005.fill", "Action"),
        ("t0006.fill", "Action"),
        ("t0008.fill", "Action"),
        ("t0009.submit", "Effect"),
    ]
    effect = flow.steps[-1]
    assert isinstance(effect, Effect) and effect.verifier is not None
    assert json.dumps(sorted(flow.inputs_model.model_fields)) == json.dumps(
        ["item", "password", "reference", "reference_2", "username"]
    )


def test_a_link_clicked_by_ref_navigates_and_stays_journaled_as_done(tmp_path: Path, shop: Any) -> None:
    """A click by ref on a link that leaves the page is answered with the new page, not "stale":
    its element is gone once the click has done its work, and the check for a missing element
    (which stops an action still waiting for one) does not count that. The call stays journaled
    as done, so a replay redoes it."""

    async def scenario(agent: Agent, store: Store) -> None:
        run_id = await agent.sign_in(shop.url)
        shot = await agent.call("snapshot", run_id=run_id)
        line = next(line for line in str(shot).splitlines() if 'link "Orders"' in line)
        ref = line.split("[ref=")[1].split("]")[0]
        clicked = await agent.call("click", run_id=run_id, ref=ref)
        assert clicked["url"].endswith("/orders"), clicked
        click = [c for c in journaled_calls(store.events(run_id)) if c.tool == "click"]
        assert len(click) == 1 and click[0].args.get("ok") is True, click

    play(tmp_path, scenario)


def test_an_element_gone_before_its_action_stops_it_at_once(tmp_path: Path, shop: Any) -> None:
    """A ref whose element the page removed without navigating (so the ref is not known stale)
    would keep its action waiting for the element; the probe beside the action finds it gone
    and stops it well before Playwright's 30 s wait: a "stale" tool error, the call journaled
    undone. An element that is only late (disabled for a moment) is waited for and filled."""
    store = open_store(tmp_path / "browserworker.db")

    async def go() -> None:
        service = AgentService(store, evidence_dir=tmp_path / "evidence")
        try:
            async with Client(build_server(service)) as client:
                agent = Agent(client)
                run_id = await agent.sign_in(shop.url)
                page = service.live[run_id].page

                async def item_ref() -> str:
                    shot = await agent.call("snapshot", run_id=run_id)
                    line = next(line for line in str(shot).splitlines() if 'textbox "Item"' in line)
                    return line.split("[ref=")[1].split("]")[0]

                ref = await item_ref()
                await page.evaluate("document.querySelector('#item').remove()")
                started = asyncio.get_running_loop().time()
                assert "is stale" in await agent.error("fill", run_id=run_id, ref=ref, value="x")
                assert asyncio.get_running_loop().time() - started < 5
                fills = [c for c in journaled_calls(store.events(run_id)) if c.tool == "fill" and c.args.get("ref")]
                assert [c.args.get("ok") for c in fills] == [False]

                await page.reload()
                ref = await item_ref()
                await page.evaluate(
                    "(() => { const e = document.querySelector('#item'); e.disabled = true;"
                    " setTimeout(() => e.disabled = false, 600); })()"
                )
                await agent.call("fill", run_id=run_id, ref=ref, value="late")
                assert await page.input_value("#item") == "late"
        finally:
            await service.aclose()

    asyncio.run(go())
