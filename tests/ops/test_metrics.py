"""Queue-health metrics read from the store: values, Prometheus exposition, cheap query plans."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from browserworker.journal import pid_space
from browserworker.ops import MetricsServer, exposition, snapshot
from browserworker.ops._metrics import QueueAges, reconcile_decision
from browserworker.states import AttemptState
from browserworker.store import Owner, SQLiteStore, SQLStore, open_store
from browserworker.store.sqlite._store import QUERIES
from tests.support.opsdata import dispatched, expire, finish, queued, running, shift, succeed
from tests.support.paths import ROOT

LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def store(any_store: SQLStore) -> SQLStore:
    return any_store


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_queue_depth_and_oldest_claimable_age_per_queue(store: SQLStore) -> None:
    """Depth counts every QUEUED run; the oldest age is that of the oldest claimable one, per queue."""
    queued(store, "a1", age=400)
    queued(store, "a2", age=30)
    queued(store, "a3", age=9000, delay=600)  # delayed: queued, but not claimable yet
    queued(store, "b1", queue="bulk", age=5)
    running(store, "a4")
    snap = snapshot(store)
    q = {x.name: x for x in snap.queues}
    assert (q["default"].queued, q["default"].ready) == (3, 2)
    assert 400 <= q["default"].oldest_ready_age < 460
    assert (q["bulk"].queued, q["bulk"].ready) == (1, 1) and q["bulk"].oldest_ready_age < 60
    assert q["default"].states == {"QUEUED": 3, "RUNNING": 1}
    assert snap.states == {"QUEUED": 4, "RUNNING": 1}


def test_unknown_open_and_classified_per_step_with_recent_window(store: SQLStore) -> None:
    """UNKNOWN now counts unresolved attempts; the counter counts every classification, old and new."""
    old = running(store, "r-old")
    a = finish(store, dispatched(store, old), old.lease_epoch, AttemptState.UNKNOWN, "exception_after_dispatch")
    shift(store, "attempts", "finished_at", 3600, id=a.id)
    shift(store, "events", "at", 3600, run_id="r-old", kind="attempt_state")
    new = running(store, "r-new", queue="bulk")
    finish(store, dispatched(store, new), new.lease_epoch, AttemptState.UNKNOWN, "exception_after_dispatch")
    done = running(store, "r-done")
    b = finish(store, dispatched(store, done), done.lease_epoch, AttemptState.UNKNOWN, "exception_after_dispatch")
    finish(store, b, done.lease_epoch, AttemptState.SUCCEEDED, "verifier")
    snap = snapshot(store, window=600)
    [step] = snap.unknown
    assert (step.flow, step.step, step.open, step.classified_total, step.classified_recent) == ("f", "submit", 2, 3, 2)
    q = {x.name: x for x in snap.queues}
    assert (q["default"].unknown, q["default"].unknown_recent) == (1, 0)
    assert (q["bulk"].unknown, q["bulk"].unknown_recent) == (1, 1)


def test_duplicates_prevented_counts_only_recoveries_that_proved_done(store: SQLStore) -> None:
    """An UNKNOWN effect proved done (verifier, outbox, a person) counts; a normal success does not."""
    for rid, by in (("v1", "verifier"), ("v2", "verifier"), ("o1", "outbox")):
        run = running(store, rid)
        a = finish(store, dispatched(store, run), run.lease_epoch, AttemptState.UNKNOWN, "recovery:dispatched")
        finish(store, a, run.lease_epoch, AttemptState.SUCCEEDED, by)
    plain = running(store, "plain")
    finish(store, dispatched(store, plain), plain.lease_epoch, AttemptState.SUCCEEDED, "return")
    replayed = running(store, "nd")
    a = finish(store, dispatched(store, replayed), replayed.lease_epoch, AttemptState.UNKNOWN, "recovery:dispatched")
    finish(store, a, replayed.lease_epoch, AttemptState.NOT_DONE, "verifier")
    assert snapshot(store).duplicates_prevented == {("f", "submit", "verifier"): 2, ("f", "submit", "outbox"): 1}


def test_lease_expiries_and_reconciliation_latency_by_decision(store: SQLStore) -> None:
    """Each expiry is counted; the time from its detection to the recovery decision lands in the
    histogram bucket of that decision."""
    b = Owner("worker-b", "some-other-host", 7)
    for rid, ago, outcome in (("x1", 7.0, "verifier-done"), ("x2", 40.0, "no-dispatch"), ("x3", 3.0, "nothing")):
        run = running(store, rid)
        if outcome != "nothing":
            attempt = store.begin_attempt(rid, run.lease_epoch, "submit", "effect", f"{rid}/submit", "fp")
            if outcome == "verifier-done":
                store.mark_dispatched(attempt, run.lease_epoch, "POST", "http://127.0.0.1:1/x")
        expire(store, rid, detected_ago=ago)
        again = store.claim_next(b, ["default"], 30)
        assert again is not None and again.id == rid
        latest = store.latest_attempt(rid, "submit")
        if outcome == "verifier-done":
            u = finish(store, latest, again.lease_epoch, AttemptState.UNKNOWN, "recovery:dispatched")
            finish(store, u, again.lease_epoch, AttemptState.SUCCEEDED, "verifier")
        elif outcome == "no-dispatch":
            finish(store, latest, again.lease_epoch, AttemptState.FAILED_BEFORE_SEND, "recovery:no_dispatch")
        else:  # the lost lease left nothing in doubt: a fresh attempt
            fresh = store.begin_attempt(rid, again.lease_epoch, "submit", "effect", f"{rid}/submit", "fp")
            finish(store, fresh, again.lease_epoch, AttemptState.SUCCEEDED, "return")
    snap = snapshot(store)
    assert (snap.lease_expiries_total, snap.lease_expiries_recent) == (3, 3)
    assert set(snap.reconcile_latency) == {"done", "not_sent"}
    done = dict(snap.reconcile_latency["done"].buckets)
    assert snap.reconcile_latency["done"].count == 1 and done[5.0] == 0 and done[10.0] == 1
    not_sent = dict(snap.reconcile_latency["not_sent"].buckets)
    assert not_sent[30.0] == 0 and not_sent[60.0] == 1
    assert 46 < snap.reconcile_latency["done"].sum + snap.reconcile_latency["not_sent"].sum < 50


@pytest.mark.parametrize(
    ("kind", "from_state", "to_state", "decision", "label"),
    [
        ("attempt_state", "UNKNOWN", "SUCCEEDED", "outbox", "done"),
        ("attempt_state", "UNKNOWN", "NOT_DONE", "verifier", "not_done"),
        ("attempt_state", "UNKNOWN", "FAILED", "outbox", "failed"),
        ("attempt_state", "UNKNOWN", "SUCCEEDED", "human:alice", "human"),
        ("decision", None, None, "needs_review", "needs_review"),
        ("decision", None, None, "idempotent_replay", "idempotent_replay"),
        ("attempt_state", "INTENT", "SUCCEEDED", "return", None),
        ("lease_expired", "RUNNING", "QUEUED", "requeued", None),
    ],
)
def test_reconcile_decision_names(
    kind: str, from_state: str | None, to_state: str | None, decision: str, label: str | None
) -> None:
    """The event that settled a lost lease is named by what it decided (None: nothing was in doubt)."""
    assert reconcile_decision(kind, from_state, to_state, decision) == label


def test_workers_by_status_from_the_registry(store: SQLStore) -> None:
    """Heartbeating workers are healthy, silent ones stale, stopped ones stopped, one whose process is
    gone from this host dead; an hour of silence drops a worker from the picture."""
    for name in ("fresh", "silent", "long-gone", "done"):
        store.register_worker(Owner(name, "h", 1), ["default"], 2)
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    # registered from this pid space (its start time unknown now: any process at that pid is another)
    store.register_worker(Owner("crashed", socket.gethostname(), exited.pid, f"@{pid_space()}"), ["default"], 2)
    shift(store, "workers", "last_heartbeat", 120, id="silent")
    shift(store, "workers", "last_heartbeat", 7200, id="long-gone")
    store.mark_worker("done", "stopped")
    running(store, "held", owner=Owner("fresh", "h", 1))
    snap = snapshot(store, stale_after=60)
    status = {w.id: w.status for w in snap.workers}
    assert status == {"fresh": "healthy", "silent": "stale", "done": "stopped", "crashed": "dead"}
    assert {w.id: w.leased for w in snap.workers}["fresh"] == 1
    assert snap.worker_counts == {"healthy": 1, "unhealthy": 0, "stale": 1, "dead": 1, "stopped": 1}


def test_queue_age_histograms_at_dispatch_and_completion(store: SQLStore) -> None:
    """Waiting time until a run started, and until it SUCCEEDED, fall into the right buckets."""
    run = running(store, "h1", age=100)  # waited ~100s before it started, and finished at once
    succeed(store, run)
    running(store, "h2", age=2)
    snap = snapshot(store)
    dispatch = snap.queue_age_at_dispatch["default"]
    assert dispatch.count == 2 and dict(dispatch.buckets)[5.0] == 1 and dict(dispatch.buckets)[60.0] == 1
    assert dict(dispatch.buckets)[120.0] == 2
    completion = snap.queue_age_at_completion["default"]
    assert completion.count == 1 and dict(completion.buckets)[60.0] == 0 and dict(completion.buckets)[120.0] == 1


def test_incremental_queue_ages_match_a_full_read(store: SQLStore) -> None:
    """A long-lived QueueAges that folds in new runs reports what a fresh full read reports."""
    ages = QueueAges(slack=300)
    for i in range(3):
        succeed(store, running(store, f"old{i}", age=50))
        shift(store, "runs", "finished_at", 1000, id=f"old{i}")
        shift(store, "runs", "started_at", 1000, id=f"old{i}")
    first = ages.read(store, store.now())
    assert first["completion"]["default"].count == 3
    for i in range(2):
        succeed(store, running(store, f"new{i}", queue="bulk", age=10))
    later = ages.read(store, store.now() + 400)  # the new runs are now behind the watermark too
    assert later == QueueAges().read(store, store.now() + 400)
    assert later["completion"]["bulk"].count == 2 and later["dispatch"]["default"].count == 3


def test_prometheus_exposition_carries_the_snapshot(store: SQLStore) -> None:
    """`metrics` output parses as Prometheus text and carries depth, UNKNOWN, expiries and histograms."""
    queued(store, "q1", age=90)
    run = running(store, "u1")
    finish(store, dispatched(store, run), run.lease_epoch, AttemptState.UNKNOWN, "exception_after_dispatch")
    running(store, "e1")
    expire(store, "e1")
    got = samples(exposition(store))
    assert got[("browserworker_queue_depth", (("queue", "default"),))] == 2
    assert got[("browserworker_runs", (("queue", "default"), ("state", "RUNNING")))] == 1
    assert 90 <= got[("browserworker_queue_oldest_age_seconds", (("queue", "default"),))] < 150
    assert got[("browserworker_unknown_attempts", (("queue", "default"),))] == 1
    assert got[("browserworker_unknown_classified_total", (("flow", "f"), ("step", "submit")))] == 1
    assert got[("browserworker_lease_expiries_total", ())] == 1
    assert got[("browserworker_queue_age_at_dispatch_seconds_count", (("queue", "default"),))] == 2


def test_metrics_survive_a_restart(store_target: str) -> None:
    """Counters come from the journal: a new process (a new store) reports the same totals."""
    first = open_store(store_target)
    running(first, "s1")
    expire(first, "s1")
    before = samples(exposition(first))
    first.close()
    again = open_store(store_target)
    try:
        after = samples(exposition(again))
    finally:
        again.close()
    assert after[("browserworker_lease_expiries_total", ())] == before[("browserworker_lease_expiries_total", ())] == 1


def test_metrics_server_serves_on_loopback_and_stops(tmp_path: Path) -> None:
    """MetricsServer serves /metrics on 127.0.0.1 from its own connection, and the port closes with it."""
    db = tmp_path / "bw.db"
    store = open_store(db)
    queued(store, "m1")
    store.close()
    server = MetricsServer(db, 0)
    try:
        assert server.host == "127.0.0.1"
        with LOCAL.open(server.url, timeout=10) as resp:
            body = resp.read()
        assert samples(body)[("browserworker_queue_depth", (("queue", "default"),))] == 1
    finally:
        server.close()
    with pytest.raises(urllib.error.URLError):
        LOCAL.open(server.url, timeout=2)


@pytest.mark.sqlite_dialect
def test_ops_queries_never_scan_a_table(tmp_path: Path) -> None:
    """Every read-only ops query is an index search or a covering-index scan (cheap at 100k runs)."""
    params = {"now": 1.0, "since": 1.0, "gone_since": 1.0, "lo": 1.0, "hi": 2.0, "id": "x"}
    checked = 0
    store = SQLiteStore(tmp_path / "plans.db")
    for name, sql in QUERIES.items():
        if not name.startswith("ops_") or not sql.lstrip().upper().startswith("SELECT"):
            continue
        plan = [row[3] for row in store.connector.conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        full_scans = [
            p
            for p in plan
            if re.match(r"SCAN (runs|attempts|events|outbox)\b", p)
            and "COVERING INDEX" not in p
            and "USING INDEX" not in p
        ]
        if name == "ops_last_event":
            assert plan == ["SCAN events"]  # reads one row from the rowid end (ORDER BY id DESC LIMIT 1)
            continue
        assert not full_scans, (name, plan)
        checked += 1
    assert checked >= 12


def test_example_alert_rules_use_only_exported_metrics(store: SQLStore) -> None:
    """Every metric the shipped alert rules query is one `metrics` exports, and every rule has an expr."""
    rules = (ROOT / "ops" / "prometheus-alerts.yml").read_text()
    exported = {f.name for f in text_string_to_metric_families(exposition(store).decode())}
    used = {re.sub(r"_(bucket|count|sum|total)$", "", m) for m in re.findall(r"\bbrowserworker_\w+", rules)}
    assert used and used <= exported, used - exported
    assert rules.count("- alert:") == rules.count("expr:") >= 8


def test_a_workers_own_counters_are_an_extension_served_beside_the_store(tmp_path: Path) -> None:
    """ProcessCounters hears outcomes, dispatches and lost leases through the extension bus (from
    the event loop) and a scrape of the worker's /metrics serves them beside the store's families."""
    import asyncio
    import urllib.request

    from browserworker.flow import Extensions
    from browserworker.ops import MetricsServer, ProcessCounters
    from browserworker.store import open_store

    store = open_store(tmp_path / "bw.db")
    run = running(store, "r1")
    effect = finish(store, dispatched(store, run), run.lease_epoch, AttemptState.SUCCEEDED, "response")
    store.close()
    counters = ProcessCounters()
    bus = Extensions([counters])

    async def a_run() -> None:
        await bus.dispatched(effect, "POST", "http://127.0.0.1/x")
        await bus.outcome(effect)
        bus.later.lease_lost("r2", RuntimeError("taken over"))

    asyncio.run(a_run())
    with MetricsServer(tmp_path / "bw.db", 0, counters=counters) as server:
        body = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(server.url, timeout=10).read()
    got = samples(body)
    assert got[("browserworker_process_attempts_total", (("kind", "effect"), ("state", "SUCCEEDED")))] == 1
    assert got[("browserworker_process_dispatches_total", ())] == 1
    assert got[("browserworker_process_leases_lost_total", ())] == 1
    assert any(name == "browserworker_queue_depth" for name, _ in got)  # the store's families are there too
