"""`browserworker chaos` against flows/place_order.py and the sandbox: every fault point."""

from __future__ import annotations

import json
from typing import Any

import pytest

from browserworker import faults
from browserworker.chaos import CHAOS_POINTS
from conftest import BW, FLOWS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_chaos_every_point_lands_exactly_once(bw: BW, shop: Any) -> None:
    """Crashing the submit at each point and resuming always ends with exactly one order,
    classified as the fault-point table says."""
    done = bw.run("chaos", str(FLOWS / "place_order.py"), "--input", f"base_url={shop.url}", "--input", "item=tea",
                  "--json", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    results = {r["point"]: r for r in json.loads(done.stdout)}
    assert set(results) == set(CHAOS_POINTS)
    for point, r in results.items():
        assert (r["verdict"], r["landings"], r["probe"], r["run_state"]) == ("ok", 1, "count", "SUCCEEDED"), point
    # the classification each point must end in (issue table)
    assert results["after_intent_commit"]["classification"] == "FAILED_BEFORE_SEND (recovery:no_dispatch)"
    assert results["dispatch_held"]["classification"] == "FAILED_BEFORE_SEND (recovery:no_dispatch)"
    assert results["lease_expired_while_alive"]["classification"] == "FAILED_BEFORE_SEND (recovery:no_dispatch)"
    assert results["after_dispatch_commit"]["classification"] == "NOT_DONE (verifier)"
    assert results["after_response"]["decision"] == "SUCCEEDED by outbox"
    assert results["after_dispatch"]["classification"] in ("NOT_DONE (verifier)", "SUCCEEDED (verifier)")
    assert results["reclaimer_startup"]["classification"] in ("NOT_DONE (verifier)", "SUCCEEDED (verifier)")


def test_fault_specs_parse_and_fire_on_the_nth_hit() -> None:
    """`POINT[:STEP]=ACTION[@N]` rules fire only for their step and on the Nth hit; bad specs are refused."""
    faults.configure("after_response:submit=raise@2")
    try:
        faults.hit("after_response", "submit")
        faults.hit("after_response", "other")
        with pytest.raises(faults.InjectedFault):
            faults.hit("after_response", "submit")
        faults.hit("after_response", "submit")  # only the 2nd
    finally:
        faults.configure(None)
    for bad in ("nowhere=kill", "after_response=explode", "after_response=kill@0", "after_response"):
        with pytest.raises(ValueError):
            faults.parse(bad)
