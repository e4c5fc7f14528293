"""Budgets of limit keys at the store: claims hold a key to its concurrency, rate and pause,
skip to other keys' runs, and (on PostgreSQL) concurrent claimers never both take the last slot."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from browserworker.errors import OverBudget, UsageError
from browserworker.runtime._recovery_rules import (
    THROTTLED,
    classify_attempt,
    default_judge,
    own_failures,
    throttle_of,
    throttled_attempts,
)
from browserworker.states import AttemptState, RunState
from browserworker.store import NewRun, Owner, SQLStore, limit_rules, open_store
from browserworker.store.records import AttemptRecord, OutboxRecord
from browserworker.store.testing import backdate, backdate_limit

A = Owner("worker-a", "host", 1)
B = Owner("worker-b", "host", 2)


@pytest.fixture
def store(any_store: SQLStore) -> SQLStore:
    return any_store


def add(store: SQLStore, run_id: str, key: str | None = None, **kw: object) -> None:
    store.enqueue(NewRun(id=run_id, flow_name="f", inputs={}, limit_key=key, **kw))  # type: ignore[arg-type]


def claimed_ids(store: SQLStore, n: int, owner: Owner = A) -> list[str | None]:
    runs = [store.claim_next(owner, ["default"], ttl=30) for _ in range(n)]
    return [r.id if r else None for r in runs]


def test_concurrency_holds_a_key_and_lets_other_keys_pass(store: SQLStore) -> None:
    """A key at its concurrency is not claimed; the claim takes the next run of another key
    (queued behind it) instead, and the key's run goes once a slot frees."""
    store.set_limit("shop", concurrency=1)
    add(store, "s1", "shop")
    add(store, "s2", "shop")
    add(store, "o1", "other")
    assert claimed_ids(store, 3) == ["s1", "o1", None]
    run = store.get_run("s1")
    store.set_run_state("s1", run.lease_epoch, RunState.RUNNING)
    assert claimed_ids(store, 1) == [None]
    store.set_run_state("s1", run.lease_epoch, RunState.SUCCEEDED)
    assert claimed_ids(store, 2) == ["s2", None]
    [budget] = store.limits()
    assert (budget.key, budget.concurrency, budget.live, budget.claims_last_minute) == ("shop", 1, 1, 2)


def test_a_pause_holds_the_key_until_it_ends(store: SQLStore) -> None:
    """A paused key's runs wait for the pause's end; a shorter later pause does not shorten it;
    the pause is journaled on the run that asked for it."""
    add(store, "s1", "shop")
    add(store, "o1", "other")
    add(store, "asker", "shop")
    until = store.pause_limit("shop", 30, "HTTP 429", run_id="asker", detail={"status": 429})
    assert store.pause_limit("shop", 5, "HTTP 503") == until
    assert claimed_ids(store, 2) == ["o1", None]
    [budget] = store.limits()
    assert budget.paused and budget.pause_reason == "HTTP 429" and budget.concurrency is None
    [event] = [e for e in store.events("asker") if e.kind == "limit_paused"]
    assert event.detail["key"] == "shop" and event.detail["status"] == 429
    assert store.limit_pauses() == {"shop": 1}
    backdate_limit(store, "shop", 31)  # the pause is over
    assert claimed_ids(store, 1) == ["s1"]


def test_rate_tokens_refill_by_the_clock(store: SQLStore) -> None:
    """A rate of 2/min allows a burst of 2, then one claim per 30 s as tokens refill."""
    store.set_limit("api", rate=limit_rules.parse_rate("2/min"))
    for i in range(4):
        add(store, f"a{i}", "api")
    assert claimed_ids(store, 3) == ["a0", "a1", None]
    backdate_limit(store, "api", 31)  # 31 s later by the bucket's clock: one token back
    assert claimed_ids(store, 2) == ["a2", None]
    assert store.limits()[0].tokens == pytest.approx(0.03, abs=0.03)


def test_direct_claim_respects_the_budget_but_a_takeover_does_not(store: SQLStore) -> None:
    """claim_run of a queued run is an admission (OverBudget, nothing written); taking over an
    expired lease of a run of a full key is not."""
    store.set_limit("shop", concurrency=1)
    add(store, "s1", "shop")
    add(store, "s2", "shop")
    first = store.claim_run("s1", A, 30)
    assert first is not None
    with pytest.raises(OverBudget, match="concurrency"):
        store.claim_run("s2", B, 30)
    assert store.get_run("s2").state == RunState.QUEUED
    backdate(store, "s1", 60)
    assert store.claim_run("s1", B, 30) is not None


def test_set_and_clear_check_their_inputs(store: SQLStore) -> None:
    """Bad keys and non-positive budgets are refused with nothing written; clear removes one key or all."""
    for bad in ({"key": "a b", "concurrency": 1}, {"key": "k", "concurrency": 0}, {"key": "k", "rate": 0.0}):
        with pytest.raises(UsageError):
            store.set_limit(bad.pop("key"), **bad)  # type: ignore[arg-type]
    assert store.limits() == []
    store.set_limit("a", concurrency=2)
    store.set_limit("b", rate=6.0)
    assert [b.key for b in store.limits()] == ["a", "b"]
    assert store.clear_limit("a") == 1 and store.clear_limit("a") == 0
    assert store.clear_limit(None) == 1 and store.limits() == []


