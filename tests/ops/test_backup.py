"""Backup (online, consistent), restore (refused while in use; fences the restored leases) and check-db."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from browserworker.cli import main
from browserworker.errors import LeaseLost, UsageError
from browserworker.journal import pid_space
from browserworker.ops import backup, check_db, restore
from browserworker.ops._backup import DatabaseInUse
from browserworker.states import RunState
from browserworker.store import SCHEMA_VERSION, Owner, SQLiteStore
from browserworker.store.sqlite._files import checkpoint
from tests.support.opsdata import WRITER, queued, running, shift, succeed

pytestmark = pytest.mark.sqlite_dialect  # backups are copies of a SQLite file

HOLDER = """
import sys, time
from browserworker.store import SQLiteStore
store = SQLiteStore(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
"""


def count(db: Path, sql: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def wait_for(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)


def test_backup_is_a_consistent_copy_while_another_process_writes(tmp_path: Path) -> None:
    """A backup taken while another process keeps enqueueing is one snapshot (every run has its
    run_created event and no event lacks its run), passes its integrity check, is one file, and the
    writer is not stopped by it."""
    db, dest, stop = tmp_path / "bw.db", tmp_path / "copy.db", tmp_path / "stop"
    SQLiteStore(db).close()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        wait_for(lambda: count(db, "SELECT COUNT(*) FROM runs") >= 50)
        report = backup(db, dest)
        copied = count(dest, "SELECT COUNT(*) FROM runs")
        wait_for(lambda: count(db, "SELECT COUNT(*) FROM runs") >= copied + 20)
    finally:
        stop.touch()
        assert writer.wait(timeout=30) == 0
    assert report.integrity == "ok" and report.runs == {"QUEUED": copied} and copied >= 50
    assert count(dest, "SELECT COUNT(*) FROM events WHERE kind = 'run_created'") == copied
    assert count(dest, "SELECT COUNT(*) FROM events WHERE run_id NOT IN (SELECT id FROM runs)") == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("copy")) == ["copy.db"]
    assert check_db(dest).journal_mode == "delete" and check_db(dest).ok


def test_backup_never_overwrites(tmp_path: Path) -> None:
    """An existing destination is refused and left as it was."""
    db, dest = tmp_path / "bw.db", tmp_path / "copy.db"
    SQLiteStore(db).close()
    dest.write_text("keep me")
    with pytest.raises(UsageError, match="exists"):
        backup(db, dest)
    assert dest.read_text() == "keep me"


def make_backup(tmp_path: Path) -> tuple[Path, Path]:
    """A database with a run of every kind, and its backup."""
    db = tmp_path / "bw.db"
    store = SQLiteStore(db)
    queued(store, "queued")
    running(store, "leased", owner=Owner("worker-gone", "some-other-host", 99))
    shift(store, "runs", "lease_expires_at", 3600, id="leased")  # its owner went silent long ago
    succeed(store, running(store, "done"))
    review = running(store, "review")
    store.set_run_state("review", review.lease_epoch, RunState.NEEDS_REVIEW, error="unknown")
    store.register_worker(Owner("worker-gone", "some-other-host", 99), ["default"], 1)
    shift(store, "workers", "last_heartbeat", 3600, id="worker-gone")
    store.close()
    dest = tmp_path / "backup.db"
    backup(db, dest)
    return db, dest


def test_restore_refused_while_another_process_has_the_database_open(tmp_path: Path) -> None:
    """Restore takes an exclusive lock: a process holding the database open (a worker, a run, a
    metrics server) makes it refuse, and the database is left untouched."""
    db, dest = make_backup(tmp_path)
    store = SQLiteStore(db)
    queued(store, "after-backup")
    store.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(DatabaseInUse, match="another process has it open"):
            restore(dest, db)
    finally:
        holder.communicate(timeout=30)
    assert count(db, "SELECT COUNT(*) FROM runs WHERE id = 'after-backup'") == 1
    restore(dest, db)  # the holder is gone: now it goes through
    assert count(db, "SELECT COUNT(*) FROM runs WHERE id = 'after-backup'") == 0


def test_restore_refused_while_the_registry_shows_a_live_worker(tmp_path: Path) -> None:
    """A worker that heartbeated recently on another host (its lock invisible here) makes restore
    refuse; once its heartbeat is old, restore goes through."""
    db, dest = make_backup(tmp_path)
    store = SQLiteStore(db)
    store.register_worker(Owner("worker-remote", "some-other-host", 5), ["default"], 2)
    store.close()
    with pytest.raises(DatabaseInUse, match=r"worker worker-remote \(pid 5 on some-other-host\) heartbeated"):
        restore(dest, db)
    store = SQLiteStore(db)
    shift(store, "workers", "last_heartbeat", 120, id="worker-remote")
    store.close()
    restore(dest, db)


def test_restore_refused_while_a_live_owner_holds_a_lease(tmp_path: Path) -> None:
    """An unexpired lease whose owner process is alive on this host makes restore refuse; the same
    lease held by a dead process does not."""
    db, dest = make_backup(tmp_path)
    store = SQLiteStore(db)
    host = socket.gethostname()
    running(store, "mine", owner=Owner("run-alive", host, os.getpid()))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    running(store, "orphan", owner=Owner("run-dead", host, dead.pid, f"@{pid_space()}"))
    store.close()
    with pytest.raises(DatabaseInUse) as refused:
        restore(dest, db)
    assert "run mine is leased by run-alive" in str(refused.value) and "orphan" not in str(refused.value)


def test_restore_hands_back_leases_fences_old_owners_and_keeps_the_old_database(tmp_path: Path) -> None:
    """After a restore: the leased run is QUEUED at a new epoch (its old owner's writes are refused),
    every unfinished run carries a `restored` event, finished runs are untouched, the registry's
    workers are stopped, and the replaced database is kept beside it."""
    db, dest = make_backup(tmp_path)
    store = SQLiteStore(db)
    before = store.get_run("leased")
    queued(store, "after-backup")
    store.close()
    report = restore(dest, db)
    assert report.requeued == ["leased"] and report.flagged == 3
    assert report.previous is not None and Path(report.previous).parent == db.parent  # kept beside it
    assert Path(report.previous).name.startswith(f"{db.name}.pre-restore-")
    store = SQLiteStore(db)
    try:
        leased = store.get_run("leased")
        assert leased.state == RunState.QUEUED and leased.lease_epoch == before.lease_epoch + 1
        assert leased.needs_reconcile and leased.owner is None
        with pytest.raises(LeaseLost):
            store.heartbeat("leased", before.lease_epoch, 30)
        restored = {
            r: [e for e in store.events(r) if e.kind == "restored"] for r in ("queued", "leased", "review", "done")
        }
        assert {r: len(v) for r, v in restored.items()} == {"queued": 1, "leased": 1, "review": 1, "done": 0}
        assert restored["leased"][0].from_state == "RUNNING" and restored["leased"][0].to_state == "QUEUED"
        assert store.get_run("review").state == RunState.NEEDS_REVIEW
        assert store.get_run("after-backup") is None
        assert {w.health for w in store.workers()} == {"stopped"}
    finally:
        store.close()
    kept = SQLiteStore(Path(report.previous))
    try:
        assert kept.get_run("after-backup").state == RunState.QUEUED  # type: ignore[union-attr]
    finally:
        kept.close()
    assert check_db(db).ok and check_db(db).journal_mode == "wal"


def test_restore_rejects_what_is_not_a_good_backup(tmp_path: Path) -> None:
    """A file that is not a browserworker database, or is from a newer browserworker, is refused."""
    db = tmp_path / "bw.db"
    SQLiteStore(db).close()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(UsageError, match="not a browserworker database"):
        restore(junk, db)
    newer = tmp_path / "newer.db"
    SQLiteStore(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(UsageError, match="newer than this browserworker"):
        restore(newer, db)


def test_cli_backup_restore_check_db(tmp_path: Path) -> None:
    """The commands: backup prints the copy, restore prints what it did, check-db reports integrity and
    schema version (exit 0), and errors are one line with exit 2."""
    db, _ = make_backup(tmp_path)
    runner = CliRunner()
    out = runner.invoke(main, ["backup", str(tmp_path / "b2.db"), "--db", str(db)])
    assert (
        out.exit_code == 0 and out.output.startswith(f"backup {tmp_path / 'b2.db'}:") and "integrity ok" in out.output
    )
    again = runner.invoke(main, ["backup", str(tmp_path / "b2.db"), "--db", str(db)])
    assert again.exit_code == 2 and len(again.output.strip().splitlines()) == 1
    out = runner.invoke(main, ["restore", str(tmp_path / "b2.db"), "--db", str(db)])
    assert out.exit_code == 0 and "3 unfinished runs will reconcile" in out.output
    out = runner.invoke(main, ["check-db", "--db", str(db)])
    assert out.exit_code == 0
    assert f"integrity ok; schema version {SCHEMA_VERSION} (this browserworker: {SCHEMA_VERSION})" in out.output
    assert runner.invoke(main, ["check-db", "--db", str(tmp_path / "missing.db")]).exit_code == 2


def test_check_db_finds_corruption(tmp_path: Path) -> None:
    """A damaged page makes check-db exit 1 naming the problem."""
    db = tmp_path / "bw.db"
    store = SQLiteStore(db)
    for i in range(300):
        queued(store, f"r{i:04d}")
    checkpoint(store.connector)
    store.close()
    data = bytearray(db.read_bytes())
    page = 4096
    for offset in range(3 * page, 6 * page):  # scribble over some b-tree pages
        data[offset] = 0x5A
    db.write_bytes(bytes(data))
    out = CliRunner().invoke(main, ["check-db", "--db", str(db)])
    assert out.exit_code == 1 and "problem:" in out.output
