"""`browserworker health`: exit 0 when healthy, 1 with one line per breached rule, 2 on bad options."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from browserworker.cli import main
from browserworker.errors import UsageError
from browserworker.journal import pid_space
from browserworker.ops import HealthRules, check_store
from browserworker.ops._health import parse_duration, parse_growth
from browserworker.states import AttemptState, RunState
from browserworker.store import Owner, Store, open_store
from tests.support.opsdata import dispatched, finish, queued, running, shift, succeed


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "bw.db"


def health(db: Path, *args: str) -> click.testing.Result:
    return CliRunner().invoke(main, ["health", "--db", str(db), *args])


def with_store(db: Path) -> Store:
    return open_store(db)


def test_durations_and_growth_parse() -> None:
    """Durations take s/m/h/d; growth is N/WINDOW; anything else is a usage error."""
    assert (parse_duration("90"), parse_duration("5m"), parse_duration("1.5h")) == (90.0, 300.0, 5400.0)
    assert parse_growth("3/10m") == (3, 600.0)
    for bad in ("5 minutes", "-1s", "m"):
        with pytest.raises(UsageError):
            parse_duration(bad)
    for bad in ("3", "x/10m", "3/0s"):
        with pytest.raises(UsageError):
            parse_growth(bad)


def test_healthy_store_exits_0(db: Path) -> None:
    """Fresh runs, a finished run and a heartbeating worker: exit 0, "healthy"."""
    store = with_store(db)
    queued(store, "q1", age=10)
    succeed(store, running(store, "done"))
    store.register_worker(Owner("w1", "h", 1), ["default"], 1)
    store.close()
    result = health(db)
    assert (result.exit_code, result.output) == (0, "healthy\n")


def test_old_queue_breaches_max_queue_age(db: Path) -> None:
    """A queue whose oldest claimable run waited past --max-queue-age is one line, exit 1; a
    delayed run does not count, and a looser threshold is healthy."""
    store = with_store(db)
    queued(store, "old", age=600)
    queued(store, "later", queue="bulk", age=3000, delay=60)
    store.close()
    result = health(db, "--max-queue-age", "5m")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "max-queue-age: queue default: oldest claimable run waited 10m (max 5m; 1 claimable, 1 queued)"
    ]
    assert health(db, "--max-queue-age", "15m").exit_code == 0


def test_empty_queue_with_growing_unknown_is_unhealthy(db: Path) -> None:
    """Nothing pending, but new unresolved UNKNOWN attempts in the window: unhealthy; once they are
    older than the window, the growth rule is quiet (the count rule still sees them)."""
    store = with_store(db)
    for rid in ("u1", "u2"):
        run = running(store, rid)
        finish(store, dispatched(store, run), run.lease_epoch, AttemptState.UNKNOWN, "exception_after_dispatch")
        store.set_run_state(rid, run.lease_epoch, RunState.NEEDS_REVIEW, error="unknown")
    store.close()
    result = health(db, "--max-unknown-growth", "1/10m")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "max-unknown-growth: queue default: nothing pending, but 2 new unresolved UNKNOWN attempts in the last "
        "10m (max 1)"
    ]
    store = with_store(db)
    shift(store, "attempts", "finished_at", 900, state="UNKNOWN")
    store.close()
    assert health(db, "--max-unknown-growth", "1/10m").exit_code == 0
    result = health(db, "--max-unknown", "1")
    assert result.exit_code == 1 and result.output.startswith(
        "max-unknown: 2 effect attempts UNKNOWN (max 1): f/submit 2"
    )


def test_stale_workers_breach_until_stopped(db: Path) -> None:
    """A worker silent past --stale-after breaches --max-stale-workers; a stopped one does not."""
    store = with_store(db)
    store.register_worker(Owner("w-silent", "h", 11), ["default"], 1)
    store.register_worker(Owner("w-ok", "h", 12), ["default"], 1)
    shift(store, "workers", "last_heartbeat", 300, id="w-silent")
    store.close()
    result = health(db)
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("max-stale-workers: 1 stale workers (max 0): w-silent (h pid 11, last heartbeat 5m ago)")
    assert health(db, "--max-stale-workers", "1").exit_code == 0
    assert health(db, "--stale-after", "10m").exit_code == 0
    store = with_store(db)
    store.mark_worker("w-silent", "stopped")
    store.close()
    assert health(db).exit_code == 0


def test_every_breached_rule_is_its_own_line(db: Path) -> None:
    """Several rules over their thresholds: one line each, in rule order."""
    store = with_store(db)
    queued(store, "old", age=3600)
    run = running(store, "u")
    finish(store, dispatched(store, run), run.lease_epoch, AttemptState.UNKNOWN, "exception_after_dispatch")
    store.register_worker(Owner("w-silent", "h", 11), ["default"], 1)
    shift(store, "workers", "last_heartbeat", 300, id="w-silent")
    store.close()
    result = health(db, "--max-unknown", "0")
    assert result.exit_code == 1
    assert [line.split(":")[0] for line in result.output.splitlines()] == [
        "max-queue-age",
        "max-unknown",
        "max-unknown-growth",
        "max-stale-workers",
    ]
    off = health(
        db,
        "--max-queue-age",
        "off",
        "--max-unknown",
        "off",
        "--max-unknown-growth",
        "off",
        "--max-stale-workers",
        "off",
    )
    assert (off.exit_code, off.output) == (0, "healthy\n")


@pytest.mark.parametrize(
    "args", [("--max-queue-age", "soon"), ("--max-unknown-growth", "3"), ("--max-stale-workers", "many")]
)
def test_bad_options_exit_2(db: Path, args: tuple[str, str]) -> None:
    """A malformed threshold is a one-line usage error (exit 2), checked before the store is opened."""
    result = health(db, *args)
    assert result.exit_code == 2 and "invalid" in result.output and not db.exists()


def test_check_store_library_call(db: Path) -> None:
    """The library call behind the command returns the same breaches."""
    store = with_store(db)
    queued(store, "old", age=700)
    try:
        breaches = check_store(store, HealthRules(max_queue_age=600))
    finally:
        store.close()
    assert [(b.rule, b.subject) for b in breaches] == [("max-queue-age", "default")]


def test_a_crashed_worker_on_this_host_counts_at_once(db: Path) -> None:
    """A worker whose process is gone from this host (not stopped cleanly) breaches the stale-worker
    rule at once, without waiting for its heartbeat to age."""
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    store = with_store(db)
    # registered from this pid space (its start time unknown now: any process at that pid is another)
    store.register_worker(Owner("w-crashed", socket.gethostname(), exited.pid, f"@{pid_space()}"), ["default"], 1)
    store.close()
    result = health(db)
    assert result.exit_code == 1 and f"w-crashed ({socket.gethostname()} pid {exited.pid}, gone" in result.output
