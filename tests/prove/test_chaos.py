"""`browserworker chaos` against the sandbox: every fault point of flows/place_order.py, and the
verifier self-test catching a wrong verifier (and the duplicate it causes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserworker.prove._chaos import CHAOS_POINTS, chaos_run_id
from browserworker.sandbox.testing import start_sandbox
from tests.support.bw import BW
from tests.support.paths import FLOWS, TEST_FLOWS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_chaos_every_point_lands_exactly_once(bw: BW, shop: Any) -> None:
    """Crashing the submit at each point and resuming always ends with exactly one order,
    classified as the fault-point table says; the verifier passes its self-test (not done
    before the dispatch, done after the effect). Three scenarios run at once (``--jobs 3``), and
    the report lists them in the order of the points all the same."""
    done = bw.run(
        "chaos",
        str(FLOWS / "place_order.py"),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        "--jobs",
        "3",
        "--json",
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert [(t["step"], t["phase"], t["said"], t["status"], t["verifier"]) for t in report["self_tests"]] == [
        ("submit", "before", "not_done", "ok", "submit_landed"),
        ("submit", "after", "done", "ok", "submit_landed"),
    ]
    assert [r["point"] for r in report["results"]] == list(CHAOS_POINTS)
    results = {r["point"]: r for r in report["results"]}
    for point, r in results.items():
        assert (r["verdict"], r["landings"], r["probe"], r["run_state"]) == ("ok", 1, "count", "SUCCEEDED"), point
    # the classification each point must end in (docs/proving.md, the fault-point table)
    assert results["after_intent_commit"]["classification"] == "FAILED_BEFORE_SEND (recovery:no_dispatch)"
    assert results["dispatch_held"]["classification"] == "FAILED_BEFORE_SEND (recovery:no_dispatch)"
    assert results["lease_expired_while_alive"]["classification"] == "FAILED_BEFORE_SEND (recovery:no_dispatch)"
    assert results["after_dispatch_commit"]["classification"] == "NOT_DONE (verifier)"
    assert results["after_response"]["decision"] == "SUCCEEDED by outbox"
    # the order landed, its reply never reached the outbox: the verifier finds it, no replay
    assert results["reply_lost"]["classification"] == "SUCCEEDED (verifier)"
    assert results["reply_lost"]["decision"] == "SUCCEEDED by verifier"
    assert results["after_dispatch"]["classification"] in ("NOT_DONE (verifier)", "SUCCEEDED (verifier)")
    assert results["reclaimer_startup"]["classification"] in ("NOT_DONE (verifier)", "SUCCEEDED (verifier)")


@pytest.fixture
def own_shop(tmp_path: Path) -> Iterator[Any]:
    """A sandbox of this test's own: the duplicate it provokes must not reach the session's shop,
    which other tests check for duplicates."""
    shop = start_sandbox(tmp_path / "own-shop.db")
    try:
        yield shop
    finally:
        shop.stop()


def test_chaos_names_a_wrong_verifier_and_shows_the_duplicate_it_causes(bw: BW, own_shop: Any) -> None:
    """A verifier that always says not done fails its self-test after the effect: `chaos` exits 1
    naming the step, the verifier function and its file:line, what it said and what was expected.
    The count probe shows what trusting it costs: killed at reply_lost (the order landed, its reply
    lost), recovery believes the verifier and places the order a second time (DUPLICATE), while at
    after_intent_commit (nothing sent, the verifier not asked) the order lands once."""
    flow = TEST_FLOWS / "wrong_verifier_counted.py"
    where = f"{flow}:{flow.read_text().splitlines().index('@submit.verify') + 1}"  # as Step.where: the decorator
    done = bw.run(
        "chaos",
        str(flow),
        "--input",
        f"base_url={own_shop.url}",
        "--input",
        "item=tea",
        "--points",
        "reply_lost,after_intent_commit",
        "--json",
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    tests = [
        (t["step"], t["verifier"], t["where"], t["phase"], t["said"], t["expected"], t["status"])
        for t in report["self_tests"]
    ]
    assert tests == [
        ("submit", "looks_for_the_wrong_order", where, "before", "not_done", "not_done", "ok"),
        ("submit", "looks_for_the_wrong_order", where, "after", "not_done", "done", "BROKEN"),
    ]
    results = {r["point"]: r for r in report["results"]}
    assert (
        results["reply_lost"]["classification"],
        results["reply_lost"]["landings"],
        results["reply_lost"]["verdict"],
    ) == ("NOT_DONE (verifier)", 2, "DUPLICATE")
    assert (results["after_intent_commit"]["landings"], results["after_intent_commit"]["verdict"]) == (1, "ok")
    assert (
        f"error: verifier looks_for_the_wrong_order of step submit ({where}) is wrong: after the effect it "
        "said not_done, expected done; under the crashes: DUPLICATE at reply_lost (landings 2)"
    ) in done.stderr
    assert "error: submit @ reply_lost #1: DUPLICATE" in done.stderr


def test_a_scenarios_run_id_is_letters_digits_and_hyphens() -> None:
    """An exported agent session's flow types its run id as the order's reference, and its step
    ids hold a dot (``t0010.submit``): a chaos run id with that dot made Django REST framework's
    detail route (no dot in a reference) answer 404 to the verifier, and every scenario LOST."""
    run_id = chaos_run_id("t0010.submit", "after_dispatch", 1)
    assert run_id.startswith("chaos-t0010-submit-after-dispatch-1-"), run_id
    assert all(c.isalnum() or c == "-" for c in run_id), run_id
