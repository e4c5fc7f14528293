"""``browserworker mcp --approve-in-client``: a submit held for a person's approval is also put to
the person in the agent's own client (MCP elicitation), and their answer is journaled as the
console's would be. Against the sandbox shop in real Chromium, through the SDK's in-memory
client, whose elicitation callback plays the person; each case on both protocols: ``legacy``
(up to 2025-11-25: the server asks during the call, while the submit holds its request) and the
current one (2026-07-28: the call ends with the question, the client asks and calls again with
the answer; the session is parked meanwhile)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import ElicitResult

from browserworker.agent import AgentPolicy, AgentService
from browserworker.mcp import build_server
from browserworker.runtime import ApprovalSettings
from browserworker.states import RunState
from browserworker.store import Store, open_store
from tests.support.agent import Agent, http_server, order_verify, stdio_agent, stop_server
from tests.support.bw import BW

pytestmark = pytest.mark.browser

MODES = ["legacy", "2026-07-28"]

HOLD = 120.0
"""Seconds the server holds a submit's request for a person before it parks the session."""

ASKED_WITHIN = 15.0
"""Seconds a submit call takes at most here when its person is asked at once (mid-call, while it
holds; or, by the call's end, with the session parked at once for that call): a few. Asked only
once the hold ends, it would take the hold, or the ~30 s a held click waits, whichever ends first."""


def _person(answer: ElicitResult, questions: list[str]) -> Any:
    """A client's elicitation callback playing its person: notes each question, answers ``answer``."""

    async def person(context: Any, params: Any) -> ElicitResult:
        questions.append(params.message)
        return answer

    return person


async def _submit_order(agent: Agent, base_url: str, reference: str) -> tuple[str, Any]:
    """Sign in, fill an order and submit it once: the run id and the submit's answer, which comes
    within :data:`ASKED_WITHIN` (the person was asked at once)."""
    run_id = await agent.sign_in(base_url)
    await agent.fill_order(run_id, reference)
    began = time.monotonic()
    said = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))
    assert time.monotonic() - began < ASKED_WITHIN, "the person was asked only once the hold had passed"
    return run_id, said


YES = ElicitResult(action="accept", content={"approve": True})


@asynccontextmanager
async def asked_agent(
    store: Store, tmp: Path, answer: ElicitResult, *, mode: str, ask_in_client: bool = True, hold: float = HOLD
) -> AsyncIterator[tuple[Agent, list[str]]]:
    """An agent whose client answers every question ``answer``; the questions it was asked."""
    service = AgentService(
        store,
        evidence_dir=tmp / "evidence",
        policy=AgentPolicy(approve_all=True),
        approvals=ApprovalSettings(hold=hold),
    )
    questions: list[str] = []
    try:
        server = build_server(service, ask_in_client=ask_in_client)
        async with Client(server, elicitation_callback=_person(answer, questions), mode=mode) as client:
            yield Agent(client, service), questions
    finally:
        await service.aclose()


def _order(shop: Any, tmp_path: Path, answer: ElicitResult, **kw: Any) -> tuple[Store, str, str, Any, list[str]]:
    """:func:`_submit_order` with an in-memory client: the store, run id, reference, answer and
    questions."""
    store = open_store(tmp_path / "browserworker.db")
    reference = f"ask-{tmp_path.name}"[:60]

    async def go() -> tuple[str, Any, list[str]]:
        async with asked_agent(store, tmp_path, answer, **kw) as (agent, questions):
            return (*await _submit_order(agent, shop.url, reference), questions)

    run_id, said, questions = asyncio.run(go())
    return store, run_id, reference, said, questions


@pytest.mark.parametrize("mode", MODES)
def test_a_yes_in_the_client_sends_the_held_submit_in_the_same_call(tmp_path: Path, shop: Any, mode: str) -> None:
    """The person is asked, shown what the submit sends; their yes is journaled with who said it,
    and the agent's one submit call sends it: committed, one order. Asked mid-call, the request
    goes while held (the session never parked); asked by the call's end, the retried call takes
    the session up again and sends it."""
    store, run_id, reference, said, questions = _order(shop, tmp_path, YES, mode=mode)
    assert said["status"] == "committed", said
    assert len(shop.orders(reference)) == 1
    (question,) = questions
    assert "POST" in question and "/orders" in question and reference in question
    (approval,) = store.approvals.of_run(run_id)
    assert approval.state == "APPROVED"
    assert approval.decided_by is not None and "(asked in the MCP client)" in approval.decided_by
    parked = RunState.AWAITING_APPROVAL in [e.to_state for e in store.events(run_id)]
    assert parked is (mode != "legacy")


