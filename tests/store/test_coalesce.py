"""A batch's calls of one method run as one call of its many form (``store/coalesce.py``):
what may join what, and that the journal a worker's batch writes is the journal single calls
write, fences included, on every store implementation."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any

import pytest

from browserworker.errors import LeaseLost, StoreError
from browserworker.states import AttemptState, RunState
from browserworker.store import NewRun, Owner, SQLStore, open_store
from browserworker.store.aio import AsyncStore
from browserworker.store.coalesce import coalesced, plan
from browserworker.store.manager import Manager, lease_params
from browserworker.store.testing import backdate

A = Owner("worker-a", "host", 1)
B = Owner("worker-b", "host", 2)


def _coalesced_methods() -> list[tuple[type, str, Any]]:
    found = []
    for cls in Manager.__subclasses__():
        for name, fn in vars(cls).items():
            if hasattr(fn, "coalesce"):
                found.append((cls, name, fn))
    return found


def test_every_coalesced_method_reads_its_calls_with_its_spec() -> None:
    """A coalesced method's item type has the method's parameters, in order, with its defaults,
    so an item built from a call's arguments is that call; its many form is on the same class."""
    methods = _coalesced_methods()
    assert {name for _, name, _ in methods} >= {
        "claim_next",
        "advance_run",
        "set_run_state",
        "heartbeat",
        "begin_attempt",
        "mark_dispatched",
        "record_response",
        "finish_attempt",
        "effect_boundary",
    }
    for cls, name, fn in methods:
        params = list(inspect.signature(fn).parameters.values())[1:]
        spec = fn.coalesce.spec
        assert [p.name for p in params] == list(spec._fields), name
        defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
        assert defaults == spec._field_defaults, name
        assert callable(getattr(cls, fn.coalesce.many)), name


class _Fake:
    """A manager with two coalesced methods, ``a`` and ``b``, and one that is not, ``c``."""

    def __init__(self) -> None:
        self.log: list[tuple[str, list[str]]] = []

    @coalesced(lambda run: run, "a_each", key=lambda run: run)
    def a(self, run: str) -> str:
        return self.a_each([run])[0]

    def a_each(self, runs: list[str]) -> list[str]:
        self.log.append(("a", runs))
        return runs

    @coalesced(lambda run: run, "b_each", key=lambda run: run)
    def b(self, run: str) -> str:
        return self.b_each([run])[0]

    def b_each(self, runs: list[str]) -> list[str]:
        self.log.append(("b", runs))
        return runs

    def c(self, run: str) -> str:
        return run


