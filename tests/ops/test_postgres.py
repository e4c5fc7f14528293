"""The CLI and the maintenance commands on a PostgreSQL store: ``--db-schema``, ``migrate``,
the read commands, ``check-db``, ``backup`` and ``restore`` (a real PostgreSQL per test)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from browserworker.cli import main
from browserworker.errors import LeaseLost, StoreError, UsageError
from browserworker.ops import _backup_postgres as backup_postgres
from browserworker.ops import backup, restore
from browserworker.ops._backup import DatabaseInUse
from browserworker.states import RunState
from browserworker.store import Owner, open_store
from browserworker.store.postgres import SCHEMA_VERSION
from browserworker.store.postgres import _restore as postgres_restore
from browserworker.store.url import store_exists
from tests.support.opsdata import WRITER, queued, running, shift, succeed
from tests.support.paths import TEST_FLOWS
from tests.support.pg import PgServer, database_url

FLOW = str(TEST_FLOWS / "short_order.py")
GONE = Owner("worker-gone", "some-other-host", 99)


@pytest.fixture
def cli() -> Iterator[Any]:
    """``cli(*args)``: the command's Result (in this process; no schema from the environment)."""
    runner = CliRunner(env={"BROWSERWORKER_DB": None, "BROWSERWORKER_DB_SCHEMA": None})

    def invoke(*args: str) -> Result:
        return runner.invoke(main, list(args))

    yield invoke


def all_schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}


def schemas(url: str) -> set[str]:
    """The schemas of stores in ``url``'s database (not PostgreSQL's own)."""
    return {s for s in all_schemas(url) if s.startswith(("browserworker", "other"))}


