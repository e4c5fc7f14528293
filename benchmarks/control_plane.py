"""Benchmark (b): control-plane throughput with no browser, and its peers.

Ours: runs of one no-op effect through the full journal — claim (a first lease, started in the
claim's write as the worker claims: like the executor, no history read), the step boundary, intent, the gate's dispatch commit and
response, outcome, SUCCEEDED — the store calls the executor makes for such a run, reads included, in its order, through
the same AsyncStore (group commit), at synchronous=FULL. Peers: Huey's SqliteHuey
(fsync=True: synchronous=FULL, WAL) and DBOS Transact workflows of one step on its SQLite
system database.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from browserworker.journal import this_owner
from browserworker.states import AttemptState, RunState
from browserworker.store import NewRun, SQLiteStore, Store, open_store
from browserworker.store.aio import AsyncStore

HERE = Path(__file__).resolve().parent


def raw_commit_rate(path: Path, n: int = 500) -> float:
    """Commits/s of one-row transactions at synchronous=FULL in WAL: the fsync ceiling."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", (i,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def seed(db: Path, n: int) -> None:
    store = open_store(db)
    with store.group():
        for i in range(n):
            store.enqueue(NewRun(id=f"cp-{i:06d}", flow_name="noop", inputs={}))
    store.close()


async def _drain(db: Path, concurrency: int) -> dict[str, Any]:
    return await drain_store(SQLiteStore(db, busy_timeout=30), concurrency)


async def drain_store(store: Store, concurrency: int) -> dict[str, Any]:
    """Drain ``store``'s queue with ``concurrency`` runs in flight; closes the store."""
    astore = AsyncStore(store)
    owner = this_owner("bench")
    done = 0

    async def one_run() -> bool:
        # the store calls browserworker.executor (and its gate) make for a fresh run of one
        # effect that sends one request, in order; the reads included
        run = await astore.call(store.claim_next, owner, ["default"], 60.0, start=True)  # as the worker claims
        if run is None:
            return False
        epoch = run.lease_epoch
        if not run.fresh:  # as the executor: a run leased for the first time has no history to read
            await astore.call(store.history, run.id)
        if run.state != RunState.RUNNING:  # as the executor: a fresh run was started by its claim
            await astore.call(
                store.advance_run, run.id, epoch, RunState.RUNNING, worker=owner.worker, decision="started"
            )
        await astore.call(store.effect_boundary, run.id, "effect")  # cancel requested? the step's latest attempt
        attempt = await astore.call(
            store.begin_attempt,
            run.id,
            epoch,
            "effect",
            "effect",
            f"{run.id}/effect",
            "fp",
            worker=owner.worker,
            margin=5.0,
        )
        outbox_id = await astore.call(store.mark_dispatched, attempt, epoch, "POST", "noop://", margin=5.0)
        await astore.call(store.record_response, outbox_id, 200, "noop://", {"content-type": "text/plain"})
        await astore.call(
            store.finish_attempt,
            attempt,
            epoch,
            AttemptState.SUCCEEDED,
            decided_by="return",
            result={"ok": True},
            worker=owner.worker,
        )
        await astore.call(store.set_run_state, run.id, epoch, RunState.SUCCEEDED, worker=owner.worker)
        return True

    async def lane() -> None:
        nonlocal done
        while await one_run():
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    astore.close()
    store.close()
    return {"runs": done, "seconds": elapsed, "commits": astore.commits, "calls": astore.calls}


def ours(workers: int, runs: int, concurrency: int = 64) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "cp.db"
        seed(db, runs)
        start = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "worker", str(db), str(concurrency)], stdout=subprocess.PIPE, text=True
            )
            for _ in range(workers)
        ]
        outs = [json.loads(p.communicate()[0]) for p in procs]
        wall = time.perf_counter() - start
        store = open_store(db)
        first = min(r.started_at for r in store.list_runs(limit=runs + 1))
        last = max(r.finished_at for r in store.list_runs(limit=runs + 1))
        ok = sum(1 for r in store.list_runs(limit=runs + 1) if r.state == RunState.SUCCEEDED)
        store.close()
    assert ok == runs, f"only {ok}/{runs} runs succeeded"
    commits = sum(o["commits"] for o in outs)
    return {
        "runs": runs,
        "workers": workers,
        "runs_per_s": runs / (last - first),
        "wall_incl_startup": wall,
        "commits_per_run": commits / runs,
        "calls_per_run": sum(o["calls"] for o in outs) / runs,
    }


def huey(runs: int, threads: int = 8) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    from huey import SqliteHuey

    with tempfile.TemporaryDirectory() as tmp:
        h = SqliteHuey("bench", filename=str(Path(tmp) / "huey.db"), fsync=True)

        @h.task()
        def noop(i: int) -> int:
            return i

        for i in range(runs):
            noop(i)
        done = 0

        def consume() -> int:
            n = 0
            while (task := h.dequeue()) is not None:
                h.execute(task)
                n += 1
            return n

        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            done = sum(pool.map(lambda _: consume(), range(threads)))
        elapsed = time.perf_counter() - start
    assert done == runs
    return {
        "runs": runs,
        "runs_per_s": runs / elapsed,
        "durability": "SqliteHuey fsync=True (WAL, synchronous=FULL); "
        "dequeue deletes the task, the result is a separate commit",
    }


def dbos(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, __file__, "dbos", str(Path(tmp) / "dbos.sqlite"), str(runs)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if out.returncode != 0:
            return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
        return json.loads(out.stdout.strip().splitlines()[-1])


def _dbos_child(path: str, runs: int) -> None:
    from dbos import DBOS

    @DBOS.step()
    def effect(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow(i: int) -> int:
        return effect(i)

    DBOS(
        config={
            "name": "bench",
            "system_database_url": f"sqlite:///{path}",
            "run_admin_server": False,
            "log_level": "ERROR",
        }
    )
    DBOS.launch()
    start = time.perf_counter()
    handles = [DBOS.start_workflow(workflow, i) for i in range(runs)]
    for handle in handles:
        handle.get_result()
    elapsed = time.perf_counter() - start
    conn = sqlite3.connect(path)
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    conn.close()
    DBOS.destroy()
    print(
        json.dumps(
            {
                "runs": runs,
                "runs_per_s": runs / elapsed,
                "durability": f"DBOS SQLite system database (journal_mode={mode}); start_workflow + 1 step",
            }
        )
    )


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        print(json.dumps(asyncio.run(_drain(Path(sys.argv[2]), int(sys.argv[3])))))
    elif sys.argv[1] == "dbos":
        _dbos_child(sys.argv[2], int(sys.argv[3]))
    else:
        print(
            json.dumps(
                {
                    "one": ours(1, 2000),
                    "two": ours(2, 2000),
                    "huey": huey(2000),
                    "dbos": dbos(200),
                    "raw": raw_commit_rate(Path(tempfile.mkdtemp()) / "raw.db"),
                },
                indent=2,
            )
        )
