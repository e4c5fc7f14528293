"""A database server that cannot be reached now (restarting, down) is waited for by a starting
worker and ends any command with exit 5 ("store unavailable"), never with the refusal code 2;
a server that answers no (a wrong password, no such database) is still a refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from browserworker.errors import StoreError, StoreUnavailable
from browserworker.store import open_store
from browserworker.store.postgres import connect_failed
from tests.support.bw import BW
from tests.support.tcp_relay import TcpRelay

LOOK_FLOW = """
from browserworker import Flow, StepContext

flow = Flow("look")


@flow.step
async def look(ctx: StepContext) -> None:
    await ctx.page.set_content("<p>looked</p>")
"""


class _Failure(Exception):
    def __init__(self, sqlstate: str | None, text: str = "refused") -> None:
        super().__init__(text)
        self.sqlstate = sqlstate


PASSING = [
    (None, 'connection to server at "127.0.0.1", port 5432 failed: Connection refused'),
    (None, 'connection to server at "127.0.0.1", port 5432 failed: FATAL:  the database system is starting up'),
    (None, "connection failed: FATAL:  the database system is shutting down"),
    (None, "connection failed: FATAL:  sorry, too many clients already"),
    (None, "connection failed: server closed the connection unexpectedly"),
    ("57P03", "starting up"),
    ("53300", "too many connections"),
    ("08006", "connection failure"),
]
REFUSED = [
    (None, 'connection failed: FATAL:  database "nope" does not exist'),
    (None, 'connection failed: FATAL:  password authentication failed for user "bw"'),
    (None, 'connection failed: FATAL:  no pg_hba.conf entry for host "10.0.0.1"'),
    ("28P01", "password authentication failed"),
    ("3D000", "database does not exist"),
]


@pytest.mark.parametrize(("sqlstate", "text"), PASSING)
def test_a_server_that_cannot_serve_now_is_unavailable(sqlstate: str | None, text: str) -> None:
    """No answer at all, "starting up", "shutting down", "too many connections" and a broken
    connection are conditions that pass: :class:`StoreUnavailable`."""
    assert isinstance(connect_failed("db", _Failure(sqlstate, text)), StoreUnavailable)


@pytest.mark.parametrize(("sqlstate", "text"), REFUSED)
def test_a_server_that_answers_no_is_not_waited_for(sqlstate: str | None, text: str) -> None:
    """A wrong password, no such database, no access: a plain :class:`StoreError` (a refusal)."""
    error = connect_failed("db", _Failure(sqlstate, text))
    assert isinstance(error, StoreError) and not isinstance(error, StoreUnavailable)


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


@pytest.fixture
def relay(pg_url: str) -> Iterator[TcpRelay]:
    port = urlsplit(pg_url).port or 5432
    relay = TcpRelay(("127.0.0.1", port))
    relay.cut()  # every connection is reset on arrival: to libpq, a server that is not there
    yield relay
    relay.close()


def test_a_worker_waits_for_a_store_that_is_down_and_then_drains(
    pg_url: str, relay: TcpRelay, bw: BW, tmp_path: Path
) -> None:
    """Started while its database cannot be reached, a worker says it is waiting and tries again;
    once the server answers it serves the queue: the run enqueued meanwhile SUCCEEDED."""
    flow = tmp_path / "look.py"
    flow.write_text(LOOK_FLOW)
    queued = bw.run("enqueue", str(flow), "--db", pg_url, "--run-id", "waited-1")
    assert queued.returncode == 0, queued.stderr
    worker = bw.start("worker", "--once", "--db", _through(pg_url, relay.port), "--wait-for-store", "120")
    assert worker.stderr is not None
    seen = []
    for line in worker.stderr:  # the event: the worker's own words that it waits
        seen.append(line)
        if line.startswith("waiting for the store: cannot connect"):
            break
    else:
        pytest.fail(f"the worker never said it waits: {seen} (exit {worker.wait()})")
    assert worker.poll() is None, "the worker gave up instead of waiting"
    relay.restore()
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, "".join(seen) + err
    shown = bw.run("show", "waited-1", "--db", pg_url, "--json")
    assert json.loads(shown.stdout)["run"]["state"] == "SUCCEEDED", shown.stderr


def test_the_wait_counts_from_the_first_failed_try(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first try slower than the whole wait (a loaded machine, a server slow to refuse) still
    says it waits and tries again, for the wait, before the last failure is raised."""
    from browserworker.store import url

    clock = [0.0]
    tries: list[float] = []

    def slow_failure(*args: object, **kwargs: object) -> None:
        tries.append(clock[0])
        clock[0] += 3.0  # each try takes 3 s: longer than the wait
        raise StoreUnavailable("cannot connect")

    monkeypatch.setattr(url, "open_store", slow_failure)
    monkeypatch.setattr(url.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(url.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    heard: list[float] = []
    with pytest.raises(StoreUnavailable):
        url.open_store_waiting("postgresql://nowhere/x", wait=1.0, on_wait=lambda exc, left: heard.append(left))
    assert heard == [1.0] and tries == [0.0, 3.5], "told it waits, then tried once more after 0.5 s"


def test_a_worker_that_waited_long_enough_exits_5(pg_url: str, relay: TcpRelay, bw: BW) -> None:
    """When ``--wait-for-store`` runs out the worker ends with exit 5 and "store unavailable"
    (the docs' code for a stop without an outcome), not with exit 2 (bad usage)."""
    done = bw.run("worker", "--once", "--db", _through(pg_url, relay.port), "--wait-for-store", "1")
    assert done.returncode == 5, done.stderr
    assert "waiting for the store" in done.stderr
    assert "error: store unavailable" in done.stderr and "cannot connect" in done.stderr
    assert "hunter" not in done.stderr


def test_any_command_meeting_an_unreachable_server_exits_5(pg_url: str, relay: TcpRelay, bw: BW) -> None:
    """``status`` (no waiting) on a server that cannot be reached: exit 5, store unavailable."""
    done = bw.run("status", "--db", _through(pg_url, relay.port))
    assert done.returncode == 5, done.stderr
    assert "store unavailable" in done.stderr


def test_a_wrong_database_is_still_a_refusal(pg_url: str, bw: BW) -> None:
    """A server that answers "no such database" is bad usage: exit 2 at once, no waiting."""
    parts = urlsplit(pg_url)
    missing = urlunsplit(parts._replace(path="/bw_no_such_database"))
    done = bw.run("worker", "--once", "--db", missing, "--wait-for-store", "600", timeout=60)
    assert done.returncode == 2, done.stderr
    assert "waiting for the store" not in done.stderr


def test_the_library_raises_store_unavailable_for_a_server_that_is_not_there(pg_url: str, relay: TcpRelay) -> None:
    """``open_store`` itself tells the passing condition apart, for code that calls it."""
    with pytest.raises(StoreUnavailable, match="cannot connect"):
        open_store(_through(pg_url, relay.port))


def test_worker_help_names_the_wait() -> None:
    """``worker --help`` documents ``--wait-for-store`` and its exit code."""
    done = subprocess.run(
        [sys.executable, "-m", "browserworker", "worker", "--help"], capture_output=True, text=True, check=True
    )
    assert "--wait-for-store" in done.stdout and "exit 5" in done.stdout
