"""`browserworker mcp export`: an agent's session as a flow file that runs with no model, passes
`browserworker chaos`, and is recorded and replayed offline in pytest like a hand-written flow."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from browserworker.agent import AgentService
from browserworker.mcp import build_server
from browserworker.store import open_store
from tests.support.agent import Agent, order_verify
from tests.support.bw import BW


def _session(db: Path, base_url: str, reference: str) -> str:
    """An agent signs in, fills the order form, tries a click that would post it (held), and submits."""

    async def play() -> str:
        service = AgentService(open_store(db))
        try:
            async with Client(build_server(service)) as client:
                agent = Agent(client)
                run_id = await agent.sign_in(base_url)
                await agent.fill_order(run_id, reference)
                await agent.error("click", run_id=run_id, selector="#submit")
                answer = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))
                assert answer["status"] == "committed"
                await agent.call("close_session", run_id=run_id)
                return run_id
        finally:
            await service.aclose()

    return asyncio.run(play())


@pytest.mark.browser
@pytest.mark.slow
def test_an_exported_session_runs_passes_chaos_and_replays_offline(
    tmp_path: Path, shop: Any, pytester: pytest.Pytester
) -> None:
    """The export of a session that placed an order: `run` places one more (its own proof typed,
    the run id), `chaos` finds every crash point lands exactly once, and a recording of it
    replays in pytest with no shop."""
    db = tmp_path / "agent.db"
    run_id = _session(db, shop.url, f"agent-{tmp_path.name}")
    flow = tmp_path / "agent_flow.py"
    exported = BW(db=db).run("mcp", "export", run_id, "--db", str(db), "-o", str(flow))
    assert exported.returncode == 0, exported.stderr
    source = flow.read_text()
    assert '@flow.effect(id="t0008.submit"' in source and "t0007" not in source, "the held click is left out"
    password = next(line for line in source.splitlines() if line.strip().startswith("password:"))
    assert password.startswith("    password: SecretStr  #"), "a secret is a required input, its value never written"

    runner = BW(db=tmp_path / "runs.db")
    done = runner.run("run", str(flow), "--db", str(runner.db), "--input", "password=demo", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    new_run = json.loads(done.stdout)["run"]["id"]
    assert len(shop.orders(new_run)) == 1, "the run typed its own id as the proof, and ordered once"

    chaos = runner.run("chaos", str(flow), "--input", "password=demo", "--json", timeout=600)
    assert chaos.returncode == 0, chaos.stdout + chaos.stderr
    report = json.loads(chaos.stdout)
    assert report["ok"] is True and all(r["landings"] == 1 for r in report["results"]), report["results"]

    recs = tmp_path / "recs"
    recorded = runner.run(
        "run", str(flow), "--db", str(runner.db), "--input", "password=demo", "--record", str(recs / "agent-order")
    )
    assert recorded.returncode == 0, recorded.stderr
    pytester.makepyfile(
        test_agent="""
        def test_agent_order(replay):
            result = replay("agent-order")
            assert result.ok and result.state == "SUCCEEDED", result.report()
        """
    )
    pytester.makeconftest("""
        import pytest

        @pytest.fixture(scope="session")
        def sandbox():
            pytest.fail("a replay must not need the shop")
    """)
    replayed = pytester.runpytest_subprocess("--bw-record=none", "--bw-recordings", str(recs), "-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=1)


@pytest.mark.browser
def test_an_export_makes_a_submit_that_sent_nothing_an_action_and_marks_one_the_site_answered_with_errors(
    tmp_path: Path, shop: Any, bw: BW
) -> None:
    """A submit whose click sent nothing (on a field, not a button) is exported as an action; a
    submit the shop answered with its form's errors (no item) as an effect with the comment that
    says to delete it if the site refused it. The file runs: the action sends nothing, the
    refused submit is refused again, and the shop has no order of its reference."""
    reference = f"refused-{tmp_path.name}"[:60]

    async def play() -> str:
        service = AgentService(open_store(bw.db))
        try:
            async with Client(build_server(service)) as client:
                agent = Agent(client)
                run_id = await agent.sign_in(shop.url)
                await agent.call("fill", run_id=run_id, selector="#reference", value=reference)
                nothing = await agent.call("submit", run_id=run_id, selector="#item", verify=order_verify(reference))
                assert "the click sent nothing" in nothing["note"], nothing
                refused = await agent.call("submit", run_id=run_id, selector="#submit", verify=order_verify(reference))
                assert "the page shows errors" in refused["note"], refused
                await agent.call("close_session", run_id=run_id)
                return run_id
        finally:
            await service.aclose()

    run_id = asyncio.run(play())
    flow = tmp_path / "flow.py"
    assert bw.run("mcp", "export", run_id, "--db", str(bw.db), "-o", str(flow)).returncode == 0
    source = flow.read_text()
    unsent = source.split('@flow.step(id="t0006.submit")')
    assert len(unsent) == 2 and "sent nothing" in unsent[0].rsplit("\n\n\n", 1)[1], source
    assert "t0006_submit_landed" not in source
    refused = source.split('@flow.effect(id="t0007.submit"')
    assert len(refused) == 2 and "showed errors after this submit" in refused[0].rsplit("\n\n\n", 1)[1], source

    runner = BW(db=tmp_path / "runs.db")
    done = runner.run(
        "run", str(flow), "--db", str(runner.db), "--input", "password=demo", "--input", f"reference={reference}"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert shop.orders(reference) == [], "neither submit placed an order, in the session or in the run"


def test_export_refuses_an_unknown_run_and_an_existing_file(tmp_path: Path, bw: BW) -> None:
    """An unknown run is refused (exit 2, no file); an existing output is kept unless --force."""
    open_store(bw.db).close()
    out = tmp_path / "flow.py"
    refused = bw.run("mcp", "export", "r-nope", "--db", str(bw.db), "-o", str(out))
    assert refused.returncode == 2 and "no agent session 'r-nope'" in refused.stderr
    assert not out.exists()
    out.write_text("# mine\n")
    kept = bw.run("mcp", "export", "r-nope", "--db", str(bw.db), "-o", str(out))
    assert kept.returncode != 0 and "exists" in kept.stderr and out.read_text() == "# mine\n"
