"""Store faults: the database locked past the busy timeout, the disk full, the file read-only.

In every case nothing whose intent (or dispatch) could not be committed reaches the shop,
the CLI ends with one clear `error:` line and exit 5 (stopped without an outcome), the
database stays intact (integrity_check ok, every earlier row unchanged), and once the
store is healthy again the run resumes to exactly one order.

Disk full is a small tmpfs filled to the last byte (needs root to mount; skipped
otherwise); read-only is `chattr +i` as root (root ignores file modes), else mode 0444.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserworker.errors import StoreError
from browserworker.journal import this_owner
from browserworker.store import NewRun, SQLiteStore
from tests.support.bw import BW
from tests.support.fleet import enqueue_many, start_worker
from tests.support.paths import TEST_FLOWS
from tests.support.processes import sigkill

SHORT = str(TEST_FLOWS / "short_order.py")
FAST_BUSY = {"BROWSERWORKER_BUSY_TIMEOUT": "1"}
TABLES = ("runs", "attempts", "outbox", "events")


# -- helpers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def write_lock(db: Path) -> Iterator[None]:
    """Hold the database's write lock from another connection (as a stuck process would)."""
    conn = sqlite3.connect(db, isolation_level=None, timeout=60)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "8m") -> Iterator[Path]:
    """A small tmpfs at ``path``; skips the test where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem has no byte left."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 16, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == 28, exc  # ENOSPC
    assert os.statvfs(directory).f_bavail == 0
    return filler


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` read-only even for root (``chattr +i``); a plain mode change otherwise."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make a file immutable here: {done.stderr.strip()}")
        undo = ["chattr", "-i", str(path)]
    else:
        path.chmod(0o444)
        undo = None
    try:
        yield
    finally:
        if undo:
            subprocess.run(undo, check=True)
        else:
            path.chmod(0o644)


def wait_stopped(proc: subprocess.Popen[str], timeout: float = 180) -> None:
    """Poll until the child paused itself at its fault point (SIGSTOP), with a deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited {proc.returncode} before its fault point: {proc.stderr.read()}"
        if Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] == "T":
            return
        time.sleep(0.05)
    sigkill(proc)
    raise TimeoutError(f"process {proc.pid} never reached its fault point")


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the journal's tables, read through a read-only connection."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in TABLES}
    finally:
        conn.close()


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db, timeout=60)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def submit_attempts(db: Path, run_id: str) -> list[Any]:
    store = SQLiteStore(db)
    try:
        return [a for a in store.attempts(run_id) if a.step_id == "submit"]
    finally:
        store.close()


def assert_one_error_line(stderr: str, *needles: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert lines and lines[-1].startswith("error: store unavailable"), stderr
    assert [ln for ln in lines if ln.startswith("error:")] == [lines[-1]], stderr
    for needle in needles:
        assert needle in lines[-1], lines[-1]


def start_paused(bw: BW, shop: Any, run_id: str, point: str) -> subprocess.Popen[str]:
    """`browserworker run` of the short order flow, pausing itself (SIGSTOP) at ``point``."""
    proc = bw.start(
        "run",
        SHORT,
        "--db",
        str(bw.db),
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=tea",
        "--run-id",
        run_id,
        env={**FAST_BUSY, "BROWSERWORKER_FAULTS": f"{point}:submit=stop"},
    )
    wait_stopped(proc)
    return proc


def finish(proc: subprocess.Popen[str]) -> str:
    """Let a paused child go on (SIGCONT) and wait for it; its stderr."""
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=180)
    return err


