"""A worker that loses PostgreSQL while an effect is about to dispatch (tests/flows/held_order.py).

One worker (in this process, so the test hears its lease and context events) reaches the
database of a cluster of the test's own through a :class:`~tcp_relay.TcpRelay`. Its run's
effect has committed its intent and waits; the test breaks the link (a reset, a partition),
then lets the effect send. The worker must send nothing, close the run's context once its
lease is lost, try to reconnect without a hot loop, and claim again once the link is back;
the run is reconciled and finished by a second worker on a direct link meanwhile, with one
order on the shop. A restart of PostgreSQL while the effect waits costs time only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from browserworker.control import enqueue
from browserworker.errors import StoreError
from browserworker.flow import Extension, load_flow
from browserworker.journal import LeaseSettings
from browserworker.runtime import BrowserSettings, Engine, WorkerSettings
from browserworker.runtime._worker import Worker
from browserworker.states import AttemptState, RunState
from browserworker.store import open_store
from browserworker.store.base import Store
from browserworker.store.records import RunRecord
from tests.support.hosts import PgCluster, TcpRelay, wait_for
from tests.support.paths import TEST_FLOWS

pytestmark = pytest.mark.hosts

TTL = 3.0
OUTAGE = 12.0
"""Seconds A's link stays down: more than the lease, and more than A's call deadline."""
DEADLINE = 4.0
"""A's call deadline (its connector's watchdog), shorter than the outage (the default is 45 s)."""
FLOW = load_flow(TEST_FLOWS / "held_order.py")


@dataclass
class Watch(Extension):
    """What one worker's runs went through, on this process's monotonic clock."""

    lost: dict[str, float] = field(default_factory=dict)
    contexts: list[dict[str, float | None]] = field(default_factory=list)
    finished: dict[str, RunState] = field(default_factory=dict)

    def lease_lost(self, run_id: str, error: BaseException) -> None:  # type: ignore[override]
        self.lost.setdefault(run_id, time.monotonic())

    def context_created(self, context: Any) -> None:  # type: ignore[override]
        times: dict[str, float | None] = {"opened": time.monotonic(), "closed": None}
        context.on("close", lambda _: times.update(closed=time.monotonic()))
        self.contexts.append(times)

    def run_finished(self, run: RunRecord) -> None:  # type: ignore[override]
        self.finished[run.id] = run.state


class PoolLog(logging.Handler):
    """psycopg_pool's failed connection attempts, with when they failed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.failures: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("error connecting"):
            self.failures.append(time.monotonic())


@pytest.fixture
def pool_log() -> Iterator[PoolLog]:
    handler = PoolLog()
    logger = logging.getLogger("psycopg.pool")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@dataclass
class Side:
    """One in-process worker: its store, its watch, its task."""

    store: Store
    watch: Watch
    worker: Worker
    task: asyncio.Task[Any] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.worker.run())

    async def stop(self) -> None:
        self.worker.request_stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, 60)
        await asyncio.to_thread(self.store.close)


def side(url: str) -> Side:
    store, watch = open_store(url), Watch()
    engine = Engine(store, browser=BrowserSettings.discover(), lease=LeaseSettings(ttl=TTL), extensions=[watch])
    return Side(store, watch, engine.worker(WorkerSettings(concurrency=1)))


async def until(predicate: Callable[[], object], timeout: float, what: str) -> Any:
    """Poll ``predicate`` (in a thread: it may read the store) until truthy; its value."""
    deadline = time.monotonic() + timeout
    while not (value := await asyncio.to_thread(predicate)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.05)
    return value


def held_run(store: Store, shop: Any, tmp_path: Path, name: str) -> tuple[RunRecord, Path]:
    go = tmp_path / f"{name}.go"
    return enqueue(
        store,
        FLOW,
        {"base_url": shop.url, "item": name, "go_file": str(go)},
        run_id=f"pgf-{tmp_path.name[-12:].strip('_')}-{name}",
    ), go


def intent_waiting(store: Store, run_id: str) -> bool:
    return any(a.step_id == "submit" and a.state == AttemptState.INTENT for a in store.attempts(run_id))


def state_of(store: Store, run_id: str) -> RunState | None:
    run = store.get_run(run_id)
    return None if run is None else run.state


@dataclass
class Outage:
    """What the cut worker did while its link was down."""

    began: float
    ended: float = 0.0
    refused: int = 0
    context_closed_after: float | None = None


