"""The SQLite dialect's own mechanics: PRAGMAs, migrations, its write lock and busy
handling, group commit over savepoints, and its query plans."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from browserworker.errors import StoreError
from browserworker.store import SCHEMA_VERSION, NewRun, Owner, SQLiteStore
from browserworker.store.sqlite._store import QUERIES

pytestmark = pytest.mark.sqlite_dialect

A = Owner("worker-a", "host", 1)
B = Owner("worker-b", "host", 2)


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "bw.db")
    s.create_run(NewRun(id="r1", flow_name="f", inputs={"item": "tea"}))
    return s


def test_pragmas_and_schema_version(tmp_path: Path) -> None:
    """WAL, synchronous=FULL, and the schema version are set on open."""
    store = SQLiteStore(tmp_path / "bw.db")
    conn = store.connector.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert store.schema_version == SCHEMA_VERSION >= 1


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database from a newer browserworker is not touched."""
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer than this browserworker"):
        SQLiteStore(path)


def test_busy_database_is_a_store_error(tmp_path: Path) -> None:
    """A write that cannot get the lock within the busy timeout raises StoreError."""
    path = tmp_path / "busy.db"
    s = SQLiteStore(path, busy_timeout=0.1)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="cannot start a write transaction"):
            s.create_run(NewRun(id="x", flow_name="f", inputs={}))
    finally:
        blocker.execute("ROLLBACK")
    assert s.get_run("x") is None


def test_a_write_takes_the_lock_as_soon_as_another_writer_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that finds another process's write lock tries again every 0.1 ms for 50 ms (the
    span of a few group commits; SQLite's own handler sleeps 1, 2, 5, 10… ms), then backs off
    to 2 ms, and succeeds on the first try after the lock is released; the connection's busy
    timeout is as configured afterwards."""
    import browserworker.store.sqlite._store as sqlite_module

    path = tmp_path / "busy.db"
    s = SQLiteStore(path, busy_timeout=30)
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    clock = [1000.0]
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        clock[0] += seconds
        if clock[0] - 1000.0 >= 0.065 and blocker.in_transaction:
            blocker.execute("ROLLBACK")  # the other writer lets go 65 ms in

    monkeypatch.setattr(sqlite_module.time, "sleep", pause)
    monkeypatch.setattr(sqlite_module.time, "monotonic", lambda: clock[0])
    created = s.create_run(NewRun(id="x", flow_name="f", inputs={}))
    assert s.get_run("x") == created
    fast = [p for p in pauses if p == 0.0001]
    assert pauses[: len(fast)] == fast and 0.05 <= sum(fast) < 0.0504  # 0.1 ms apart for the first 50 ms
    slow = pauses[len(fast) :]
    assert slow[:4] == [0.0002, 0.0004, 0.0008, 0.0016] and set(slow[4:]) == {0.002}
    assert 0.065 <= sum(pauses) < 0.067  # in on the first try after the release
    assert s.connector.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


def test_a_failing_call_spoils_only_the_bare_try_of_its_batch(tmp_path: Path) -> None:
    """A batch runs first with no savepoint per call. A call that writes and then fails, or
    one that swallows its own failed transaction, sends that whole try back; the batch runs
    again with a savepoint per call: the others' writes land once, the partial write never."""
    import asyncio
    import threading
    from collections.abc import Callable

    from browserworker.store.aio import AsyncStore

    s = SQLiteStore(tmp_path / "g.db")
    astore = AsyncStore(s)

    def half_written() -> None:
        with s.connector.transaction():
            s.connector.conn.execute("INSERT INTO queues (name, max_depth) VALUES ('half', 1)")
            raise ValueError("failed after writing")

    def swallowing() -> str:
        try:
            with s.connector.transaction():
                s.connector.conn.execute("INSERT INTO queues (name, max_depth) VALUES ('swallowed', 1)")
                raise ValueError("failed after writing")
        except ValueError:
            return "handled"

    tries: list[bool] = []
    original = s.group

    def counting_group(*, isolate: bool = True):  # type: ignore[no-untyped-def]
        tries.append(isolate)
        return original(isolate=isolate)

    s.group = counting_group  # type: ignore[method-assign]

    async def one_batch(middle: Callable[[], object], first: str, last: str) -> list[object]:
        """``create_run(first)``, ``middle()``, ``create_run(last)`` queued up behind a held store thread."""
        entered, hold = threading.Event(), threading.Event()

        def holding() -> bool:
            entered.set()
            return hold.wait(30)

        blocker = asyncio.ensure_future(astore.call(holding))
        assert await asyncio.to_thread(entered.wait, 30)
        calls = [
            asyncio.ensure_future(astore.call(s.create_run, NewRun(id=first, flow_name="f", inputs={}))),
            asyncio.ensure_future(astore.call(middle)),
            asyncio.ensure_future(astore.call(s.create_run, NewRun(id=last, flow_name="f", inputs={}))),
        ]
        await asyncio.sleep(0)
        hold.set()
        assert await blocker is True
        return await asyncio.gather(*calls, return_exceptions=True)

    async def main() -> tuple[list[object], list[object]]:
        return await one_batch(swallowing, "a", "b"), await one_batch(half_written, "c", "d")

    (a, swallowed, b), (c, half, d) = asyncio.run(main())
    astore.close()
    assert tries == [False, True, False, True]  # each batch: the bare try, then the isolated one
    assert [r.id for r in (a, b, c, d)] == ["a", "b", "c", "d"]  # type: ignore[attr-defined]
    assert swallowed == "handled" and isinstance(half, ValueError)
    assert s.queue_limits() == {}  # neither partial write survived
    assert all([e.kind for e in s.events(r)] == ["run_created"] for r in "abcd")  # undone, not doubled
    assert astore.commits == 4  # two blockers, two batches (their bare tries were rolled back)
    assert s.integrity_check() == "ok"