def _shape(calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[list[int]]:
    return [entry.calls for entry in plan([(fn, args, {}) for fn, args in calls])]


def test_calls_of_one_method_join_past_other_runs_only() -> None:
    """Calls of one method on other runs share an entry; a call never joins past a call of its
    own run, past a call of a method that is not coalesced, nor beside a call of its run."""
    f = _Fake()
    assert _shape([(f.a, ("r1",)), (f.a, ("r2",)), (f.b, ("r3",)), (f.a, ("r4",))]) == [[0, 1, 3], [2]]
    # a(r2) may not pass b(r2): r2's calls keep their order
    assert _shape([(f.a, ("r1",)), (f.b, ("r2",)), (f.a, ("r2",)), (f.a, ("r3",))]) == [[0], [1], [2, 3]]
    # nothing passes a call that is not coalesced
    assert _shape([(f.a, ("r1",)), (f.c, ("r9",)), (f.a, ("r2",))]) == [[0], [1], [2]]
    # two calls of one run never share a many call
    assert _shape([(f.a, ("r1",)), (f.a, ("r1",))]) == [[0], [1]]
    # a call the method cannot take runs alone (and raises there), and nothing passes it
    assert _shape([(f.a, ("r1",)), (f.a, ()), (f.a, ("r2",))]) == [[0], [1], [2]]


def _in_one_batch(store: SQLStore, calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
    """Each call's result (or exception), the calls made while the store's thread is held by
    another, so that they queue up and run as one batch."""
    astore = AsyncStore(store)
    entered, hold = threading.Event(), threading.Event()

    def holding() -> None:
        entered.set()
        hold.wait(30)

    async def main() -> list[Any]:
        asyncio.ensure_future(astore.call(holding))
        assert await asyncio.to_thread(entered.wait, 30)
        queued = [asyncio.ensure_future(astore.call(fn, *args)) for fn, args in calls]
        await asyncio.sleep(0)  # one turn of the loop: each task queues its call in its first step
        hold.set()
        return await asyncio.gather(*queued, return_exceptions=True)

    try:
        return asyncio.run(main())
    finally:
        astore.close()


def _six_leased(s: SQLStore) -> None:
    """Runs r0..r5, each leased by A at epoch 1."""
    for i in range(6):
        s.create_run(NewRun(id=f"r{i}", flow_name="f", inputs={}))
        assert s.claim_next(A, ["default"], 30.0) is not None


def _six_intents(s: SQLStore) -> list[Any]:
    """An intent for each of r0..r5 under epoch 1, in one batch."""
    return _in_one_batch(s, [(s.begin_attempt, (f"r{i}", 1, "pay", "effect", f"r{i}/pay", "fp")) for i in range(6)])


def _spy(store: SQLStore, manager: Manager, many: str) -> list[int]:
    """Record the size of each call of ``manager``'s many form (the instance's attribute)."""
    sizes: list[int] = []
    real = getattr(manager, many)

    def counted(items: list[Any]) -> Any:
        sizes.append(len(items))
        return real(items)

    setattr(manager, many, counted)
    return sizes


async def _one_run(astore: AsyncStore, s: SQLStore) -> bool:
    """The store calls a worker makes for a run of one effect sending one request, in order."""
    run = await astore.call(s.claim_next, A, ["default"], 60.0)
    if run is None:
        return False
    epoch = run.lease_epoch
    await astore.call(s.advance_run, run.id, epoch, RunState.RUNNING, worker=A.worker, decision="started")
    cancelled, latest = await astore.call(s.effect_boundary, run.id, "pay")
    assert not cancelled and latest is None
    attempt = await astore.call(
        s.begin_attempt, run.id, epoch, "pay", "effect", f"{run.id}/pay", "fp", worker=A.worker, margin=5.0
    )
    outbox = await astore.call(s.mark_dispatched, attempt, epoch, "POST", "http://shop/pay", margin=5.0)
    await astore.call(s.record_response, outbox, 200, "http://shop/paid", {"content-type": "text/html"})
    await astore.call(s.heartbeat, run.id, epoch, 60.0)
    done = await astore.call(
        s.finish_attempt, attempt, epoch, AttemptState.SUCCEEDED, decided_by="return", result={"n": 1}
    )
    assert done.dispatched_at is not None and done.result == {"n": 1}
    ended = await astore.call(s.set_run_state, run.id, epoch, RunState.SUCCEEDED, worker=A.worker)
    assert ended.state == RunState.SUCCEEDED
    return True


def _drain(target: str, prefix: str, runs: int, *, max_batch: int) -> dict[str, Any]:
    """Drain ``runs`` new runs with all of them in flight; what each run's journal holds."""
    s = open_store(target)
    assert isinstance(s, SQLStore)
    for i in range(runs):
        s.create_run(NewRun(id=f"{prefix}{i:03d}", flow_name="f", inputs={}))
    sizes = _spy(s, s.journal, "begin_attempts")
    astore = AsyncStore(s, max_batch=max_batch)

    async def lane() -> None:
        while await _one_run(astore, s):
            pass

    async def main() -> None:
        await asyncio.gather(*(lane() for _ in range(runs)))

    asyncio.run(main())
    astore.close()
    journal: dict[str, Any] = {}
    for run in s.list_runs(limit=1000):
        if not run.id.startswith(prefix):
            continue
        events = [(e.kind, e.step_id, e.attempt_no, e.lease_epoch, e.from_state, e.to_state) for e in s.events(run.id)]
        attempts = [(a.step_id, a.attempt_no, a.state, a.dispatched_at is not None) for a in s.attempts(run.id)]
        outbox = [(o.method, o.url, o.status, o.response_url) for a in s.attempts(run.id) for o in s.outbox(a.id)]
        journal[run.id.removeprefix(prefix)] = (run.state, run.lease_epoch, run.owner, events, attempts, outbox)
    s.close()
    return {"journal": journal, "coalesced": max(sizes, default=0)}


def test_a_batch_of_many_runs_journals_what_single_calls_journal(store_target: str) -> None:
    """Forty runs in flight, their calls coalesced, leave each run's journal (states, epochs,
    events in order, attempts, outbox rows) exactly as forty runs made one call at a time."""
    batched = _drain(store_target, "b", 40, max_batch=256)
    singles = _drain(store_target, "s", 40, max_batch=1)
    assert batched["coalesced"] > 1 and singles["coalesced"] == 1
    assert batched["journal"] == singles["journal"]
    assert all(j[0] == RunState.SUCCEEDED for j in batched["journal"].values())


def test_a_lost_lease_in_a_coalesced_batch_fails_only_its_own_call(any_store: SQLStore) -> None:
    """Six intents in one batch, one of them under an epoch another claim has moved on: that
    call raises LeaseLost and journals nothing; the other five are journaled."""
    s = any_store
    _six_leased(s)
    backdate(s, "r3", 120)
    taken = s.claim_run("r3", B, 30.0)
    assert taken is not None and taken.lease_epoch == 2
    sizes = _spy(s, s.journal, "begin_attempts")
    outcome = _six_intents(s)
    assert sizes[0] == 6  # tried as one many call first
    assert isinstance(outcome[3], LeaseLost)
    assert [o.run_id for i, o in enumerate(outcome) if i != 3] == ["r0", "r1", "r2", "r4", "r5"]
    assert s.attempts("r3") == []
    assert all(len(s.attempts(f"r{i}")) == 1 for i in (0, 1, 2, 4, 5))
    assert [e.kind for e in s.events("r0")][-1] == "intent"


def test_a_lost_lease_in_a_batch_of_heartbeats_and_transitions_fails_only_its_own_call(any_store: SQLStore) -> None:
    """Six heartbeats in one batch, then six ends of runs, one run under an epoch another claim
    has moved on (on PostgreSQL each batch is one statement, its fence read from the rows it
    returns): that call raises LeaseLost and changes nothing; the other five take effect."""
    s = any_store
    _six_leased(s)
    backdate(s, "r3", 120)
    taken = s.claim_run("r3", B, 30.0)
    assert taken is not None and taken.lease_epoch == 2
    before = s.get_run("r0")
    assert before is not None and before.lease_expires_at is not None
    beats = _in_one_batch(s, [(s.heartbeat, (f"r{i}", 1, 600.0)) for i in range(6)])
    assert isinstance(beats[3], LeaseLost) and [b for i, b in enumerate(beats) if i != 3] == [None] * 5
    runs = {i: s.get_run(f"r{i}") for i in range(6)}
    assert all(r is not None and r.lease_expires_at is not None for r in runs.values())
    assert all(runs[i].lease_expires_at > before.lease_expires_at + 300 for i in (0, 1, 2, 4, 5))  # type: ignore[union-attr, operator]
    assert runs[3].lease_expires_at < before.lease_expires_at + 300  # type: ignore[union-attr, operator]
    for i in range(6):
        s.advance_run(f"r{i}", 2 if i == 3 else 1, RunState.RUNNING, worker=A.worker)
    ended = _in_one_batch(s, [(s.set_run_state, (f"r{i}", 1, RunState.SUCCEEDED)) for i in range(6)])
    assert isinstance(ended[3], LeaseLost)
    assert [e.id for i, e in enumerate(ended) if i != 3] == ["r0", "r1", "r2", "r4", "r5"]
    assert all(e.state == RunState.SUCCEEDED for i, e in enumerate(ended) if i != 3)
    still = s.get_run("r3")
    assert still is not None and still.state == RunState.RUNNING and still.lease_epoch == 2


def test_claims_of_many_slots_take_each_run_once(store_target: str) -> None:
    """Two workers, each with 60 free slots claiming in one batch, on 100 queued runs: every run
    is leased once, by one of them, and 20 claims find nothing. The second claims as the worker
    does (``start``): its runs are RUNNING, started by the claim's write, the first's LEASED."""
    first = open_store(store_target)
    for i in range(100):
        first.create_run(NewRun(id=f"q{i:03d}", flow_name="f", inputs={}))
    second = open_store(store_target)
    stores = [(first, AsyncStore(first), A), (second, AsyncStore(second), B)]

    async def main() -> list[Any]:
        calls = [
            astore.call(s.claim_next, owner, ["default"], 30.0, start=owner is B)
            for s, astore, owner in stores
            for _ in range(60)
        ]
        return await asyncio.gather(*calls)

    claimed = asyncio.run(main())
    for _, astore, _ in stores:
        astore.close()
    ids = [r.id for r in claimed if r is not None]
    assert sorted(ids) == [f"q{i:03d}" for i in range(100)]
    assert claimed.count(None) == 20
    runs = first.list_runs(limit=200)
    assert {r.owner for r in runs} == {A.worker, B.worker}
    for r in runs:
        started = r.owner == B.worker
        assert r.lease_epoch == 1 and r.state == (RunState.RUNNING if started else RunState.LEASED)
        assert (r.started_at is not None) is started
        kinds = [(e.kind, e.to_state) for e in first.events(r.id)][1:]  # after run_created
        assert kinds == [("lease_claimed", "LEASED"), *([("run_state", "RUNNING")] if started else [])]
    second.close()
    first.close()


def test_claims_in_one_batch_admit_a_budget_one_run_at_a_time(any_store: SQLStore) -> None:
    """Eight claims in one batch, on five runs of a key allowed two at a time and three of no
    budget: the key gets its two, the others all three, and three claims find nothing."""
    s = any_store
    s.set_limit("shop", concurrency=2)
    for i in range(5):
        s.create_run(NewRun(id=f"k{i}", flow_name="f", inputs={}, limit_key="shop", priority=1))
    for i in range(3):
        s.create_run(NewRun(id=f"u{i}", flow_name="f", inputs={}))
    claimed = _in_one_batch(s, [(s.claim_next, (A, ["default"], 30.0))] * 8)
    ids = sorted(r.id for r in claimed if r is not None)
    assert ids == ["k0", "k1", "u0", "u1", "u2"]
    assert claimed.count(None) == 3


def _refuse_attempts_of(store: SQLStore, run_id: str) -> None:
    """A trigger of the test's own that makes the database refuse any attempt of ``run_id``."""
    connector: Any = store.connector
    if connector.dialect == "sqlite":
        import sqlite3

        conn = sqlite3.connect(connector.path)
        conn.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON attempts WHEN NEW.run_id = '{run_id}' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
        conn.commit()
        conn.close()
        return
    import psycopg

    with psycopg.connect(connector.url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {connector.schema}")
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.run_id = '{run_id}' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$"
        )
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON attempts FOR EACH ROW EXECUTE FUNCTION refuse()")


def test_a_statement_the_database_refuses_in_a_coalesced_batch_fails_only_its_call(any_store: SQLStore) -> None:
    """Six intents in one batch, the database refusing one of them mid-pipeline: that call
    raises StoreError and journals nothing; the other five are journaled, once each."""
    s = any_store
    _six_leased(s)
    _refuse_attempts_of(s, "r2")
    sizes = _spy(s, s.journal, "begin_attempts")
    outcome = _six_intents(s)
    assert sizes[0] == 6
    assert isinstance(outcome[2], StoreError) and "refused by the test" in str(outcome[2])
    assert [o.attempt_no for i, o in enumerate(outcome) if i != 2] == [1] * 5
    assert s.attempts("r2") == []
    assert [len(s.attempts(f"r{i}")) for i in (0, 1, 3, 4, 5)] == [1] * 5


def test_an_update_returns_its_row_as_a_read_by_id_would_read_it(any_store: SQLStore) -> None:
    """``Tx.changed_each``: each update that changed its row gives the row as the read query
    reads it afterwards (on PostgreSQL the update's own RETURNING; on SQLite an update, then
    the read); an update a fence let nothing through gives None, and changes nothing."""
    store = any_store
    ids = [store.create_run(NewRun(id=f"r{i}", flow_name="f", inputs={})).id for i in range(3)]
    lease = lease_params(A, store.now(), 30.0)
    with store.connector.transaction() as tx:
        assert tx.execute("claim_queued_by_id", {**lease, "id": "r1"}) == 1  # leased already: the next claim misses it
        rows = tx.changed_each("claim_queued_by_id", [{**lease, "id": run_id} for run_id in ids], "get_run")
        assert [row is None for row in rows] == [False, True, False]
        read = tx.one_each("get_run", [{"id": "r0"}, {"id": "r2"}])
    assert [dict(row) for row in rows if row is not None] == [dict(row) for row in read if row is not None]
    runs = [store.get_run(i) for i in ids]
    assert [r.lease_epoch for r in runs if r is not None] == [1, 1, 1]  # the claim that missed changed nothing
    assert {r.state for r in runs if r is not None} == {RunState.LEASED}


def test_a_returned_row_must_be_read_by_id_from_the_table_the_update_changes() -> None:
    """PostgreSQL derives ``RETURNING`` from the read query; a pair that is not an update and a
    read by id of the same table is refused, not guessed at."""
    from browserworker.store.postgres._queries import QUERIES, returning_clause

    assert returning_clause(QUERIES["end_run"], QUERIES["get_run"]) == " RETURNING *"
    assert returning_clause(QUERIES["finish_attempt"], QUERIES["dispatched_at"]) == " RETURNING dispatched_at"
    with pytest.raises(ValueError):
        returning_clause(QUERIES["finish_attempt"], QUERIES["get_run"])  # attempts, read from runs
    with pytest.raises(ValueError):
        returning_clause(QUERIES["get_run"], QUERIES["get_run"])  # not an update


def test_each_one_statement_batch_form_takes_its_query_parameters() -> None:
    """A query's one-statement form for a batch (PostgreSQL, ``sql/postgres_batch.sql``) reads
    the parameters of the query it stands for from its calls' JSON, its row's key first (only
    ``insert_attempt`` computes one itself, the attempt's number), and names each call's row by
    that key: an update returns the id of each row it changed, an insert each row's key, a
    read its call's key as ``batch_key``."""
    import re

    from browserworker.store.postgres._queries import BATCHES, QUERIES

    assert {
        "claim_queued_by_id",
        "start_run",
        "end_run",
        "heartbeat",
        "finish_attempt",
        "insert_attempt",
        "insert_outbox",
        "effect_boundary",
    } <= set(BATCHES)
    for name, batch in BATCHES.items():
        sql, names = batch.sql, batch.params
        single = set(re.findall(r"%\((\w+)\)s", QUERIES[name]))
        assert set(names) | batch.computes == single and not set(names) & batch.computes, name
        assert batch.computes == ({"attempt_no"} if name == "insert_attempt" else set()), name
        assert re.findall(r"%\((\w+)\)s", sql) == ["calls"], name
        if sql.startswith("UPDATE"):
            assert names[0] in ("id", "attempt_id") and f"WHERE id = %({names[0]})s" in " ".join(QUERIES[name].split())
            assert batch.key == "id" and re.search(r"RETURNING \w+\.(id|\*)", sql), name
        elif sql.startswith("INSERT"):
            assert batch.key == names[0] and re.search(rf"RETURNING .*\w+\.{names[0]}\b", sql), name
        else:
            assert batch.key == "batch_key" and f"t.{names[0]} AS batch_key" in sql, name


def test_a_batch_whose_values_json_cannot_carry_runs_call_by_call(any_store: SQLStore) -> None:
    """A batch's heartbeats with a TTL JSON has no number for (infinity) still extend each lease:
    on PostgreSQL its calls then run one statement each, as on SQLite."""
    s = any_store
    _six_leased(s)
    with s.connector.transaction() as tx:
        params = [{"id": f"r{i}", "epoch": 1, "now": s.now(), "ttl": float("inf")} for i in range(6)]
        assert tx.execute_each("heartbeat", params) == [1] * 6
    runs = [s.get_run(f"r{i}") for i in range(6)]
    assert all(r is not None and r.lease_expires_at == float("inf") for r in runs)


_CONTROL = {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"}


class _Statements:
    """The statements a PostgreSQL store sends while counting (each execution: a pipeline of n
    is n), transaction control (BEGIN, COMMIT, savepoints) left out; nothing is counted on
    SQLite (``count`` stays None)."""

    def __init__(self, store: SQLStore) -> None:
        self.count: int | None = None if store.connector.dialect == "sqlite" else 0
        self._undo: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> _Statements:
        if self.count is None:
            return self
        import psycopg

        cursor = psycopg.Cursor
        execute, executemany = cursor.execute, cursor.executemany

        def counted_execute(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if str(query).split(None, 1)[0].upper() not in _CONTROL:
                self.count += 1  # type: ignore[operator]
            return execute(cur, query, *args, **kwargs)

        def counted_executemany(cur: Any, query: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
            params = list(params)
            self.count += len(params)  # type: ignore[operator]
            return executemany(cur, query, params, *args, **kwargs)

        self._undo = [(cursor, "execute", execute), (cursor, "executemany", executemany)]
        cursor.execute, cursor.executemany = counted_execute, counted_executemany  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, real in self._undo:
            setattr(owner, name, real)


def _move_lease(s: SQLStore, run_id: str) -> None:
    """Another owner (B) takes ``run_id``'s expired lease: the run is at epoch 2."""
    backdate(s, run_id, 120)
    taken = s.claim_run(run_id, B, 30.0)
    assert taken is not None and taken.lease_epoch == 2


def test_numbered_inserts_of_a_batch_continue_each_sequence_and_report_a_fence_per_call(any_store: SQLStore) -> None:
    """``Tx.insert_numbered_each`` (a batch's intents): each attempt gets the next number of its
    own run and step, a call whose lease moved on gets None and inserts nothing, the others are
    inserted; on PostgreSQL all six are one statement (the number read in the insert)."""
    s = any_store
    _six_leased(s)
    s.begin_attempt("r1", 1, "pay", "effect", "r1/pay", "fp")
    s.begin_attempt("r1", 1, "pay", "effect", "r1/pay", "fp")
    s.begin_attempt("r4", 1, "other", "action", "r4/other", "fp")
    _move_lease(s, "r3")
    now = s.now()
    params = [
        {
            "run_id": f"r{i}",
            "step_id": "pay",
            "kind": "effect",
            "request_key": f"r{i}/pay",
            "fingerprint": "fp",
            "state": "INTENT",
            "epoch": 1,
            "worker": A.worker,
            "now": now,
            "margin": 0.0,
        }
        for i in range(6)
    ]
    with _Statements(s) as sent, s.connector.transaction() as tx:
        inserted = tx.insert_numbered_each("insert_attempt", params, "next_attempt_no", "attempt_no")
    assert sent.count in (None, 1)
    assert [None if new is None else new[1] for new in inserted] == [1, 3, 1, None, 1, 1]
    assert s.attempts("r3") == []
    for i, new in enumerate(inserted):
        if new is not None:
            latest = s.latest_attempt(f"r{i}", "pay")
            assert latest is not None and (latest.id, latest.attempt_no) == new


def test_a_lost_lease_in_a_batch_of_dispatches_fails_only_its_own_call(any_store: SQLStore) -> None:
    """Six dispatch commits in one batch, one under an epoch another claim has moved on: that
    call raises LeaseLost and writes no outbox row; each other call gets the id of its own
    attempt's outbox row (on PostgreSQL the outbox rows are one insert)."""
    s = any_store
    _six_leased(s)
    attempts = _six_intents(s)
    _move_lease(s, "r3")
    sizes = _spy(s, s.journal, "mark_dispatched_each")
    outcome = _in_one_batch(s, [(s.mark_dispatched, (attempts[i], 1, "POST", f"http://shop/{i}")) for i in range(6)])
    assert sizes[0] == 6
    assert isinstance(outcome[3], LeaseLost)
    assert s.outbox(attempts[3].id) == []
    for i in (0, 1, 2, 4, 5):
        rows = s.outbox(attempts[i].id)
        assert [(r.id, r.url, r.run_id) for r in rows] == [(outcome[i], f"http://shop/{i}", f"r{i}")]


def test_boundaries_read_in_one_batch_are_each_calls_own(any_store: SQLStore) -> None:
    """Boundary reads of one batch (runs with no attempt, with several, a cancel asked, a run
    that does not exist) give each call what it reads alone; on PostgreSQL they are one
    statement."""
    s = any_store
    _six_leased(s)
    s.begin_attempt("r1", 1, "pay", "effect", "r1/pay", "fp1")
    s.begin_attempt("r1", 1, "pay", "effect", "r1/pay", "fp2")
    s.begin_attempt("r4", 1, "pay", "effect", "r4/pay", "fp4")
    s.begin_attempt("r5", 1, "other", "action", "r5/other", "fp5")
    assert s.cancel("r2") == "requested"
    runs = ["r0", "r1", "r2", "gone", "r4", "r5"]
    alone = [s.effect_boundary(run_id, "pay") for run_id in runs]
    with _Statements(s) as sent:
        together = _in_one_batch(s, [(s.effect_boundary, (run_id, "pay")) for run_id in runs])
    assert sent.count in (None, 1)
    assert together == alone
    summary = [
        (cancelled, None if latest is None else (latest.run_id, latest.attempt_no)) for cancelled, latest in together
    ]
    assert summary == [
        (False, None),
        (False, ("r1", 2)),
        (True, None),
        (False, None),
        (False, ("r4", 1)),
        (False, None),
    ]