async def cut_while_held(
    relay: TcpRelay, mode: str, a: Side, b_url: str, direct: Store, shop: Any, run: RunRecord, go: Path
) -> Outage:
    """Cut A's link while its effect waits, let the effect send, have B finish the run; restore."""
    await until(lambda: intent_waiting(direct, run.id), 60, "the effect's intent committed")
    refused = relay.refused
    outage = Outage(began=time.monotonic())
    await asyncio.to_thread(relay.cut, mode)
    go.touch()  # the effect sends now: its gate cannot commit the dispatch
    closed = await until(lambda: a.watch.contexts[-1]["closed"], TTL + 15, "A's context closed")
    outage.context_closed_after = closed - outage.began
    b = side(b_url)
    await b.start()
    await until(lambda: state_of(direct, run.id) == RunState.SUCCEEDED, 60, "B finished the run")
    await b.stop()
    # down for longer than A's call deadline: calls hung on the stalled link are cut, and A's
    # reconnects back off
    await asyncio.sleep(max(0.0, outage.began + OUTAGE - time.monotonic()))
    outage.refused = relay.refused - refused
    outage.ended = time.monotonic()
    await asyncio.to_thread(relay.restore)
    return outage


def backoffs(logs: list[dict[str, Any]]) -> list[float]:
    """The pauses the wake-up listener announced between its reconnect attempts."""
    return [e["retry_in"] for e in logs if e["event"].startswith("cannot listen for wake-ups")]


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["reset", "blackhole"])
def test_a_worker_cut_off_from_postgres_sends_nothing_and_claims_again_once_back(
    own_postgres: PgCluster,
    own_database: str,
    pg_relay: TcpRelay,
    shop: Any,
    tmp_path: Path,
    pool_log: PoolLog,
    mode: str,
) -> None:
    """Worker A's link to PostgreSQL is cut (``mode``) for 12 s while its effect is about to
    dispatch: A sends nothing (the only order is B's), closes the run's context within the lease,
    tries to reconnect a few times (a backoff, not a hot loop; a call the stalled link never answers
    is cut at its deadline), and once the link is back claims and finishes a new run. Worker B, on
    a direct link, reclaims the run at its expiry and reconciles it: A's attempt was never
    dispatched (FAILED_BEFORE_SEND), B's SUCCEEDED."""
    direct_url = own_postgres.url(own_database)
    direct = open_store(direct_url)
    first, go = held_run(direct, shop, tmp_path, "first")
    with capture_logs() as logs:
        a = side(own_postgres.url(own_database, port=pg_relay.port))
        a.store.connector.watchdog.seconds = DEADLINE  # type: ignore[attr-defined]

        async def scenario() -> tuple[Outage, float]:
            await a.start()
            try:
                outage = await cut_while_held(pg_relay, mode, a, direct_url, direct, shop, first, go)
                second, go_second = held_run(direct, shop, tmp_path, "second")
                go_second.touch()
                await until(lambda: a.watch.finished.get(second.id), 60, "A finished a new run after the cut")
                return outage, time.monotonic() - outage.ended
            finally:
                await a.stop()

        outage, back_in = asyncio.run(scenario())
    window = outage.ended - outage.began
    attempts = outage.refused if mode == "reset" else len(pool_log.failures)
    print(
        f"{mode}: context closed after {outage.context_closed_after:.2f}s, {attempts} connection attempts in "
        f"{window:.1f}s, listener backoffs {backoffs(logs)}, A back {back_in:.2f}s after the restore"
    )
    try:
        assert len(shop.orders(f"{first.id}/submit")) == 1
        submits = [x for x in direct.attempts(first.id) if x.step_id == "submit"]
        assert [(x.state, x.dispatched_at is None) for x in submits] == [
            (AttemptState.FAILED_BEFORE_SEND, True),
            (AttemptState.SUCCEEDED, False),
        ], submits
        assert submits[0].worker == a.worker.id and submits[1].worker != a.worker.id
        events = direct.events(first.id)
        assert [e.worker for e in events if e.kind in ("lease_expired", "dispatched")] == [submits[1].worker] * 2
        assert first.id in a.watch.lost  # by its local clock: no heartbeat got through
        assert outage.context_closed_after is not None and outage.context_closed_after < TTL + 1
        assert 1 <= attempts <= 4 * window, (attempts, window)  # it tries, a few times a second at most
        assert back_in < 6, back_in  # reconnected within seconds
        if mode == "reset":
            assert backoffs(logs) == sorted(backoffs(logs)) and max(backoffs(logs)) >= 1.6, backoffs(logs)
        assert a.worker.stats.claimed == 2
        assert [state for run_id, state in a.watch.finished.items() if run_id != first.id] == [RunState.SUCCEEDED]
    finally:
        direct.close()