def sql(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def enqueue(cli: Any, url: str, run_id: str, *extra: str) -> None:
    done = cli(
        "enqueue",
        FLOW,
        "--db",
        url,
        "--input",
        "base_url=http://127.0.0.1:9",
        "--input",
        "item=x",
        "--run-id",
        run_id,
        *extra,
    )
    assert done.exit_code == 0, done.output


def test_migrate_creates_a_schema_and_is_idempotent(cli: Any, pg_url: str, tmp_path: Path) -> None:
    """``migrate`` creates a missing schema and reports 0 -> the current version; run again it
    changes nothing and reports the version before and after; a SQLite path works the same."""
    first = cli("migrate", "--db", pg_url, "--db-schema", "other", "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.output) == {
        "store": f"{pg_url} (schema other)",
        "dialect": "postgresql",
        "before": 0,
        "after": SCHEMA_VERSION,
        "supported": SCHEMA_VERSION,
        "created": True,
    }
    again = cli("migrate", "--db", pg_url, "--db-schema", "other")
    assert again.exit_code == 0
    assert again.output.strip() == (
        f"up to date: {pg_url} (schema other) (postgresql): schema version "
        f"{SCHEMA_VERSION} -> {SCHEMA_VERSION} (this browserworker: {SCHEMA_VERSION})"
    )
    assert "other" in schemas(pg_url)
    db = tmp_path / "bw.db"
    made, kept = cli("migrate", "--db", str(db), "--json"), cli("migrate", "--db", str(db), "--json")
    assert json.loads(made.output)["created"] and json.loads(made.output)["dialect"] == "sqlite"
    assert json.loads(kept.output)["before"] == json.loads(kept.output)["after"] == json.loads(made.output)["after"]


@pytest.mark.parametrize(
    "command", [["runs"], ["show", "r1"], ["status"], ["metrics"], ["health"], ["review"], ["check-db"]]
)
def test_read_commands_refuse_a_missing_schema_and_create_nothing(cli: Any, pg_url: str, command: list[str]) -> None:
    """A read-only command against a database without the store's schema says "no browserworker
    store in ..." (exit 2) and creates nothing."""
    done = cli(*command, "--db", pg_url, "--db-schema", "nothing_here")
    assert done.exit_code == 2, done.output
    assert "no browserworker store in" in done.output and "(schema nothing_here)" in done.output
    assert "nothing_here" not in all_schemas(pg_url)


def test_the_read_commands_work_on_postgres_and_schemas_are_separate_stores(cli: Any, pg_url: str) -> None:
    """Runs enqueued through the CLI are listed by ``runs``, ``show``, ``status`` and ``metrics``
    of the same --db; another --db-schema in the same database is a store of its own."""
    enqueue(cli, pg_url, "r1")
    enqueue(cli, pg_url, "o1", "--db-schema", "other")
    listed = cli("runs", "--db", pg_url, "--json")
    assert [r["id"] for r in json.loads(listed.output)] == ["r1"]
    other = cli("runs", "--db", pg_url, "--db-schema", "other", "--json")
    assert [r["id"] for r in json.loads(other.output)] == ["o1"]
    status = json.loads(cli("status", "--db", pg_url, "--json").output)
    assert status["states"] == {"QUEUED": 1} and [q["name"] for q in status["queues"]] == ["default"]
    assert json.loads(cli("show", "r1", "--db", pg_url, "--json").output)["run"]["state"] == "QUEUED"
    missing = cli("show", "o1", "--db", pg_url)
    assert missing.exit_code == 2 and f"no run 'o1' in {pg_url} (schema browserworker)" in missing.output
    metrics = cli("metrics", "--db", pg_url, "--db-schema", "other")
    assert metrics.exit_code == 0 and 'browserworker_runs{queue="default",state="QUEUED"} 1.0' in metrics.output
    assert cli("health", "--db", pg_url).exit_code == 0


def test_a_store_exists_once_its_schema_does(pg_url: str) -> None:
    """``store_exists`` (what ``run --run-id`` asks before it validates inputs) looks for the
    schema, and creates nothing."""
    assert store_exists(pg_url) and not store_exists(pg_url, schema="other")
    assert "other" not in all_schemas(pg_url)
    open_store(pg_url, schema="other").close()
    assert store_exists(pg_url, schema="other")


def test_run_with_a_run_id_checks_its_inputs_when_the_schema_is_missing(cli: Any, pg_url: str) -> None:
    """``run --run-id`` against a PostgreSQL database without the store's schema is a new run:
    its inputs are checked first, so bad inputs are refused (exit 2) and nothing is created."""
    done = cli("run", FLOW, "--run-id", "r1", "--db", pg_url, "--db-schema", "fresh", "--input", "item=x")
    assert done.exit_code == 2 and "base_url" in done.output, done.output
    assert "fresh" not in all_schemas(pg_url)


def test_db_schema_is_refused_with_a_sqlite_path_unless_it_comes_from_the_environment(tmp_path: Path) -> None:
    """``--db-schema`` on the command line with a SQLite --db is a usage error (exit 2, nothing
    created); the same name from $BROWSERWORKER_DB_SCHEMA is ignored for a SQLite file."""
    db = tmp_path / "bw.db"
    refused = CliRunner().invoke(main, ["migrate", "--db", str(db), "--db-schema", "other"])
    assert refused.exit_code == 2 and "--db-schema is for a PostgreSQL --db" in refused.output
    assert not db.exists()
    done = CliRunner(env={"BROWSERWORKER_DB_SCHEMA": "other"}).invoke(main, ["migrate", "--db", str(db)])
    assert done.exit_code == 0 and db.exists()


def test_check_db_on_postgres_passes_then_names_a_broken_rule(cli: Any, pg_url: str) -> None:
    """check-db of a consistent store: exit 0, integrity ok, the schema version; with amcheck
    installed the indexes are checked too. A RUNNING run whose owner was wiped: exit 1 naming
    the rule and the run."""
    store = open_store(pg_url)
    running(store, "r1")
    store.close()
    ok = cli("check-db", "--db", pg_url, "--json")
    report = json.loads(ok.output)
    assert ok.exit_code == 0 and report["ok"] and report["integrity"] == "ok"
    assert report["schema_version"] == SCHEMA_VERSION and report["runs"] == {"RUNNING": 1}
    assert report["dialect"] == "postgresql" and any("amcheck" in n for n in report["notes"])
    sql(pg_url, "CREATE EXTENSION IF NOT EXISTS amcheck")
    checked = json.loads(cli("check-db", "--db", pg_url, "--json").output)
    assert checked["ok"] and not checked["notes"]
    sql(pg_url, "UPDATE browserworker.runs SET owner = NULL WHERE id = 'r1'")
    broken = cli("check-db", "--db", pg_url)
    assert broken.exit_code == 1
    assert "problem: runs LEASED or RUNNING without an owner or a lease expiry: r1" in broken.output


def make_backup(pg_url: str, dest: Path) -> None:
    """A store with a run of every kind (one leased by a worker gone silent long ago), and its backup."""
    store = open_store(pg_url)
    queued(store, "queued")
    running(store, "leased", owner=GONE)
    shift(store, "runs", "lease_expires_at", 3600, id="leased")
    succeed(store, running(store, "done"))
    review = running(store, "review")
    store.set_run_state("review", review.lease_epoch, RunState.NEEDS_REVIEW, error="unknown")
    store.register_worker(GONE, ["default"], 1)
    shift(store, "workers", "last_heartbeat", 3600, id="worker-gone")
    store.close()
    report = backup(pg_url, dest)
    assert report.runs == {"NEEDS_REVIEW": 1, "QUEUED": 1, "RUNNING": 1, "SUCCEEDED": 1} and report.bytes > 0


def test_backup_then_restore_brings_back_the_backup_and_fences_it(cli: Any, pg_url: str, tmp_path: Path) -> None:
    """backup -> more runs -> restore: the store holds the backup's runs (not the later one), the
    run leased in the backup is QUEUED at a new epoch and flagged for reconciliation (its old
    owner's writes are refused), unfinished runs carry a `restored` event, the registry's workers
    are stopped, and the replaced schema is kept under another name with the later run."""
    dest = tmp_path / "bw.dump"
    make_backup(pg_url, dest)
    again = cli("backup", str(dest), "--db", pg_url)
    assert again.exit_code == 2 and "exists" in again.output  # a backup never overwrites
    store = open_store(pg_url)
    before = store.get_run("leased")
    store.close()
    enqueue(cli, pg_url, "after-backup")
    done = cli("restore", str(dest), "--db", pg_url, "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["requeued"] == ["leased"] and report["flagged"] == 3 and report["dialect"] == "postgresql"
    previous = report["previous"]
    assert previous.startswith("browserworker_before_restore_") and previous in schemas(pg_url)
    store = open_store(pg_url)
    try:
        leased = store.get_run("leased")
        assert (
            leased.state == RunState.QUEUED and leased.needs_reconcile and leased.lease_epoch == before.lease_epoch + 1
        )
        with pytest.raises(LeaseLost):
            store.heartbeat("leased", before.lease_epoch, 30)
        assert store.get_run("after-backup") is None and store.get_run("done").state == RunState.SUCCEEDED
        assert [len([e for e in store.events(r) if e.kind == "restored"]) for r in ("queued", "review", "done")] == [
            1,
            1,
            0,
        ]
        assert {w.health for w in store.workers()} == {"stopped"}
    finally:
        store.close()
    kept = open_store(pg_url, schema=previous, create=False)
    try:
        assert kept.get_run("after-backup").state == RunState.QUEUED  # type: ignore[union-attr]
    finally:
        kept.close()
    assert cli("check-db", "--db", pg_url).exit_code == 0


def test_restore_is_refused_while_the_store_is_in_use(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Restore refuses, touching nothing, while a session of the store is connected (a process
    has it open), while the registry shows a live worker on another host, or while a live
    process on this host holds a lease; once none is left it goes through."""
    monkeypatch.setattr(postgres_restore, "_CLOSING", 0.2)
    dest = tmp_path / "bw.dump"
    make_backup(pg_url, dest)
    holder = open_store(pg_url)
    queued(holder, "after-backup")
    with pytest.raises(DatabaseInUse, match="sessions of the store are connected"):
        restore(dest, pg_url)
    holder.register_worker(Owner("worker-remote", "some-other-host", 5), ["default"], 2)
    running(holder, "mine", owner=Owner("run-alive", socket.gethostname(), os.getpid()))
    holder.close()
    with pytest.raises(DatabaseInUse) as refused:
        restore(dest, pg_url)
    assert "worker worker-remote (pid 5 on some-other-host) heartbeated" in str(refused.value)
    assert "run mine is leased by run-alive" in str(refused.value)
    assert not any("before_restore" in s for s in schemas(pg_url))
    store = open_store(pg_url)
    assert store.get_run("after-backup").state == RunState.QUEUED  # type: ignore[union-attr]
    shift(store, "workers", "last_heartbeat", 120, id="worker-remote")
    shift(store, "runs", "lease_expires_at", 3600, id="mine")
    store.close()
    assert restore(dest, pg_url).requeued == ["leased"]


def test_a_failed_restore_puts_the_previous_schema_back(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore that fails after the current schema was set aside (here: the fence) drops what
    it loaded and renames the previous schema back: the store is as it was."""
    dest = tmp_path / "bw.dump"
    make_backup(pg_url, dest)
    store = open_store(pg_url)
    queued(store, "after-backup")
    store.close()

    def broken_fence(url: str, schema: str) -> None:
        raise StoreError("the fence failed")

    monkeypatch.setattr(backup_postgres, "_fence", broken_fence)
    with pytest.raises(StoreError, match="the fence failed"):
        restore(dest, pg_url)
    assert schemas(pg_url) == {"browserworker"}
    store = open_store(pg_url)
    try:
        assert store.get_run("after-backup").state == RunState.QUEUED  # type: ignore[union-attr]
    finally:
        store.close()


def test_restore_refuses_what_is_not_a_backup_of_this_store(pg_url: str, tmp_path: Path) -> None:
    """A file that is not a pg_dump, a SQLite database, a backup of another schema, or a
    PostgreSQL backup given to a SQLite --db are refused with what to do instead."""
    junk = tmp_path / "junk.dump"
    junk.write_bytes(b"not a dump" * 100)
    with pytest.raises(UsageError, match="not a backup of a PostgreSQL store"):
        restore(junk, pg_url)
    lite = tmp_path / "bw.db"
    open_store(lite).close()
    with pytest.raises(UsageError, match=r"SQLite database \(restore it with --db PATH\)"):
        restore(lite, pg_url)
    dest = tmp_path / "bw.dump"
    make_backup(pg_url, dest)
    with pytest.raises(UsageError, match="restore it with --db-schema browserworker"):
        restore(dest, pg_url, schema="other")
    with pytest.raises(UsageError, match="backup of a PostgreSQL store: restore it with --db postgresql://"):
        restore(dest, tmp_path / "target.db")


def count(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute(query).fetchone()[0])


def wait_for_runs(url: str, n: int, timeout: float = 30.0) -> None:
    """Poll until the store at ``url`` holds at least ``n`` runs."""
    deadline = time.monotonic() + timeout
    while count(url, "SELECT COUNT(*) FROM browserworker.runs") < n:
        assert time.monotonic() < deadline, f"fewer than {n} runs after {timeout}s"


def test_a_backup_taken_while_another_process_writes_is_one_snapshot(
    pg_url: str, pg_server: PgServer, tmp_path: Path
) -> None:
    """A backup taken while another process keeps enqueueing reports the runs it holds: restored
    into an empty database it has exactly those, each with its run_created event; the writer
    is not stopped by it."""
    dest, stop = tmp_path / "bw.dump", tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, pg_url, str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        wait_for_runs(pg_url, 30)
        report = backup(pg_url, dest)
        taken = report.runs["QUEUED"]
        wait_for_runs(pg_url, taken + 20)
    finally:
        stop.touch()
        assert writer.wait(timeout=30) == 0
    name = pg_server.create(prefix="bw_pgcli")
    try:
        empty = database_url(name)
        restored = restore(dest, empty)
        assert restored.previous is None and restored.runs == {"QUEUED": taken} and taken >= 30
        assert count(empty, "SELECT COUNT(*) FROM browserworker.events WHERE kind = 'run_created'") == taken
    finally:
        pg_server.drop(name)


def test_review_resolve_and_cancel_work_on_postgres(cli: Any, pg_url: str) -> None:
    """A run whose effect is in doubt (NEEDS_REVIEW on PostgreSQL) is listed by ``review``;
    ``resolve --done`` journals the decision with who made it and requeues the run; ``cancel``
    ends a queued run at once and asks a leased one to stop."""
    from browserworker.states import AttemptState

    store = open_store(pg_url)
    try:
        run = running(store, "doubt", owner=GONE)
        attempt = store.begin_attempt(run.id, run.lease_epoch, "submit", "effect", "doubt/submit", "fp")
        store.mark_dispatched(attempt, run.lease_epoch, "POST", "http://127.0.0.1:1/orders")
        store.finish_attempt(attempt, run.lease_epoch, AttemptState.UNKNOWN, decided_by="recovery:dispatched")
        store.set_run_state(run.id, run.lease_epoch, RunState.NEEDS_REVIEW, error="in doubt")
        queued(store, "waiting")
        leased = running(store, "busy", owner=GONE)
    finally:
        store.close()
    review = cli("review", "--db", pg_url, "--json")
    assert review.exit_code == 0, review.output
    assert [(r["run_id"], r["step_id"]) for r in json.loads(review.output)] == [("doubt", "submit")]
    done = cli("resolve", "doubt", "submit", "--done", "--result", '{"order_id": "7"}', "--db", pg_url, "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["state"] == "QUEUED"
    shown = json.loads(cli("show", "doubt", "--db", pg_url, "--json").output)
    [submit] = [a for a in shown["journal"] if a["step_id"] == "submit"]
    assert submit["state"] == "SUCCEEDED" and submit["result"] == {"order_id": "7"}
    assert submit["decided_by"].startswith("human:")  # who decided
    assert cli("cancel", "waiting", "--db", pg_url).exit_code == 0
    assert cli("cancel", "busy", "--db", pg_url).exit_code == 0
    store = open_store(pg_url)
    try:
        assert store.get_run("waiting").state is RunState.CANCELLED  # type: ignore[union-attr]
        busy = store.get_run("busy")
        assert busy is not None and busy.cancel_requested and busy.lease_epoch == leased.lease_epoch
    finally:
        store.close()
