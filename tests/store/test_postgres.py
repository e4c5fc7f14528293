"""The PostgreSQL dialect's own mechanics, on a real server: fences under concurrent writers,
the database's clock, wake-ups. (The store contract itself runs on both stores: tests/store/test_contract.py,
tests/store/test_fleet.py, tests/ops/test_metrics.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from browserworker.errors import LeaseLost
from browserworker.store import NewRun, Owner, open_store
from browserworker.store.postgres import PostgresStore
from browserworker.store.postgres._conninfo import application_name
from browserworker.store.testing import backdate
from tests.support.hosts import wait_for
from tests.support.paths import ROOT

A = Owner(worker="worker-a", host="host-a", pid=11)
B = Owner(worker="worker-b", host="host-b", pid=11)


@pytest.fixture
def two(pg_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, each with its own pool: two hosts' connections."""
    first, second = open_store(pg_url), open_store(pg_url)
    assert isinstance(first, PostgresStore) and isinstance(second, PostgresStore)
    yield first, second
    first.close()
    second.close()


def waiting_on_a_lock(url: str, count: int = 1, timeout: float = 10.0) -> None:
    """Return once ``count`` sessions of the database wait for a row lock (an observable
    state of the server, polled with a deadline: not a sleep standing in for it)."""
    with psycopg.connect(url, autocommit=True) as conn:

        def waiting() -> bool:
            row = conn.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            return row is not None and row[0] >= count

        wait_for(waiting, timeout, "a session waiting for the lock", interval=0.01)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` on a thread; its result (or exception) lands in the list."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def leased_effect(store: PostgresStore, run_id: str, owner: Owner) -> tuple[Any, Any]:
    store.create_run(NewRun(id=run_id, flow_name="f", inputs={}))
    run = store.claim_run(run_id, owner, ttl=30)
    assert run is not None
    attempt = store.begin_attempt(run_id, run.lease_epoch, "submit", "effect", f"{run_id}/submit", "fp", margin=1)
    return run, attempt


def test_a_claim_that_comes_while_a_dispatch_commits_waits_for_it(
    two: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """Worst moment, one way: A's dispatch commit has run its fenced statement under epoch 1
    but not committed; B's takeover (epoch 2) must wait on the row until A commits, so A's
    dispatch is in the journal *before* B's claim (B then reconciles it), never after."""
    a, b = two
    run, attempt = leased_effect(a, "r1", A)
    with a.group():
        outbox = a.mark_dispatched(attempt, run.lease_epoch, "POST", "http://shop/orders")
        # B believes A gone and takes the run over at A's epoch...
        thread, out = in_thread(lambda: b.claim_run("r1", B, ttl=30, takeover_epoch=run.lease_epoch))
        waiting_on_a_lock(pg_url)  # ...but its claim waits for A's row lock
        assert not out
    thread.join(timeout=10)
    [taken] = out
    assert taken is not None and taken.lease_epoch == run.lease_epoch + 1 and taken.owner == B.worker
    assert [o.id for o in a.outbox(attempt.id)] == [outbox]
    kinds = [e.kind for e in a.events("r1")]
    assert kinds.index("dispatched") < kinds.index("lease_claimed", kinds.index("dispatched"))


def test_a_dispatch_that_comes_while_a_claim_commits_fails(
    two: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    """Worst moment, the other way: B's takeover has bumped the epoch but not committed; A's
    fenced dispatch commit (epoch 1) waits on the row, then sees epoch 2 and writes nothing:
    LeaseLost, no dispatched_at, no outbox row. A write under epoch N never commits after a
    claim to N+1."""
    a, b = two
    run, attempt = leased_effect(a, "r1", A)
    with b.group():
        taken = b.claim_run("r1", B, ttl=30, takeover_epoch=run.lease_epoch)
        assert taken is not None and taken.lease_epoch == run.lease_epoch + 1
        thread, out = in_thread(lambda: a.mark_dispatched(attempt, run.lease_epoch, "POST", "http://shop/orders"))
        waiting_on_a_lock(pg_url)
        assert not out
    thread.join(timeout=10)
    [failure] = out
    assert isinstance(failure, LeaseLost) and "epoch 2" in str(failure)
    assert a.get_attempt(attempt.id).dispatched_at is None and a.outbox(attempt.id) == []


@pytest.mark.parametrize("write", ["intent", "outcome", "heartbeat", "transition"])
def test_every_fenced_write_loses_to_a_claim_it_waited_for(
    two: tuple[PostgresStore, PostgresStore], pg_url: str, write: str
) -> None:
    """The same for the other fenced writes: an intent, an outcome, a heartbeat and a run
    transition under epoch 1 that wait on a takeover's uncommitted epoch 2 all write nothing."""
    from browserworker.states import AttemptState, RunState

    a, b = two
    run, attempt = leased_effect(a, "r1", A)
    calls = {
        "intent": lambda: a.begin_attempt("r1", run.lease_epoch, "next", "effect", "r1/next", "fp"),
        "outcome": lambda: a.finish_attempt(
            attempt, run.lease_epoch, AttemptState.FAILED_BEFORE_SEND, decided_by="test"
        ),
        "heartbeat": lambda: a.heartbeat("r1", run.lease_epoch, ttl=30),
        "transition": lambda: a.set_run_state("r1", run.lease_epoch, RunState.RUNNING),
    }
    with b.group():
        taken = b.claim_run("r1", B, ttl=30, takeover_epoch=run.lease_epoch)  # the owner was proven gone
        assert taken is not None
        thread, out = in_thread(calls[write])
        if write != "heartbeat":  # (a heartbeat's UPDATE of the row itself waits just the same)
            waiting_on_a_lock(pg_url)
    thread.join(timeout=10)
    assert isinstance(out[0], LeaseLost), out
    after = a.get_run("r1")
    assert after is not None and after.owner == B.worker and after.lease_epoch == run.lease_epoch + 1
    assert [x.step_id for x in a.attempts("r1")] == ["submit"] and a.attempts("r1")[0].state == "INTENT"


def test_concurrent_claimers_skip_each_others_rows(two: tuple[PostgresStore, PostgresStore]) -> None:
    """While A's claim transaction holds the oldest queued run, B's claim takes the next one
    at once (SKIP LOCKED): no waiting, and no "empty" answer because another claimer won."""
    a, b = two
    for i in range(2):
        a.create_run(NewRun(id=f"r{i}", flow_name="f", inputs={}))
    with a.group():
        first = a.claim_next(A, ["default"], ttl=30)
        started = time.monotonic()
        second = b.claim_next(B, ["default"], ttl=30)
        waited = time.monotonic() - started
        assert first is not None and first.id == "r0"
        assert second is not None and second.id == "r1"
    assert waited < 2.0  # (B's statement_timeout is 30 s: a wait for A's lock would show)


SKEWED = """
import json, sys, time
shift = float(sys.argv[2])
real_time, real_ns = time.time, time.time_ns
time.time = lambda: real_time() + shift
time.time_ns = lambda: real_ns() + int(shift * 1e9)
from browserworker.store import Owner, open_store
store = open_store(sys.argv[1])
me = Owner(worker="skewed", host="skewed-host", pid=5)
out = {"now_offset": store.now() - real_time()}
out["reclaimed"] = [r.id for r in store.reclaim_expired(skew=0.5, max_lease_losses=5, worker="skewed")]
claimed = store.claim_next(me, ["default"], ttl=30)
out["claimed"] = claimed and claimed.id
out["claimed_expires_in"] = claimed and claimed.lease_expires_at - real_time()
out["took_over"] = store.claim_run("live", me, ttl=30, skew=0.5) is not None
try:
    store.heartbeat("dead", 1, ttl=30)
    out["kept_dead"] = True
except Exception as exc:
    out["kept_dead"] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.mark.parametrize("shift", [-600.0, 600.0])
def test_a_host_whose_clock_is_minutes_off_changes_nothing_of_who_owns_what(
    pg_url: str, tmp_path: Path, shift: float
) -> None:
    """A worker process whose clock is ten minutes ahead (or behind) sees the database's
    time, not its own: it does not take over a live lease, it does reclaim a lease that
    expired by the database's clock, a claim of its gives the run the full TTL by the
    database's clock, and it cannot keep a dead lease alive by heartbeating it."""
    store = open_store(pg_url)
    other = Owner(worker="other", host="other-host", pid=7)
    for run_id in ("live", "dead", "fresh"):
        store.create_run(NewRun(id=run_id, flow_name="f", inputs={}))
    assert store.claim_run("live", other, ttl=30) is not None
    assert store.claim_run("dead", other, ttl=30) is not None
    backdate(store, "dead", 60)
    script = tmp_path / "skewed.py"
    script.write_text(SKEWED)
    done = subprocess.run(
        [sys.executable, str(script), pg_url, str(shift)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert abs(out["now_offset"]) < 1.0  # its store clock is the database's, not its own
    assert out["reclaimed"] == ["dead"] and out["took_over"] is False and out["kept_dead"] == "LeaseLost"
    assert out["claimed"] in ("fresh", "dead") and 28 < out["claimed_expires_in"] <= 30.5
    live = store.get_run("live")
    assert live is not None and live.owner == "other" and live.lease_epoch == 1
    store.close()


def test_a_slow_reading_of_the_databases_clock_does_not_replace_a_tight_one(pg_url: str) -> None:
    """A store keeps the tightest reading of the database's clock it has: a reading whose round
    trip was slow (a loaded host) would put every timestamp it writes off by half of it, so it
    does not replace a tight one, and the store's clock stays within milliseconds of the
    database's."""
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)

    class Slow:  # a connection whose answer comes back 0.4 s after the database read its clock
        def __init__(self, conn: Any) -> None:
            self.conn = conn

        def execute(self, sql: str) -> Any:
            cursor = self.conn.execute(sql)
            time.sleep(0.4)
            return cursor

    connector = store.connector
    try:
        assert connector._clock is not None and connector._clock[2] < 0.05
        with connector.pool.connection() as conn:
            connector._read_clock(Slow(conn))
            connector._read_clock(Slow(conn), tries=2)
            asked = time.monotonic()
            db_now = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8 AS now").fetchone()["now"]
        ours = store.now()
        since = time.monotonic() - asked  # the database read its clock within this, before ours was read
        assert connector._clock[2] < 0.05  # the tight reading held; its uncertainty grew by the drift only
        assert -0.05 < ours - db_now < 0.05 + since
    finally:
        store.close()


def test_a_client_frozen_inside_a_copy_loses_its_run_to_the_reclaimer(pg_url: str) -> None:
    """A session of the store whose client froze between a COPY's start and its end (the server
    waits "active" on it, where neither of its timeouts ends it) holds the row lock of the run
    it wrote. The reclaimer passes that run by until its lease has been expired for longer than
    ``stuck``; then it ends the session, whose transaction rolls back, and the next pass requeues
    the run. A session of the store idle outside a transaction is left alone."""
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    schema = store.connector.schema
    name = application_name(schema)
    try:
        store.create_run(NewRun(id="held", flow_name="f", inputs={}))
        assert store.claim_run("held", A, ttl=30) is not None
        backdate(store, "held", 60)
        with (
            psycopg.connect(pg_url, application_name=name) as frozen,
            psycopg.connect(pg_url, application_name=name, autocommit=True) as idle,
            pytest.raises(psycopg.OperationalError),  # the frozen client's connection was ended
        ):
            frozen.execute(f"SET search_path TO {schema}")
            frozen.execute("UPDATE runs SET lease_epoch = lease_epoch WHERE id = 'held'")  # its row lock
            with frozen.cursor().copy("COPY events (at, run_id, kind) FROM STDIN"):  # and the client stops
                assert store.reclaim_expired(skew=0, max_lease_losses=3, stuck=120) == [], "not stuck for long"
                reclaimed = wait_for(
                    lambda: store.reclaim_expired(skew=0, max_lease_losses=3, stuck=0.5), 10, "the run reclaimed"
                )
                assert [r.id for r in reclaimed] == ["held"]  # type: ignore[attr-defined]
                assert idle.execute("SELECT 1").fetchone() == (1,)
        run = store.get_run("held")
        assert run is not None and run.state == "QUEUED" and run.lease_epoch == 2
    finally:
        store.close()


def test_wakeups_come_at_the_commit_of_a_queued_run_of_ones_queues(pg_url: str) -> None:
    """An idle listener hears an enqueue of its queue within milliseconds of the commit (and a
    release, and a requeue of a lost lease), not one of another queue; a wake-up that comes
    while nobody waits is kept for the next wait."""
    store = open_store(pg_url)
    wakeups = store.wakeups(["mine"])

    async def main() -> list[float]:
        assert await asyncio.to_thread(wakeups.connected.wait, 10)  # type: ignore[attr-defined]
        await asyncio.wait_for(wakeups.next(), 5)  # the first LISTEN wakes once (nothing missed)
        heard = []
        for i in range(20):
            waiting = wakeups.next()
            store.enqueue(NewRun(id=f"other-{i}", flow_name="f", inputs={}, queue="theirs"))
            started = time.monotonic()
            store.enqueue(NewRun(id=f"mine-{i}", flow_name="f", inputs={}, queue="mine"))
            await asyncio.wait_for(waiting, 5)
            heard.append(time.monotonic() - started)
        run = store.claim_next(A, ["mine"], ttl=30)
        assert run is not None
        store.release_run(run.id, run.lease_epoch)  # a release: nobody waits now, so it is kept
        await asyncio.wait_for(wakeups.next(), 5)
        return heard

    try:
        heard = asyncio.run(main())
        assert wakeups.heard == 21  # type: ignore[attr-defined]  (20 enqueues and the release; never "theirs")
        assert sorted(heard)[len(heard) // 2] < 0.1
    finally:
        wakeups.close()
        store.close()


def test_a_listener_whose_connection_is_killed_wakes_its_worker_and_listens_again(pg_url: str) -> None:
    """When the server ends the wake-up connection (a restart, an admin's pg_terminate_backend),
    the listener wakes its worker at once (a notification may have been missed: claim now),
    reconnects with backoff, and hears the next enqueue."""
    store = open_store(pg_url)
    wakeups = store.wakeups(["default"])

    async def main() -> None:
        assert await asyncio.to_thread(wakeups.connected.wait, 10)  # type: ignore[attr-defined]
        await asyncio.wait_for(wakeups.next(), 5)  # the first LISTEN's own wake-up
        waiting = wakeups.next()
        with psycopg.connect(pg_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                "current_database() AND query LIKE 'LISTEN%%'"
            ).fetchall()
        assert killed == [(True,)]
        await asyncio.wait_for(waiting, 10)  # woken by the loss itself
        assert await asyncio.to_thread(listening_again, wakeups)
        await asyncio.wait_for(wakeups.next(), 5)  # (its new LISTEN wakes once more)
        heard = wakeups.heard  # type: ignore[attr-defined]
        waiting = wakeups.next()
        store.enqueue(NewRun(id="after", flow_name="f", inputs={}))
        await asyncio.wait_for(waiting, 5)
        assert wakeups.heard == heard + 1  # type: ignore[attr-defined]

    try:
        asyncio.run(main())
    finally:
        wakeups.close()
        store.close()


def listening_again(wakeups: Any, timeout: float = 10.0) -> bool:
    """Wait (bounded) until the listener listens on a second connection."""
    return bool(wait_for(lambda: wakeups.listens == 2, timeout, "listening again", interval=0.01))


def test_a_bare_groups_event_rows_are_written_at_its_commit_yet_read_inside_it(pg_url: str) -> None:
    """In a bare group (a worker's usual batch) the event rows wait for the commit, one round
    trip for all; a call of the same group that reads events still sees the earlier calls'
    rows, in order, and a group that fails leaves none behind."""
    store = open_store(pg_url)
    try:
        with store.group(isolate=False):
            store.create_run(NewRun(id="r1", flow_name="f", inputs={}))
            run = store.claim_next(A, ["default"], ttl=30)
            assert run is not None
            assert [e.kind for e in store.events("r1")] == ["run_created", "lease_claimed"]
            store.release_run("r1", run.lease_epoch)
        assert [e.kind for e in store.events("r1")] == ["run_created", "lease_claimed", "lease_released"]
        with pytest.raises(LeaseLost):
            with store.group(isolate=False):
                store.create_run(NewRun(id="r2", flow_name="f", inputs={}))
                store.heartbeat("r1", 99, ttl=30)  # fails: spoils the group
        assert store.get_run("r2") is None and store.events("r2") == []
        # the deferred rows go out by COPY: text that COPY's own format escapes reads back as written
        awkward = {"text": "tab\there\nline\\slash \\N \u00e9", "none": None}
        with store.group(isolate=False):
            store.record_event("r1", "note", step_id="s\t1", decision="\\N", detail=awkward)
            store.record_event("r1", "note", worker=None, detail=None)
        notes = [e for e in store.events("r1") if e.kind == "note"]
        assert [(e.step_id, e.decision, e.detail) for e in notes] == [
            ("s\t1", "\\N", awkward),
            (None, None, None),
        ]
    finally:
        store.close()


def _batch_plans(conn: Any, begin: str, calls: int = 8) -> dict[str, str]:
    """The plan of each one-statement batch form (``postgres_batch.sql``) for ``calls`` calls of
    rows that exist, in a transaction begun by ``begin`` (then rolled back)."""
    from browserworker.store.postgres._queries import BATCHES

    conn = conn.cursor(row_factory=psycopg.rows.tuple_row)
    run_ids = [r[0] for r in conn.execute("SELECT id FROM runs ORDER BY id LIMIT %s", (calls,))]
    attempt_ids = [r[0] for r in conn.execute("SELECT id FROM attempts ORDER BY id LIMIT %s", (calls,))]
    outbox_ids = [r[0] for r in conn.execute("SELECT id FROM outbox ORDER BY id LIMIT %s", (calls,))]
    plans = {}
    for name, batch in BATCHES.items():
        keys = {"id": outbox_ids if name == "record_response" else run_ids, "run_id": run_ids}
        values = [
            {p: keys.get(p, attempt_ids if p == "attempt_id" else [None] * calls)[i] for p in batch.params}
            for i in range(calls)
        ]
        conn.execute(begin)
        try:
            rows = conn.execute("EXPLAIN " + batch.sql, {"calls": json.dumps(values)}).fetchall()
        finally:
            conn.execute("ROLLBACK")
        plans[name] = "\n".join(row[0] for row in rows)
    return plans


def _reads_a_table(plan: str) -> bool:
    return (
        "Hash Join" in plan
        or "Merge Join" in plan
        or any(f"Seq Scan on {table} " in plan for table in ("runs", "attempts", "outbox"))
    )


def test_a_bare_groups_batch_statements_probe_each_calls_row(pg_url: str) -> None:
    """A batch statement finds its calls' rows by key, an index probe a call: in a bare group
    (the transaction a worker's batch runs in) none reads or hashes a whole table of 2,000
    runs, attempts and outbox rows for eight calls, as the planner would rather do otherwise;
    the two run outside it too (the boundary read, an intent alone) probe by their form."""
    store = open_store(pg_url)
    try:
        with psycopg.connect(pg_url, autocommit=True) as setup:
            setup.execute(f"SET search_path TO {store.connector.schema}")
            setup.execute(
                "INSERT INTO runs (id, flow_name, inputs_json, queue, priority, state, created_at, updated_at, "
                "lease_epoch, lease_expires_at) SELECT 'r' || i, 'f', '{}', 'default', 0, "
                "CASE WHEN i % 2 = 0 THEN 'QUEUED' ELSE 'RUNNING' END, i, i, 1, 1e12 FROM generate_series(1, 2000) i"
            )
            setup.execute(
                "INSERT INTO attempts (run_id, step_id, kind, attempt_no, request_key, request_fingerprint, state, "
                "lease_epoch, intent_at) SELECT id, 's', 'effect', 1, id, 'fp', 'INTENT', 1, 0 FROM runs"
            )
            setup.execute(
                "INSERT INTO outbox (attempt_id, run_id, step_id, method, url, released_at, channel) "
                "SELECT id, run_id, 's', 'POST', 'u', 0, 'held' FROM attempts"
            )
            setup.execute("ANALYZE")
        with store.group(isolate=False):
            conn = store.connector._local.conn
            conn.execute("ROLLBACK")  # the group's own transaction: each plan below begins the group's way
            from browserworker.store.postgres._store import _BEGIN_BARE

            bare = _batch_plans(conn, _BEGIN_BARE)
            plain = _batch_plans(conn, "BEGIN")
            conn.execute("BEGIN")
    finally:
        store.close()
    assert {name: plan for name, plan in bare.items() if _reads_a_table(plan)} == {}
    assert not _reads_a_table(plain["effect_boundary"]) and not _reads_a_table(plain["insert_attempt"])
    assert any(_reads_a_table(plan) for plan in plain.values())  # what the group's settings are for