def check_stopped_cleanly(
    bw: BW, shop: Any, run_id: str, point: str, received: int, before: dict[str, list[tuple[Any, ...]]]
) -> None:
    """Nothing reached the shop, nothing was written, and the run resumes to one order."""
    assert shop.inflight()["received"] == received
    assert shop.orders(f"{run_id}/submit") == []
    assert integrity(bw.db) == "ok"
    assert snapshot(bw.db) == before  # the failing process changed no row
    attempts = submit_attempts(bw.db, run_id)
    if point == "before_intent_commit":
        assert attempts == []  # the intent never committed, so nothing was attempted
    else:
        [intent] = attempts  # committed before the click; the gate could not commit the dispatch
        assert (intent.state, intent.dispatched_at) == ("INTENT", None)
    resumed = bw.run("run", SHORT, "--db", str(bw.db), "--run-id", run_id, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert len(shop.orders(f"{run_id}/submit")) == 1
    assert shop.inflight()["received"] == received + 1
    states = [(a.state, a.decided_by) for a in submit_attempts(bw.db, run_id)]
    if point == "before_intent_commit":
        assert states == [("SUCCEEDED", "return")]
    else:
        assert states == [("FAILED_BEFORE_SEND", "recovery:no_dispatch"), ("SUCCEEDED", "return")]
    assert integrity(bw.db) == "ok"


# -- the store itself (no browser) ---------------------------------------------------------


@pytest.mark.sqlite_dialect
def test_store_write_failures_raise_store_error_and_roll_back(tmp_path: Path) -> None:
    """A write that hits a full database raises StoreError (not a raw sqlite3 error) and leaves
    no partial rows; earlier rows stay and integrity_check is ok."""
    store = SQLiteStore(tmp_path / "bw.db")
    store.create_run(NewRun(id="early", flow_name="f", inputs={"x": 1}))
    run = store.claim_run("early", this_owner("test"), 30)
    assert run is not None
    before = snapshot(tmp_path / "bw.db")
    pages = store.connector.conn.execute("PRAGMA page_count").fetchone()[0]
    store.connector.conn.execute(f"PRAGMA max_page_count = {pages}")  # this connection's "disk" is now full
    with pytest.raises(StoreError, match="database or disk is full"):
        store.begin_attempt("early", run.lease_epoch, "submit", "effect", "early/submit", "f" * 200_000)
    with pytest.raises(StoreError, match="database or disk is full"):
        store.create_run(NewRun(id="late", flow_name="f", inputs={"blob": "x" * 200_000}))
    assert store.attempts("early") == [] and store.get_run("late") is None
    assert snapshot(tmp_path / "bw.db") == before
    assert store.integrity_check() == "ok"
    store.close()


@pytest.mark.sqlite_dialect
def test_store_busy_timeout_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BROWSERWORKER_BUSY_TIMEOUT sets how long a write waits for a lock; a bad value is a clear error."""
    db = tmp_path / "bw.db"
    SQLiteStore(db).close()
    monkeypatch.setenv("BROWSERWORKER_BUSY_TIMEOUT", "0.2")
    store = SQLiteStore(db)
    assert store.busy_timeout == 0.2
    with write_lock(db):
        started = time.monotonic()
        with pytest.raises(StoreError, match="database is locked"):
            store.create_run(NewRun(id="r", flow_name="f", inputs={}))
        assert time.monotonic() - started < 3
    store.close()
    monkeypatch.setenv("BROWSERWORKER_BUSY_TIMEOUT", "soon")
    with pytest.raises(StoreError, match="BROWSERWORKER_BUSY_TIMEOUT='soon'"):
        SQLiteStore(db)


@pytest.mark.sqlite_dialect
def test_read_only_database_file_refuses_writes_cleanly(tmp_path: Path) -> None:
    """A read-only database file still opens for reading; every write is a StoreError naming it."""
    db = tmp_path / "bw.db"
    SQLiteStore(db).create_run(NewRun(id="early", flow_name="f", inputs={}))
    with read_only(db):
        store = SQLiteStore(db)
        try:
            assert [r.id for r in store.list_runs()] == ["early"]
            with pytest.raises(StoreError, match="readonly database"):
                store.create_run(NewRun(id="late", flow_name="f", inputs={}))
            with pytest.raises(StoreError, match="readonly database"):
                store.claim_run("early", this_owner("test"), 30)
        finally:
            store.close()
    assert integrity(db) == "ok"
    assert [r.id for r in SQLiteStore(db).list_runs()] == ["early"]


# -- a real run against the shop ------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_intent_commit", "after_intent_commit"])
def test_locked_store_sends_nothing_and_stops_with_one_line(bw: BW, shop: Any, run_id: str, point: str) -> None:
    """The database is locked past the busy timeout when the submit's intent (or its dispatch)
    is to be committed: nothing reaches the shop, `run` exits 5 with one error line, no row
    changed; resumed later, exactly one order."""
    received = shop.inflight()["received"]
    proc = start_paused(bw, shop, run_id, point)
    before = snapshot(bw.db)
    with write_lock(bw.db):
        err = finish(proc)
    assert proc.returncode == 5, err
    assert_one_error_line(err, "database is locked", f"--run-id {run_id}")
    check_stopped_cleanly(bw, shop, run_id, point, received, before)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_intent_commit", "after_intent_commit"])
def test_full_disk_sends_nothing_and_stops_with_one_line(tmp_path: Path, shop: Any, run_id: str, point: str) -> None:
    """The disk fills up before the submit's intent (or its dispatch) is committed: nothing
    reaches the shop, `run` exits 5 with one error line, no row changed; with space again
    the run resumes to exactly one order."""
    with tmpfs(tmp_path / "disk") as disk:
        bw = BW(db=disk / "bw.db")
        received = shop.inflight()["received"]
        proc = start_paused(bw, shop, run_id, point)
        before = snapshot(bw.db)
        filler = fill(disk)
        err = finish(proc)
        assert proc.returncode == 5, err
        assert_one_error_line(err, "database or disk is full")
        assert integrity(bw.db) == "ok"
        filler.unlink()
        check_stopped_cleanly(bw, shop, run_id, point, received, before)


@pytest.mark.browser
@pytest.mark.slow
def test_read_only_database_run_and_worker_refuse_cleanly(bw: BW, tmp_path: Path, shop: Any) -> None:
    """With the database file read-only, `run` (new or resumed) and `worker` each exit 5 with
    one error line and send nothing; made writable again, the queued run drains to one order."""
    [queued] = enqueue_many(bw.db, "short_order.py", shop, 1, prefix=f"ro-{tmp_path.name[-6:]}")
    received = shop.inflight()["received"]
    before = snapshot(bw.db)
    with read_only(bw.db):
        new = bw.run(
            "run",
            SHORT,
            "--db",
            str(bw.db),
            "--input",
            f"base_url={shop.url}",
            "--input",
            "item=tea",
            "--run-id",
            "ro-new",
        )
        assert new.returncode == 5, new.stderr
        assert_one_error_line(new.stderr, "no run started", "readonly database")
        resumed = bw.run("run", SHORT, "--db", str(bw.db), "--run-id", queued)
        assert resumed.returncode == 5, resumed.stderr
        assert_one_error_line(resumed.stderr, "readonly database", f"--run-id {queued}")
        worker = bw.run("worker", "--once", "--db", str(bw.db))
        assert worker.returncode == 5, worker.stderr
        assert_one_error_line(worker.stderr, "readonly database")
    assert shop.inflight()["received"] == received
    assert integrity(bw.db) == "ok"
    assert snapshot(bw.db) == before
    drained = bw.run("worker", "--once", "--db", str(bw.db), timeout=240)
    assert drained.returncode == 0, drained.stderr
    assert len(shop.orders(f"{queued}/submit")) == 1
    assert shop.inflight()["received"] == received + 1


@pytest.mark.browser
@pytest.mark.slow
def test_worker_rides_out_a_locked_store(tmp_path: Path, shop: Any) -> None:
    """A worker whose intent commit hits a locked database stops that run (a log line, no
    traceback, nothing sent), keeps serving, and once the lock is gone reclaims the run and
    places exactly one order."""
    db = tmp_path / "bw.db"
    [run_id] = enqueue_many(db, "short_order.py", shop, 1, prefix=f"lock-{tmp_path.name[-6:]}")
    received = shop.inflight()["received"]
    log = tmp_path / "worker.log"
    worker = start_worker(
        db,
        "-n",
        "1",
        "--lease-ttl",
        "6",
        log=log,
        env={**FAST_BUSY, "BROWSERWORKER_FAULTS": "before_intent_commit:submit=stop"},
    )
    try:
        wait_stopped(worker)
        with write_lock(db):
            worker.send_signal(signal.SIGCONT)
            deadline = time.monotonic() + 120
            while "store unavailable: stopped this run" not in log.read_text():
                assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            assert shop.inflight()["received"] == received
        deadline = time.monotonic() + 180
        while True:
            store = SQLiteStore(db)
            state = store.get_run(run_id).state
            store.close()
            if state == "SUCCEEDED":
                break
            assert worker.poll() is None and time.monotonic() < deadline, (state, log.read_text())
            time.sleep(0.2)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert worker.returncode == 0
    text = log.read_text()
    assert "Traceback" not in text, text
    assert len(shop.orders(f"{run_id}/submit")) == 1
    assert shop.inflight()["received"] == received + 1
    assert [(a.state, a.decided_by) for a in submit_attempts(db, run_id)] == [("SUCCEEDED", "return")]
    assert integrity(db) == "ok"
