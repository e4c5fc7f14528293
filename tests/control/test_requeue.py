"""A person's requeue: a fresh failure budget for every step (journaled with who), the
`requeue` command, `resolve --who`, and what `run --run-id` says of a run that has ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from browserworker.runtime._recovery_rules import own_failures
from browserworker.states import AttemptState
from browserworker.store.records import AttemptRecord
from tests.support.paths import TEST_FLOWS


def _failed(step: str, at: float) -> AttemptRecord:
    a = AttemptRecord.new(
        id=int(at),
        run_id="r",
        step_id=step,
        kind="effect",
        attempt_no=int(at),
        request_key="r/s",
        request_fingerprint="fp",
        state=AttemptState.FAILED_BEFORE_SEND,
        lease_epoch=1,
        worker="w",
        intent_at=at,
    )
    return AttemptRecord(**{**a.__dict__, "error": "RuntimeError: boom"})


def test_failures_before_a_requeue_do_not_count() -> None:
    """own_failures counts a step's failed attempts begun after ``since`` only (None: all)."""
    attempts = [_failed("submit", 10.0), _failed("submit", 20.0), _failed("other", 30.0), _failed("submit", 40.0)]
    assert own_failures(attempts, "submit") == 3
    assert own_failures(attempts, "submit", since=25.0) == 1
    assert own_failures(attempts, "submit", since=50.0) == 0


@pytest.mark.browser
def test_a_requeued_run_retries_an_effect_that_failed_before_sending(
    bw: Any, shop: Any, run_id: str, tmp_path: Path
) -> None:
    """An effect (idempotent, retries=0) that raised ends the run FAILED; after the fix,
    `browserworker requeue RUN --who ann` journals who requeued it, and `run --run-id` makes a
    new attempt that succeeds: one order on the shop. Before the requeue, `run --run-id` on
    the ended run says it has ended and runs nothing, with the outcome's exit code."""
    marker = tmp_path / "broken"
    marker.write_text("x")
    env = {"FIXABLE_BROKEN": str(marker)}
    flow = str(TEST_FLOWS / "fixable_order.py")
    first = bw.run(
        "run",
        flow,
        "--db",
        str(bw.db),
        "--run-id",
        run_id,
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        env=env,
    )
    assert first.returncode == 1, first.stderr
    again = bw.run("run", flow, "--db", str(bw.db), "--run-id", run_id, "--input", "item=other", env=env)
    assert again.returncode == 1, again.stderr
    assert f"run {run_id} has already ended FAILED; nothing run" in again.stderr
    assert len(bw.show(run_id)["journal"]) == 2  # login and the failed submit: nothing new

    marker.unlink()  # the fix
    requeued = bw.run("requeue", run_id, "--who", "ann", "--db", str(bw.db))
    assert requeued.returncode == 0, requeued.stderr
    assert f"run {run_id} requeued" in requeued.stdout
    done = bw.run("run", flow, "--db", str(bw.db), "--run-id", run_id, env=env)
    assert done.returncode == 0, done.stderr
    view = bw.show(run_id)
    submits = [a for a in view["journal"] if a["step_id"] == "submit"]
    assert [a["state"] for a in submits] == ["FAILED_BEFORE_SEND", "SUCCEEDED"]
    assert len(shop.orders(reference=f"{run_id}/submit")) == 1
    assert any(e.get("decision") == "requeued" and "ann" in str(e.get("detail")) for e in view["events"])


def test_requeue_and_resolve_refuse_what_they_cannot_do(bw: Any) -> None:
    """`requeue` of a missing run exits 2 naming it; `resolve --who` is accepted and a missing
    run is refused the same way; both have help."""
    assert bw.run("queue", "default", "--db", str(bw.db)).returncode == 0  # a database with no runs
    gone = bw.run("requeue", "nope", "--who", "ann", "--db", str(bw.db))
    assert gone.returncode == 2 and "nope" in gone.stderr
    resolve = bw.run("resolve", "nope", "submit", "--done", "--who", "ann", "--db", str(bw.db))
    assert resolve.returncode == 2 and "nope" in resolve.stderr
    assert "--who" in bw.run("requeue", "--help").stdout
