"""The chaos tests' journal audit (tests/support/journal_audit.py) finds what it is there to find."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from browserworker.control import enqueue
from browserworker.flow import load_flow
from browserworker.journal import this_owner
from browserworker.states import AttemptState, RunState
from browserworker.store import open_store
from browserworker.store.base import Store
from browserworker.store.records import AttemptRecord, RunRecord
from tests.support.journal_audit import audit
from tests.support.paths import TEST_FLOWS

FLOW = load_flow(TEST_FLOWS / "short_order.py")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "audit.db")
    yield opened
    opened.close()


def started(store: Store) -> tuple[RunRecord, AttemptRecord]:
    """A run claimed, RUNNING, its effect's intent journaled."""
    run = enqueue(store, FLOW, {"base_url": "http://127.0.0.1:9", "item": "tea"}, run_id="audited")
    owner = this_owner("audit")
    claimed = store.claim_next(owner, ["default"], ttl=30)
    assert claimed is not None
    store.advance_run(run.id, claimed.lease_epoch, RunState.RUNNING, worker=owner.worker)
    attempt = store.begin_attempt(
        run.id, claimed.lease_epoch, "submit", "effect", f"{run.id}/submit", "fp", worker=owner.worker
    )
    return claimed, attempt


def test_a_run_that_dispatched_and_succeeded_once_accounts(store: Store) -> None:
    """Claim, intent, dispatch, SUCCEEDED attempt, SUCCEEDED run: no problem."""
    run, attempt = started(store)
    store.mark_dispatched(attempt, run.lease_epoch, "POST", "http://127.0.0.1:9/api/orders")
    store.finish_attempt(
        attempt, run.lease_epoch, AttemptState.SUCCEEDED, decided_by="return", worker=attempt.worker, dispatched=True
    )
    store.set_run_state(run.id, run.lease_epoch, RunState.SUCCEEDED, worker=attempt.worker)
    assert audit(store, run.id, "submit") == []


def test_a_run_that_succeeded_with_its_effect_left_in_intent_does_not(store: Store) -> None:
    """A SUCCEEDED run whose effect is still INTENT, never SUCCEEDED, is reported for both."""
    run, attempt = started(store)
    store.set_run_state(run.id, run.lease_epoch, RunState.SUCCEEDED, worker=attempt.worker)
    problems = audit(store, run.id, "submit")
    assert any("submit#1 ended INTENT" in p for p in problems), problems
    assert any("0 SUCCEEDED attempts" in p for p in problems), problems