def test_group_rolled_back_by_sqlite_fails_every_call(tmp_path: Path) -> None:
    """If SQLite rolls a group's whole transaction back (as it may on a full disk), no call of
    the group reports success: the ones before the failure were lost with it."""
    import asyncio
    import threading

    from browserworker.store.aio import AsyncStore

    s = SQLiteStore(tmp_path / "g.db")

    def disk_full_after_auto_rollback() -> None:
        with s.connector.transaction():
            s.connector.conn.execute("ROLLBACK")  # what SQLite does by itself on SQLITE_FULL / SQLITE_IOERR
            raise sqlite3.OperationalError("database or disk is full")

    astore = AsyncStore(s)
    entered, hold = threading.Event(), threading.Event()

    def holding(timeout: float) -> bool:
        entered.set()
        return hold.wait(timeout)

    async def main() -> list[object]:
        blocker = asyncio.ensure_future(astore.call(holding, 30))
        assert await asyncio.to_thread(entered.wait, 30)  # the store thread is held: later calls queue up
        calls = [
            asyncio.ensure_future(astore.call(s.create_run, NewRun(id="before", flow_name="f", inputs={}))),
            asyncio.ensure_future(astore.call(disk_full_after_auto_rollback)),
            asyncio.ensure_future(astore.call(s.create_run, NewRun(id="after", flow_name="f", inputs={}))),
        ]
        await asyncio.sleep(0)
        hold.set()
        assert await blocker is True
        return await asyncio.gather(*calls, return_exceptions=True)

    outcome = asyncio.run(main())
    astore.close()
    assert all(isinstance(o, StoreError) for o in outcome), outcome
    assert s.get_run("before") is None and s.get_run("after") is None
    assert s.integrity_check() == "ok"
    later = s.create_run(NewRun(id="later", flow_name="f", inputs={}))  # the store works again
    assert s.get_run("later") == later


def test_reads_that_lead_a_batch_need_no_write_lock_and_answer_before_its_commit(tmp_path: Path) -> None:
    """Reads at the head of a batch run outside its write transaction: while another
    connection holds the write lock they are answered at once (WAL lets them read), and the
    batch's write waits for the lock and commits after. A read behind the write stays in
    the batch's transaction and sees it."""
    import asyncio
    import threading

    from browserworker.store.aio import AsyncStore

    path = tmp_path / "c.db"
    s = SQLiteStore(path, busy_timeout=30)
    s.create_run(NewRun(id="r1", flow_name="f", inputs={}))
    astore = AsyncStore(s)
    other = sqlite3.connect(path, isolation_level=None)
    entered, hold = threading.Event(), threading.Event()

    def holding(timeout: float) -> bool:
        entered.set()
        return hold.wait(timeout)

    async def main() -> None:
        blocker = asyncio.ensure_future(astore.call(holding, 30))
        assert await asyncio.to_thread(entered.wait, 30)  # later calls queue up into one batch
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        reads = [
            asyncio.ensure_future(astore.call(s.get_run, "r1")),
            asyncio.ensure_future(astore.call(s.history, "r1")),
        ]
        write = asyncio.ensure_future(astore.call(s.create_run, NewRun(id="r2", flow_name="f", inputs={})))
        behind = asyncio.ensure_future(astore.call(s.get_run, "r2"))
        await asyncio.sleep(0)
        hold.set()
        assert await blocker is True
        run, (attempts, restored, _requeued) = await asyncio.wait_for(asyncio.gather(*reads), timeout=10)
        assert run is not None and run.id == "r1" and attempts == [] and restored is None
        assert not write.done()  # still waiting for the lock the other writer holds
        other.execute("COMMIT")
        assert (await write).id == "r2"
        seen = await behind
        assert seen is not None and seen.id == "r2"

    try:
        asyncio.run(main())
    finally:
        other.close()
        astore.close()


def _open(path: str) -> int:
    return SQLiteStore(path).schema_version


def test_concurrent_first_open_migrates_once(tmp_path: Path) -> None:
    """Several processes opening a new database at once all succeed; it is migrated once."""
    import multiprocessing

    path = str(tmp_path / "new.db")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        versions = pool.map(_open, [path] * 8)
    assert versions == [SCHEMA_VERSION] * 8
    assert SQLiteStore(path).integrity_check() == "ok"


def test_no_happy_path_write_spools_into_a_temporary_table(store: SQLiteStore) -> None:
    """SQLite runs an INSERT whose SELECT reads the table it inserts into (as the attempt
    number's MAX once did) through a temporary table first, as it does a RETURNING: dearer
    than the write. No write query does so, but the generic run transition, off the happy
    path (its IN lists of states are built as temporary indexes)."""
    import re

    spooling = set()
    for name, sql in QUERIES.items():
        body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--")).strip()
        if not re.match(r"(INSERT|UPDATE|DELETE)\b", body, re.I):
            continue
        params: tuple[None, ...] | dict[str, None] = (
            (None,) * body.count("?") if "?" in body else dict.fromkeys(re.findall(r":(\w+)", body))
        )
        if any(row[1] == "OpenEphemeral" for row in store.connector.conn.execute("EXPLAIN " + body, params)):
            spooling.add(name)
    assert spooling == {"set_run_state"}


def test_no_query_says_returning() -> None:
    """No SQLite query uses RETURNING (SQLite spools such a statement through a temporary
    b-tree, dearer than the write itself); the rows are read back by key instead."""
    assert not [name for name, sql in QUERIES.items() if "RETURNING" in sql.upper()]