def test_parse_rate_and_retry_after() -> None:
    """Rates read as N/s, N/min, N/h; anything else is refused; Retry-After reads seconds or an
    HTTP-date and is capped at an hour."""
    assert limit_rules.parse_rate("30/min") == 30 and limit_rules.parse_rate("2/s") == 120
    assert limit_rules.parse_rate("6/h") == pytest.approx(0.1)
    for bad in ("5", "5/day", "-1/min", "0/min", "x/min", ""):
        with pytest.raises(UsageError):
            limit_rules.parse_rate(bad)
    now = time.time()
    assert limit_rules.retry_after({"Retry-After": "3"}, now) == 3
    assert limit_rules.retry_after({"retry-after": "999999"}, now) == limit_rules.MAX_PAUSE
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now + 120))
    assert limit_rules.retry_after({"retry-after": date}, now) == pytest.approx(120, abs=2)
    assert limit_rules.retry_after({"retry-after": "soon"}, now) is None
    assert limit_rules.retry_after({}, now) is None


def test_postgres_claimers_race_for_the_last_slot(pg_url: str) -> None:
    """On PostgreSQL, 8 threads with their own connections claiming a key of concurrency 1
    never hold two of its runs at once, and every run of an unlimited key still goes."""
    setup = open_store(pg_url)
    setup.set_limit("shop", concurrency=1)
    for i in range(6):
        add(setup, f"s{i}", "shop")
        add(setup, f"o{i}", "other")
    setup.close()
    held: list[tuple[str, float, float]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def claimer(n: int) -> None:
        store = open_store(pg_url)
        owner = Owner(f"w{n}", "host", 100 + n)
        try:
            start.wait()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                run = store.claim_next(owner, ["default"], ttl=30)
                if run is None:
                    if all(r.state == RunState.SUCCEEDED for r in store.list_runs()):
                        return
                    continue
                began = time.monotonic()
                store.set_run_state(run.id, run.lease_epoch, RunState.RUNNING)
                time.sleep(0.02)  # holding the run: the slot is taken meanwhile
                held.append((run.limit_key or "", began, time.monotonic()))
                store.set_run_state(run.id, run.lease_epoch, RunState.SUCCEEDED)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    shop = sorted((b, e) for k, b, e in held if k == "shop")
    assert len(shop) == 6 and len([k for k, _, _ in held if k == "other"]) == 6
    assert all(shop[i][1] <= shop[i + 1][0] for i in range(5)), "two runs of the key were held at once"


def test_postgres_a_claimer_waits_at_the_key_lock(pg_url: str) -> None:
    """A transaction holding the key's row lock (as a claim does between its check and its
    commit) makes a second claimer of that key wait; once the holder commits its claim the
    waiter finds the key full and takes the next key's run instead."""
    store = open_store(pg_url)
    store.set_limit("shop", concurrency=1)
    add(store, "s1", "shop")
    add(store, "s2", "shop")
    add(store, "o1", "other")
    holder = psycopg.connect(pg_url, autocommit=False)
    holder.execute(f"SET search_path TO {store.connector.schema}")
    holder.execute("SELECT * FROM limits WHERE key = 'shop' FOR UPDATE")
    holder.execute("UPDATE runs SET state = 'LEASED', owner = 'x' WHERE id = 's1'")  # the held claim
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(claimed_ids(open_store(pg_url), 1, B)[0]))
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive(), "the second claimer did not wait for the key's lock"
    holder.commit()
    holder.close()
    waiter.join(10)
    assert got == ["o1"], "the waiter took the key's run although its slot was taken"
    assert store.get_run("s2").state == RunState.QUEUED
    store.close()


def test_concurrent_pauses_of_a_new_key_all_land(store_target: str) -> None:
    """Several runs throttled at once pause a key that has no row yet: none fails, one row,
    the longest pause stands."""
    stores = [open_store(store_target) for _ in range(6)]
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def pause(n: int) -> None:
        try:
            start.wait()
            stores[n].pause_limit("burst.example", 10 + n, f"HTTP 429 #{n}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=pause, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        [budget] = stores[0].limits()
        assert budget.paused and budget.paused_until - stores[0].now() > 14
    finally:
        for s in stores:
            s.close()


def _row(status: int | None, headers: dict[str, str] | None = None, channel: str = "held") -> OutboxRecord:
    return OutboxRecord(
        id=1,
        attempt_id=1,
        run_id="r",
        step_id="submit",
        method="POST",
        url="http://s/api/orders",
        released_at=0.0,
        status=status,
        response_url="http://s/api/orders",
        headers=headers,
        response_at=None if status is None else 0.0,
        failure=None,
        failed_at=None,
        channel=channel,
    )


def test_an_attempt_is_throttled_only_when_every_dispatch_was_told_to_come_back() -> None:
    """FAILED by `throttled` needs every dispatch answered 429/503 with a Retry-After; such an
    attempt does not count against the step's retries."""
    told = _row(429, {"retry-after": "3"})
    verdict = classify_attempt(
        raised=RuntimeError("429"), returned=None, dispatched=True, outbox=[told], judge=default_judge
    )
    assert (verdict.state, verdict.decided_by) == (AttemptState.FAILED, THROTTLED)
    assert "Retry-After: 3" in (verdict.reason or "")
    for rows in (
        [_row(429)],
        [_row(500, {"retry-after": "3"})],
        [told, _row(201)],
        [told, _row(None)],
        [told, _row(None, channel="detected")],
    ):
        assert throttle_of(rows) is None, rows
    attempt = AttemptRecord.from_row(
        {
            "id": 1,
            "run_id": "r",
            "step_id": "submit",
            "kind": "effect",
            "attempt_no": 1,
            "request_key": "r/submit",
            "request_fingerprint": "f",
            "state": "FAILED",
            "lease_epoch": 1,
            "worker": "w",
            "intent_at": 0.0,
            "dispatched_at": 0.0,
            "finished_at": 0.0,
            "result_json": None,
            "decided_by": THROTTLED,
            "evidence": None,
            "error": "HTTP 429",
        }
    )
    assert own_failures([attempt], "submit") == 0 and throttled_attempts([attempt], "submit") == 1
