"""The store contract: claims, fencing, the dispatch margin, the outbox and events, group
commit. A test that takes ``store``, ``any_store`` or ``store_target`` runs against each store
implementation (``tests/support/stores.py``); the SQLite dialect's own mechanics are tested in
``tests/store/test_sqlite.py``."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from browserworker.errors import LeaseLost, StoreError
from browserworker.states import AttemptState, RunState
from browserworker.store import NewRun, Owner, SQLStore, open_store, postgres, sqlite
from browserworker.store.records import RunRecord
from browserworker.store.testing import backdate

A = Owner("worker-a", "host", 1)
B = Owner("worker-b", "host", 2)

#: the schema version a store of each dialect is at: its highest numbered migration
SCHEMA_VERSIONS = {"sqlite": sqlite.SCHEMA_VERSION, "postgresql": postgres.SCHEMA_VERSION}


def migrations_applied(store: SQLStore) -> Any:
    """What the migrations of ``store``'s database have left, read on a connection of the test's
    own: SQLite's user_version and its schema cookie (``PRAGMA schema_version``, which every
    CREATE, DROP or ALTER bumps); PostgreSQL's ``schema_migrations`` rows, each with the time it
    was applied."""
    connector: Any = store.connector
    if connector.dialect == "sqlite":
        conn = sqlite3.connect(connector.path)
        try:
            return tuple(conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("user_version", "schema_version"))
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(connector.url) as conn:
        query = f"SELECT version, applied_at FROM {connector.schema}.schema_migrations ORDER BY version"
        return conn.execute(query).fetchall()


@pytest.fixture
def store(any_store: SQLStore) -> SQLStore:
    any_store.create_run(NewRun(id="r1", flow_name="f", inputs={"item": "tea"}))
    return any_store


def test_schema_version_and_integrity(store: SQLStore) -> None:
    """A store opens migrated to its dialect's current schema version (its highest numbered
    migration) and passes its integrity check."""
    assert store.schema_version == SCHEMA_VERSIONS[store.connector.dialect]
    assert store.integrity_check() == "ok"


def test_reopen_does_not_migrate_twice(store_target: str) -> None:
    """Opening an existing database keeps its rows and version and applies no migration: what
    the migrations left (SQLite's version and schema cookie, PostgreSQL's schema_migrations rows
    with their times) is the same after the second open as before it."""
    first = open_store(store_target)
    assert isinstance(first, SQLStore)
    created = first.create_run(NewRun(id="a", flow_name="f", inputs={}))
    version = first.schema_version
    assert version == SCHEMA_VERSIONS[first.connector.dialect]
    applied = migrations_applied(first)
    if first.connector.dialect == "postgresql":  # one row per migration, none twice
        assert [row[0] for row in applied] == list(range(1, version + 1))
    else:
        assert applied[0] == version
    first.close()
    again = open_store(store_target)
    assert isinstance(again, SQLStore)
    try:
        assert migrations_applied(again) == applied
        assert again.get_run("a") == created and again.schema_version == version
    finally:
        again.close()


def test_create_false_does_not_create(tmp_path: Path) -> None:
    """Read-only commands never create a database."""
    with pytest.raises(StoreError, match="no database"):
        open_store(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_claim_is_exclusive_and_bumps_epoch(store: SQLStore) -> None:
    """Only one owner can claim; the epoch grows with every claim."""
    first = store.claim_run("r1", A, ttl=30)
    assert first is not None and first.state == RunState.LEASED and first.lease_epoch == 1
    assert store.claim_run("r1", B, ttl=30) is None


def test_a_claim_that_starts_starts_only_a_run_leased_for_the_first_time(store: SQLStore) -> None:
    """``claim_next(start=True)`` (the worker's claim) leaves a run leased for the first time
    RUNNING in the claim's own write, started then, its journal holding the claim and the start
    as two events; a run handed back to the queue and claimed again stays LEASED (its journal
    is read before it starts), as does a run claimed without ``start``."""
    store.create_run(NewRun(id="r2", flow_name="f", inputs={}))
    first = store.claim_next(A, ["default"], 30.0, start=True)
    assert first is not None and first.id == "r1"
    assert (first.state, first.lease_epoch, first.fresh) == (RunState.RUNNING, 1, True)
    assert first.started_at is not None and first.started_at == first.updated_at
    events = [(e.kind, e.from_state, e.to_state, e.decision, e.lease_epoch) for e in store.events("r1")]
    assert events[-2:] == [
        ("lease_claimed", "QUEUED", "LEASED", "claimed", 1),
        ("run_state", "LEASED", "RUNNING", "started", 1),
    ]
    assert store.get_run("r1") == first

    plain = store.claim_next(B, ["default"], 30.0)
    assert plain is not None and plain.id == "r2" and plain.state == RunState.LEASED and plain.started_at is None

    store.release_run("r1", 1, worker=A.worker)
    again = store.claim_next(B, ["default"], 30.0, start=True)
    assert again is not None and again.id == "r1"
    assert (again.state, again.lease_epoch, again.fresh) == (RunState.LEASED, 3, False)
    assert again.started_at == first.started_at  # its first start stands
    assert [e.kind for e in store.events("r1")][-1] == "lease_claimed"


def test_expired_lease_is_reclaimed_only_after_skew(store: SQLStore) -> None:
    """An expired lease is taken over once it is older than the skew tolerance."""
    store.claim_run("r1", A, ttl=30)
    backdate(store, "r1", 31)  # expired 1 s ago
    assert store.claim_run("r1", B, ttl=30, skew=5) is None
    backdate(store, "r1", 5)
    taken = store.claim_run("r1", B, ttl=30, skew=5)
    assert taken is not None and taken.owner == "worker-b" and taken.lease_epoch == 2
    assert taken.needs_reconcile and taken.owner_stopped_at is not None
    kinds = [(e.kind, e.decision) for e in store.events("r1")]
    assert ("lease_claimed", "lease_expired") in kinds


def test_takeover_of_a_dead_owner_needs_the_current_epoch(store: SQLStore) -> None:
    """A proven-dead owner's run is taken at once, but only at the epoch that was seen."""
    store.claim_run("r1", A, ttl=30)
    assert store.claim_run("r1", B, ttl=30, takeover_epoch=0) is None
    taken = store.claim_run("r1", B, ttl=30, takeover_epoch=1)
    assert taken is not None and taken.lease_epoch == 2
    assert [e.decision for e in store.events("r1") if e.kind == "lease_claimed"] == ["claimed", "owner_dead"]


def test_dead_owner_reclaim_looks_past_the_callers_own_runs(store: SQLStore) -> None:
    """reclaim_dead_owners asks ``is_gone`` about every live lease on the host but the
    calling worker's own (it is alive: it is asking), and requeues those proven gone."""
    store.enqueue(NewRun(id="r2", flow_name="f", inputs={}))
    store.claim_run("r1", A, ttl=30)
    store.claim_run("r2", B, ttl=30)
    asked: list[str] = []

    def gone(run: RunRecord) -> bool:
        asked.append(run.id)
        return True

    assert [r.id for r in store.reclaim_dead_owners("host", gone, max_lease_losses=3, worker=A.worker)] == ["r2"]
    assert asked == ["r2"] and store.get_run("r1").state == RunState.LEASED


def test_stale_epoch_writes_are_rejected(store: SQLStore) -> None:
    """Once another owner holds the run, every write of the old epoch fails and changes nothing."""
    store.claim_run("r1", A, ttl=30)
    attempt = store.begin_attempt("r1", 1, "submit", "effect", "r1/submit", "fp", margin=5)
    store.claim_run("r1", B, ttl=30, takeover_epoch=1)
    with pytest.raises(LeaseLost, match="epoch 2"):
        store.mark_dispatched(attempt, 1, "POST", "http://x/orders", margin=5)
    with pytest.raises(LeaseLost):
        store.begin_attempt("r1", 1, "submit", "effect", "r1/submit", "fp")
    with pytest.raises(LeaseLost):
        store.finish_attempt(attempt, 1, AttemptState.SUCCEEDED, decided_by="return")
    with pytest.raises(LeaseLost):
        store.heartbeat("r1", 1, ttl=30)
    with pytest.raises(LeaseLost):
        store.set_run_state("r1", 1, RunState.SUCCEEDED)
    assert store.get_attempt(attempt.id).dispatched_at is None
    assert store.outbox(attempt.id) == []
    assert store.get_run("r1").state == RunState.LEASED


def test_intent_and_dispatch_need_the_margin(store: SQLStore) -> None:
    """With less than the dispatch margin left, no intent and no dispatch is committed."""
    store.claim_run("r1", A, ttl=30)
    attempt = store.begin_attempt("r1", 1, "submit", "effect", "r1/submit", "fp", margin=5)
    backdate(store, "r1", 27)  # 3 s left
    with pytest.raises(LeaseLost, match="margin"):
        store.mark_dispatched(attempt, 1, "POST", "http://x/orders", margin=5)
    with pytest.raises(LeaseLost, match="margin"):
        store.begin_attempt("r1", 1, "other", "effect", "r1/other", "fp", margin=5)
    store.heartbeat("r1", 1, ttl=30)  # renewing restores the margin
    outbox_id = store.mark_dispatched(attempt, 1, "POST", "http://x/orders", margin=5)
    assert [(o.id, o.method, o.url) for o in store.outbox(attempt.id)] == [(outbox_id, "POST", "http://x/orders")]


def test_attempt_numbers_and_outbox(store: SQLStore) -> None:
    """Attempts of a step are numbered; the outbox keeps one row per released request."""
    store.claim_run("r1", A, ttl=30)
    first = store.begin_attempt("r1", 1, "submit", "effect", "r1/submit", "fp", margin=5)
    oid = store.mark_dispatched(first, 1, "POST", "http://x/orders", margin=5)
    store.record_response(oid, 303, "http://x/orders", {"location": "/orders/7"})
    store.record_response(oid, 500, "http://x/orders", {})  # a second write never overwrites
    store.finish_attempt(first, 1, AttemptState.UNKNOWN, decided_by="exception_after_dispatch")
    second = store.begin_attempt("r1", 1, "submit", "effect", "r1/submit", "fp", margin=5)
    assert (first.attempt_no, second.attempt_no) == (1, 2)
    assert store.latest_attempt("r1", "submit").id == second.id
    [row] = store.outbox(first.id)
    assert (row.status, row.headers, row.answered) == (303, {"location": "/orders/7"}, True)
    assert store.get_attempt(first.id).dispatched_at is not None


def test_finish_attempt_checks_the_state_it_moves_from(store: SQLStore) -> None:
    """Two deciders cannot both move the same attempt."""
    store.claim_run("r1", A, ttl=30)
    attempt = store.begin_attempt("r1", 1, "submit", "effect", "r1/submit", "fp")
    store.finish_attempt(attempt, 1, AttemptState.SUCCEEDED, decided_by="return")
    with pytest.raises(LeaseLost, match="already SUCCEEDED"):
        store.finish_attempt(attempt, 1, AttemptState.FAILED, decided_by="return")


def test_every_transition_is_an_event(store: SQLStore) -> None:
    """Run creation, claims, intents, dispatches, outcomes and run states are journaled as events."""
    store.claim_run("r1", A, ttl=30)
    store.set_run_state("r1", 1, RunState.RUNNING, worker="worker-a")
    attempt = store.begin_attempt("r1", 1, "submit", "effect", "r1/submit", "fp", worker="worker-a")
    store.mark_dispatched(attempt, 1, "POST", "http://x", margin=0)
    store.finish_attempt(attempt, 1, AttemptState.SUCCEEDED, decided_by="return", worker="worker-a")
    store.set_run_state("r1", 1, RunState.SUCCEEDED, worker="worker-a")
    events = store.events("r1")
    assert [e.kind for e in events] == [
        "run_created",
        "lease_claimed",
        "run_state",
        "intent",
        "dispatched",
        "attempt_state",
        "run_state",
    ]
    assert events[-1].to_state == "SUCCEEDED" and events[-1].lease_epoch == 1
    assert [(e.from_state, e.to_state) for e in events if e.kind == "run_state"] == [
        ("LEASED", "RUNNING"),
        ("RUNNING", "SUCCEEDED"),
    ]
    run = store.get_run("r1")
    assert run.owner is None and run.finished_at is not None


def test_a_run_state_the_machine_forbids_is_refused_and_writes_nothing(store: SQLStore) -> None:
    """The transition is checked in the same fenced statements that write it: an illegal move
    (LEASED -> SUCCEEDED skips RUNNING; nothing leaves SUCCEEDED) raises ValueError, and
    neither the run nor its events change."""
    store.claim_run("r1", A, ttl=30)
    before = len(store.events("r1"))
    with pytest.raises(ValueError, match="illegal run transition LEASED -> SUCCEEDED"):
        store.set_run_state("r1", 1, RunState.SUCCEEDED)
    assert store.get_run("r1").state == RunState.LEASED and len(store.events("r1")) == before
    store.set_run_state("r1", 1, RunState.RUNNING)
    store.set_run_state("r1", 1, RunState.SUCCEEDED)
    with pytest.raises(ValueError, match="illegal run transition SUCCEEDED -> QUEUED"):
        store.set_run_state("r1", 1, RunState.QUEUED)
    assert store.get_run("r1").state == RunState.SUCCEEDED and len(store.events("r1")) == before + 2


def test_secret_inputs_are_masked_in_views(any_store: SQLStore) -> None:
    """Secret input fields are kept for execution but masked in every view."""
    s = any_store
    run = s.create_run(
        NewRun(id="s", flow_name="f", inputs={"user": "u", "password": "hunter2"}, secret_fields=("password",))
    )
    assert run.inputs["password"] == "hunter2"
    assert run.to_dict()["inputs"] == {"user": "u", "password": "[redacted]"}


def test_group_commit_batches_concurrent_calls_and_isolates_failures(store_target: str) -> None:
    """Concurrent calls share commits; a failing call (a stale epoch) rolls back only itself."""
    import asyncio

    from browserworker.store.aio import AsyncStore

    s = open_store(store_target)
    for i in range(50):
        s.create_run(NewRun(id=f"r{i}", flow_name="f", inputs={}))
    astore = AsyncStore(s)

    async def main() -> list[object]:
        claims = [astore.call(s.claim_run, f"r{i}", A, 30) for i in range(50)]
        stale = astore.call(s.heartbeat, "r0", 99, 30)
        return await asyncio.gather(*claims, stale, return_exceptions=True)

    outcome = asyncio.run(main())
    astore.close()
    assert all(r.lease_epoch == 1 for r in outcome[:50])
    assert isinstance(outcome[50], LeaseLost)
    assert astore.calls == 51 and astore.commits < 51
    reopened = open_store(store_target)
    assert all(r.state == RunState.LEASED for r in reopened.list_runs(limit=100))
    assert reopened.integrity_check() == "ok"


def test_async_store_skips_cancelled_calls_and_wakes_the_loop_once_per_batch(any_store: SQLStore) -> None:
    """A call cancelled while it waited never runs; the results of one batch arrive together."""
    import asyncio
    import threading

    from browserworker.store.aio import AsyncStore

    s = any_store
    astore = AsyncStore(s)
    entered, hold = threading.Event(), threading.Event()

    def holding(timeout: float) -> bool:
        entered.set()
        return hold.wait(timeout)

    async def main() -> tuple[list[object], int]:
        loop = asyncio.get_running_loop()
        blocker = asyncio.ensure_future(astore.call(holding, 30))
        assert await asyncio.to_thread(entered.wait, 30)  # the store thread is held: later calls queue up
        cancelled = asyncio.ensure_future(astore.call(s.create_run, NewRun(id="never", flow_name="f", inputs={})))
        others = [
            asyncio.ensure_future(astore.call(s.create_run, NewRun(id=f"r{i}", flow_name="f", inputs={})))
            for i in range(10)
        ]
        await asyncio.sleep(0)
        cancelled.cancel()
        wakeups = 0
        original = loop.call_soon_threadsafe

        def counting(*args: object, **kwargs: object) -> object:
            nonlocal wakeups
            wakeups += 1
            return original(*args, **kwargs)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        hold.set()
        assert await blocker is True
        results = await asyncio.gather(*others)
        return results, wakeups

    results, wakeups = asyncio.run(main())
    astore.close()
    assert [r.id for r in results] == [f"r{i}" for i in range(10)]  # type: ignore[attr-defined]
    assert s.get_run("never") is None
    assert wakeups == 2  # the blocker's batch, then one for the ten calls' batch
    assert astore.commits == 2


def test_records_read_from_rows_are_the_dataclasses_their_fields_make(store: SQLStore) -> None:
    """A record read from a row (built without calling ``__init__``) compares, hashes and
    replaces like one built by hand; a row without a defaulted column gets the default, a
    row with a column the record does not know is refused, and a record class with a
    ``__post_init__`` is built through it."""
    import dataclasses

    from browserworker.store.records import AttemptRecord, RunRecord

    run = store.claim_run("r1", A, ttl=30)
    by_hand = RunRecord(**{f.name: getattr(run, f.name) for f in dataclasses.fields(RunRecord)})
    assert run == by_hand and repr(run) == repr(by_hand)
    assert dataclasses.replace(run, priority=3).priority == 3 and run.priority == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.state = RunState.QUEUED  # type: ignore[misc]
    attempt = store.begin_attempt("r1", 1, "submit", "effect", "r1/submit", "fp")
    again = AttemptRecord(**dataclasses.asdict(attempt))
    assert attempt == again and hash(attempt) == hash(again) and attempt.state is AttemptState.INTENT

    row = dict(store.connector.read_one("get_run", {"id": "r1"}))  # type: ignore[arg-type]
    del row["lease_losses"]
    assert RunRecord.from_row(row).lease_losses == 0
    with pytest.raises(TypeError, match="surprise"):
        RunRecord.from_row({**row, "surprise": 1})

    @dataclasses.dataclass(frozen=True)
    class Checked(RunRecord):
        def __post_init__(self) -> None:
            raise ValueError("checked")

    with pytest.raises(ValueError, match="checked"):  # a __post_init__ is never skipped
        Checked.from_row({**row, "lease_losses": 0})


def test_each_write_returns_its_row_as_committed(any_store: SQLStore) -> None:
    """The writes that hand back a record (claim, run transitions, intent, outcome) return the
    row they changed as it is after the write, in a group too: the run claimed from two
    queues is the highest-priority one, and a second run's rows never leak into the first's."""
    store = any_store
    store.create_run(NewRun(id="low", flow_name="f", inputs={}, queue="q1"))
    store.create_run(NewRun(id="high", flow_name="f", inputs={}, queue="q2", priority=5))
    with store.group(isolate=False):
        first = store.claim_next(A, ["q1", "q2"], ttl=30)
        second = store.claim_next(B, ["q1"], ttl=30)
        assert store.claim_next(B, ["q1", "q2"], ttl=30) is None
        assert first is not None and second is not None
        running = store.set_run_state(first.id, first.lease_epoch, RunState.RUNNING, worker=A.worker)
        attempt = store.begin_attempt(first.id, first.lease_epoch, "submit", "effect", "high/submit", "fp")
        other = store.begin_attempt(second.id, second.lease_epoch, "submit", "action", "low/submit", "fp2")
        done = store.finish_attempt(
            attempt, first.lease_epoch, AttemptState.SUCCEEDED, decided_by="return", result={"order": 7}
        )
        ended = store.set_run_state(first.id, first.lease_epoch, RunState.SUCCEEDED, worker=A.worker)
    assert (first.id, first.owner, first.state, first.lease_epoch) == ("high", A.worker, RunState.LEASED, 1)
    assert (second.id, second.owner) == ("low", B.worker)
    assert running.state is RunState.RUNNING and running.started_at is not None
    assert ended == store.get_run("high") and ended.state is RunState.SUCCEEDED and ended.owner is None
    assert attempt.state is AttemptState.INTENT and attempt.attempt_no == 1 and attempt.request_key == "high/submit"
    assert other.run_id == "low" and other.state is AttemptState.RUNNING and other.id != attempt.id
    assert done == store.get_attempt(attempt.id) and done.result == {"order": 7}


def test_begin_attempt_returns_the_row_as_stored(store: SQLStore) -> None:
    """The attempt begin_attempt hands back is built from what it inserted, not read back: it
    must equal the stored row in every field, for an effect (INTENT) and an action (RUNNING),
    with the attempt number the insert computed counting up per step."""
    run = store.claim_run("r1", A, ttl=30)
    assert run is not None
    first = store.begin_attempt("r1", run.lease_epoch, "pay", "effect", "r1/pay", "fp", worker=A.worker, margin=1.0)
    store.finish_attempt(first, run.lease_epoch, AttemptState.FAILED_BEFORE_SEND, decided_by="gate")
    second = store.begin_attempt("r1", run.lease_epoch, "pay", "effect", "r1/pay", "fp", worker=A.worker)
    action = store.begin_attempt("r1", run.lease_epoch, "open", "action", "r1/open", "fp-open")
    assert (first.attempt_no, second.attempt_no, action.attempt_no) == (1, 2, 1)
    assert first.state is AttemptState.INTENT and action.state is AttemptState.RUNNING
    for attempt in (second, action):
        assert attempt == store.get_attempt(attempt.id)
    assert store.get_attempt(first.id).state is AttemptState.FAILED_BEFORE_SEND


def test_advance_run_is_set_run_state_without_the_read_back(store: SQLStore) -> None:
    """advance_run makes the same fenced transition and event as set_run_state and returns
    nothing: a stale epoch is a lost lease, an illegal transition a ValueError, and neither
    writes anything."""
    run = store.claim_run("r1", A, ttl=30)
    assert run is not None
    with pytest.raises(LeaseLost):
        store.advance_run("r1", run.lease_epoch + 1, RunState.RUNNING, worker=A.worker)
    with pytest.raises(ValueError):
        store.advance_run("r1", run.lease_epoch, RunState.SUCCEEDED, worker=A.worker)  # LEASED -> SUCCEEDED
    assert store.get_run("r1").state is RunState.LEASED  # type: ignore[union-attr]
    assert store.advance_run("r1", run.lease_epoch, RunState.RUNNING, worker=A.worker, decision="started") is None
    now = store.get_run("r1")
    assert now is not None and now.state is RunState.RUNNING and now.started_at is not None
    last = store.events("r1")[-1]
    assert (last.kind, last.from_state, last.to_state, last.decision, last.worker) == (
        "run_state",
        "LEASED",
        "RUNNING",
        "started",
        A.worker,
    )


def test_effect_boundary_reads_the_cancel_flag_and_the_latest_attempt(store: SQLStore) -> None:
    """effect_boundary answers in one read what cancel_requested and latest_attempt answer:
    no attempt yet, the newest of several, a cancel asked meanwhile, and a run that is gone."""
    run = store.claim_run("r1", A, ttl=30)
    assert run is not None
    assert store.effect_boundary("r1", "pay") == (False, None)
    first = store.begin_attempt("r1", run.lease_epoch, "pay", "effect", "r1/pay", "fp")
    store.finish_attempt(first, run.lease_epoch, AttemptState.FAILED_BEFORE_SEND, decided_by="gate")
    store.begin_attempt("r1", run.lease_epoch, "pay", "effect", "r1/pay", "fp")
    store.begin_attempt("r1", run.lease_epoch, "other", "action", "r1/other", "fp")
    cancelled, latest = store.effect_boundary("r1", "pay")
    assert not cancelled and latest == store.latest_attempt("r1", "pay") and latest is not None
    assert latest.attempt_no == 2
    store.cancel("r1")
    assert store.effect_boundary("r1", "pay") == (True, latest) == (store.cancel_requested("r1"), latest)
    assert store.effect_boundary("gone", "pay") == (False, None)


def test_finish_attempt_returns_the_row_as_stored(store: SQLStore) -> None:
    """finish_attempt builds its answer from the attempt given and what it wrote, not from a
    full read: it must still equal the stored row, with the dispatch time the gate wrote
    after the caller's copy was taken, and result and evidence as they read back from JSON
    (a tuple as a list, a date as its string, integer keys as strings)."""
    import datetime

    run = store.claim_run("r1", A, ttl=30)
    assert run is not None
    attempt = store.begin_attempt("r1", run.lease_epoch, "pay", "effect", "r1/pay", "fp", worker=A.worker)
    store.mark_dispatched(attempt, run.lease_epoch, "POST", "http://127.0.0.1/pay")
    assert attempt.dispatched_at is None  # the caller's copy is stale
    done = store.finish_attempt(
        attempt,
        run.lease_epoch,
        AttemptState.SUCCEEDED,
        decided_by="confirm",
        result={"ids": (1, 2), "on": datetime.date(2026, 1, 2), "by_no": {3: "x"}},
        evidence={"status": 303},
        worker=A.worker,
    )
    assert done == store.get_attempt(attempt.id)
    assert done.dispatched_at is not None and done.result == {"ids": [1, 2], "on": "2026-01-02", "by_no": {"3": "x"}}
    action = store.begin_attempt("r1", run.lease_epoch, "open", "action", "r1/open", "fp-open")
    failed = store.finish_attempt(action, run.lease_epoch, AttemptState.FAILED, decided_by="raise", error="boom")
    assert failed == store.get_attempt(action.id) and failed.dispatched_at is None and failed.result is None


def test_history_is_attempts_and_restored_at_in_one_read(store: SQLStore) -> None:
    """history answers what attempts and restored_at answer, with no attempts yet, with
    several, and after a restore event (the latest one counts)."""
    run = store.claim_run("r1", A, ttl=30)
    assert run is not None
    assert store.history("r1") == ([], None, None) == (store.attempts("r1"), store.restored_at("r1"), None)
    store.record_event("r1", "restored", detail={"from": "a backup"})
    store.record_event("r1", "restored", detail={"from": "a later backup"})
    later = store.restored_at("r1")
    assert later == [e.at for e in store.events("r1") if e.kind == "restored"][-1]  # the latest one counts
    assert store.history("r1") == ([], later, None)
    store.begin_attempt("r1", run.lease_epoch, "open", "action", "r1/open", "fp")
    store.begin_attempt("r1", run.lease_epoch, "pay", "effect", "r1/pay", "fp")
    attempts, restored, requeued = store.history("r1")
    assert attempts == store.attempts("r1") and [a.step_id for a in attempts] == ["open", "pay"]
    assert restored == later and requeued is None
    assert store.history("gone") == ([], None, None)
    store.finish_attempt(attempts[1], run.lease_epoch, AttemptState.FAILED, decided_by="raise", error="boom")
    store.set_run_state("r1", run.lease_epoch, RunState.RUNNING)
    store.set_run_state("r1", run.lease_epoch, RunState.FAILED, error="boom")
    store.requeue("r1", who="ann")
    requeued_at = store.history("r1")[2]
    assert requeued_at is not None and requeued_at >= attempts[1].intent_at  # a fresh failure budget from here


@pytest.mark.sqlite_dialect  # restores a backup file
def test_a_run_is_fresh_only_at_its_first_lease(tmp_path: Path) -> None:
    """The executor skips the history read of a *fresh* run (its first lease, nothing to
    reconcile). A run leased again after a release or a lost lease, or restored from a
    backup while still queued (never leased), is not fresh: it may have a journal or a
    restore to reconcile."""
    from browserworker.ops import backup, restore

    db = tmp_path / "bw.db"
    store = open_store(db)
    for name in ("first", "released", "expired", "restored"):
        store.enqueue(NewRun(id=name, flow_name="f", inputs={}))
    backup(db, tmp_path / "bw.backup")  # every run still queued, never leased
    first = store.claim_run("first", A, ttl=30)
    assert first is not None and first.fresh and store.history("first") == ([], None, None)
    store.begin_attempt("first", first.lease_epoch, "open", "action", "first/open", "fp")

    released = store.claim_run("released", A, ttl=30)
    assert released is not None and released.fresh
    store.begin_attempt("released", released.lease_epoch, "open", "action", "released/open", "fp")
    store.release_run("released", released.lease_epoch)
    again = store.claim_run("released", B, ttl=30)
    assert again is not None and not again.fresh
    assert [(a.step_id, a.lease_epoch) for a in store.history("released")[0]] == [("open", released.lease_epoch)]

    expired = store.claim_run("expired", A, ttl=30)
    assert expired is not None and expired.fresh
    backdate(store, "expired", 60)
    assert [r.id for r in store.reclaim_expired(skew=0.5, max_lease_losses=3)] == ["expired"]
    again = store.claim_run("expired", B, ttl=30)
    assert again is not None and not again.fresh
    store.close()

    restore(tmp_path / "bw.backup", tmp_path / "restored.db")
    store = open_store(tmp_path / "restored.db")
    try:
        restored = store.claim_run("restored", A, ttl=30)
        assert restored is not None and restored.lease_epoch == 1 and not restored.fresh
        restored_at = [e.at for e in store.events("restored") if e.kind == "restored"]
        assert (
            len(restored_at) == 1 and store.history("restored")[1] == restored_at[0]
        )  # the restore the executor must know of
    finally:
        store.close()
