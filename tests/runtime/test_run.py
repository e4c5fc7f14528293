"""`browserworker run` end to end: real Chromium, real SQLite, the sandbox as target."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.bw import BW
from tests.support.paths import TEST_FLOWS

pytestmark = pytest.mark.browser


def effect_attempts(view: dict[str, Any], step: str = "submit") -> list[dict[str, Any]]:
    return [a for a in view["journal"] if a["step_id"] == step]


def test_normal_run_places_one_order(bw: BW, shop: Any, run_id: str) -> None:
    """A normal run succeeds (exit 0), journals one effect attempt, and places one order."""
    done = bw.run_flow("place_order.py", "--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == run_id
    for step in ("login", "open_form", "submit", "read_confirmation"):
        assert f"+ {step} [" in done.stderr
    view = bw.show(run_id)
    assert view["run"]["state"] == "SUCCEEDED"
    [attempt] = effect_attempts(view)
    assert attempt["state"] == "SUCCEEDED" and attempt["request_key"] == f"{run_id}/submit"
    assert attempt["dispatched_at"] and attempt["outbox"][0]["status"] == 303
    orders = shop.orders(f"{run_id}/submit")
    assert len(orders) == 1 and attempt["result"] == {"order_id": str(orders[0]["id"])}
    assert view["journal"][-1]["result"] == {"reference": f"{run_id}/submit"}


def test_form_rerendered_with_errors_fails_without_an_order(bw: BW, shop: Any, run_id: str) -> None:
    """A 200 that re-renders the form with errors is judged by confirm: FAILED, exit 1, no order."""
    done = bw.run_flow("place_order.py", "--input", f"base_url={shop.url}", "--input", "item=", "--run-id", run_id)
    assert done.returncode == 1, done.stderr
    [attempt] = effect_attempts(bw.show(run_id))
    assert (attempt["state"], attempt["decided_by"]) == ("FAILED", "outbox")
    assert shop.orders(f"{run_id}/submit") == []


def test_500_before_commit_is_verified_not_done(bw: BW, shop: Any, run_id: str) -> None:
    """A 500 proves nothing by itself: the verifier says not done, and with no retries the run FAILS."""
    shop.set_faults(fail_before_commit=True, times=1)
    done = bw.run_flow("place_order.py", "--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id)
    assert done.returncode == 1, done.stderr
    attempts = effect_attempts(bw.show(run_id))
    assert [(a["state"], a["decided_by"]) for a in attempts] == [("NOT_DONE", "verifier")]
    assert shop.orders(f"{run_id}/submit") == []


def test_503_after_commit_is_verified_done_and_not_replayed(bw: BW, shop: Any, run_id: str) -> None:
    """A 503 after the order was committed: the verifier finds it, so it is not placed twice."""
    shop.set_faults(fail_after_commit=True, times=1)
    done = bw.run_flow("place_order.py", "--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id)
    assert done.returncode == 0, done.stderr
    attempts = effect_attempts(bw.show(run_id))
    assert [(a["state"], a["decided_by"]) for a in attempts] == [("SUCCEEDED", "verifier")]
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_idempotent_flow_runs(bw: BW, shop: Any, run_id: str) -> None:
    """The API flow places its order with the request key as the Idempotency-Key."""
    done = bw.run_flow(
        "place_order_api.py", "--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id
    )
    assert done.returncode == 0, done.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1


def test_finished_run_is_not_run_again(bw: BW, shop: Any, run_id: str) -> None:
    """Resuming a SUCCEEDED run does nothing and exits 0."""
    args = ("--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id)
    assert bw.run_flow("place_order.py", *args).returncode == 0
    again = bw.run_flow("place_order.py", "--run-id", run_id)
    assert again.returncode == 0, again.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1
    assert len(effect_attempts(bw.show(run_id))) == 1


@pytest.mark.parametrize("mode", ["warn", "fail"])
def test_an_action_that_posts_is_reported_or_stopped(bw: BW, shop: Any, run_id: str, mode: str) -> None:
    """An action that sends a non-GET request is an undeclared side effect: with
    ``undeclared_effects="warn"`` it goes through and is reported; with ``"fail"`` the request
    is aborted in the browser (the shop never sees it) and the run fails."""
    received = shop.inflight()["received"]
    done = bw.run(
        "run",
        str(TEST_FLOWS / "undeclared_post.py"),
        "--db",
        str(bw.db),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        "--run-id",
        run_id,
        env={"BW_TEST_UNDECLARED": mode},
    )
    assert "undeclared side effect: POST" in done.stderr
    [attempt] = [a for a in bw.show(run_id)["journal"] if a["step_id"] == "sneaky"]
    if mode == "warn":
        assert done.returncode == 0, done.stderr
        assert len(shop.orders(f"{run_id}/sneaky")) == 1
        assert attempt["state"] == "SUCCEEDED" and attempt["evidence"]["undeclared_requests"]
    else:
        assert done.returncode == 1, done.stderr
        assert shop.inflight()["received"] == received and shop.orders(f"{run_id}/sneaky") == []
        assert attempt["state"] == "FAILED"