@pytest.mark.parametrize("mode", MODES)
def test_a_no_in_the_client_rejects_the_submit_and_nothing_is_sent(tmp_path: Path, shop: Any, mode: str) -> None:
    """A no (with its reason) is the approval's rejection: the submit fails, nothing is sent, and
    the journal says who rejected it and why."""
    store, run_id, reference, said, _ = _order(
        shop,
        tmp_path,
        ElicitResult(action="accept", content={"approve": False, "reason": "wrong item"}),
        mode=mode,
    )
    assert said["status"] == "failed", said
    assert shop.orders(reference) == []
    (approval,) = store.approvals.of_run(run_id)
    assert approval.state == "REJECTED" and approval.reason == "wrong item"


@pytest.mark.parametrize("mode", MODES)
def test_a_dismissed_question_leaves_the_decision_to_the_console(tmp_path: Path, shop: Any, mode: str) -> None:
    """A question the person dismisses (cancel) decides nothing: the session is parked, the agent
    told awaiting_approval, the approval still waits; once the console approves, the agent's
    retry sends it once."""
    # mid-call, the dismissed question leaves the request held until the hold ends: a short one
    hold = 2.0 if mode == "legacy" else HOLD
    store, run_id, reference, said, questions = _order(
        shop, tmp_path, ElicitResult(action="cancel"), mode=mode, hold=hold
    )
    assert said["status"] == "awaiting_approval", said
    assert len(questions) == 1 and shop.orders(reference) == []
    (approval,) = store.approvals.of_run(run_id)
    assert approval.state == "PENDING"
    store.approvals.decide(run_id, approval.step_id, "approve", who="console")

    async def retry() -> Any:
        async with asked_agent(store, tmp_path, ElicitResult(action="cancel"), mode=mode) as (agent, again):
            done = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))
            return done, again

    done, again = asyncio.run(retry())
    assert done["status"] == "committed", done
    assert again == [] and len(shop.orders(reference)) == 1


def test_without_the_option_the_client_is_never_asked(tmp_path: Path, shop: Any) -> None:
    """A server not told to ask in the client leaves approvals to the console, even for a client
    that could be asked."""
    _, _, reference, said, questions = _order(
        shop,
        tmp_path,
        YES,
        mode="legacy",
        ask_in_client=False,
        hold=0.0,
    )
    assert said["status"] == "awaiting_approval" and questions == []
    assert shop.orders(reference) == []


def test_asking_in_the_client_needs_a_submit_held_for_approval(tmp_path: Path) -> None:
    """--approve-in-client alone is a usage error (there would be nothing to ask about), said
    before anything is opened."""
    db = tmp_path / "browserworker.db"
    done = BW(db=db).run("mcp", "--approve-in-client")
    assert done.returncode == 2
    assert "--approve-submits or --approve-site" in done.stderr
    assert not db.exists()


def test_a_server_launched_with_the_option_asks_a_stdio_client(tmp_path: Path, shop: Any) -> None:
    """``browserworker mcp --approve-submits --approve-in-client`` launched over stdio, as a
    desktop client launches it, asks that client's person, and their yes places the order once."""
    db = tmp_path / "browserworker.db"
    reference = f"stdio-ask-{tmp_path.name}"[:60]
    questions: list[str] = []

    async def go() -> Any:
        hold = {"BROWSERWORKER_APPROVAL_HOLD": str(HOLD)}
        async with stdio_agent(
            db, "--approve-submits", "--approve-in-client", env=hold, elicitation_callback=_person(YES, questions)
        ) as agent:
            return (await _submit_order(agent, shop.url, reference))[1]

    said = asyncio.run(go())
    assert said["status"] == "committed", said
    assert len(questions) == 1 and reference in questions[0]
    assert len(shop.orders(reference)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_server_over_http_asks_its_client(tmp_path: Path, shop: Any, mode: str) -> None:
    """Over streamable HTTP as well (a web client's transport): a legacy client is asked during
    the call, over the call's event stream; a current one by the call's end. Its yes places the
    order once."""
    db = tmp_path / "browserworker.db"
    reference = f"http-ask-{mode}-{tmp_path.name}"[:60]
    questions: list[str] = []
    env = {**os.environ, "BROWSERWORKER_APPROVAL_HOLD": str(HOLD)}
    proc, port = http_server(db, "--approve-submits", "--approve-in-client", env=env)
    try:

        async def go() -> Any:
            url = f"http://127.0.0.1:{port}/mcp"
            async with Client(url, elicitation_callback=_person(YES, questions), mode=mode) as client:
                return (await _submit_order(Agent(client), shop.url, reference))[1]

        said = asyncio.run(go())
    finally:
        stop_server(proc)
    assert said["status"] == "committed", said
    assert len(questions) == 1 and reference in questions[0]
    assert len(shop.orders(reference)) == 1