@pytest.mark.browser
@pytest.mark.slow
def test_a_postgres_restart_while_an_effect_waits_costs_time_not_a_duplicate(
    own_postgres: PgCluster, own_database: str, shop: Any, tmp_path: Path
) -> None:
    """PostgreSQL crashes and restarts (``immediate``: every connection dies) while a worker's
    effect is about to dispatch, then the effect sends: the run still ends SUCCEEDED with one
    order and one SUCCEEDED attempt of its effect, and the worker, its pool renewed, claims and
    finishes the next run."""
    url = own_postgres.url(own_database)
    direct = open_store(url)
    first, go = held_run(direct, shop, tmp_path, "first")
    a = side(url)

    async def scenario() -> tuple[float, float]:
        await a.start()
        try:
            await until(lambda: intent_waiting(direct, first.id), 60, "the effect's intent committed")
            began = time.monotonic()
            await asyncio.to_thread(own_postgres.restart, "immediate")
            go.touch()
            await until(lambda: a.watch.finished.get(first.id), 60, "the first run finished")
            took = time.monotonic() - began
            second, go_second = held_run(direct, shop, tmp_path, "second")
            go_second.touch()
            await until(lambda: a.watch.finished.get(second.id), 60, "the next run finished")
            return took, time.monotonic() - began - took
        finally:
            await a.stop()

    took, then = asyncio.run(scenario())
    print(f"restart: first run done {took:.2f}s after the crash, the next in {then:.2f}s; {a.worker.stats}")
    try:
        assert set(a.watch.finished.values()) == {RunState.SUCCEEDED}
        assert len(shop.orders(f"{first.id}/submit")) == 1
        assert [x.state for x in direct.attempts(first.id) if x.step_id == "submit"].count(AttemptState.SUCCEEDED) == 1
    finally:
        direct.close()


def test_a_call_a_stalled_link_never_answers_fails_at_its_deadline(
    own_postgres: PgCluster, own_database: str, pg_relay: TcpRelay
) -> None:
    """Through a link that holds the connection open and forwards nothing (the TCP user timeout
    never fires: everything is acknowledged), a call fails with StoreError once its deadline has
    passed instead of blocking the store's thread for as long as the stall lasts; once the link
    is back the next call works, on a new connection."""
    store = open_store(own_postgres.url(own_database, port=pg_relay.port))
    store.connector.watchdog.seconds = 1.5  # type: ignore[attr-defined]
    try:
        assert store.list_runs() == []
        pg_relay.cut("blackhole")
        began = time.monotonic()
        with pytest.raises(StoreError):
            store.list_runs()
        took = time.monotonic() - began
        pg_relay.restore()
        assert 1.5 <= took < 4, took
        assert store.connector.watchdog.severed == 1  # type: ignore[attr-defined]
        assert store.list_runs() == []
    finally:
        store.close()


def test_after_a_database_restart_the_next_call_works(own_postgres: PgCluster, own_database: str) -> None:
    """Every pooled connection dies with a restart of PostgreSQL; the next call after it still
    works: the pool sees its connections closed before it hands one out, and refills."""
    store = open_store(own_postgres.url(own_database))
    try:
        assert store.list_runs() == []
        own_postgres.restart("immediate")
        assert store.list_runs() == []
    finally:
        store.close()


def test_a_store_is_back_within_seconds_of_a_long_outage_ending(
    own_postgres: PgCluster, own_database: str, pg_relay: TcpRelay, pool_log: PoolLog
) -> None:
    """After its link was cut (reset) for 20 s, a store's next call succeeds within a few seconds
    of the link coming back, although its pool backs off between reconnect attempts (they do not
    grow past a few seconds); meanwhile it tried, but not in a hot loop."""
    store = open_store(own_postgres.url(own_database, port=pg_relay.port))
    try:
        assert store.list_runs() == []
        pg_relay.cut()
        began = time.monotonic()
        with pytest.raises(StoreError):
            store.list_runs()
        wait_for(lambda: time.monotonic() - began > 20, 25, "a long outage")
        pg_relay.restore()
        restored = time.monotonic()
        assert store.list_runs() == []
        back = time.monotonic() - restored
        tries = [t - began for t in pool_log.failures]
        print(f"back {back:.2f}s after a 20 s outage; connection attempts at {[round(t, 1) for t in tries]}")
        assert back < 6, back
        assert 3 <= len(tries) <= 40, tries
    finally:
        store.close()
