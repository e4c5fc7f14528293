"""Self-tests of tests/support/hosts.py: the own PostgreSQL cluster, the cuttable relay, and simulated hosts."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from browserworker.store import open_store
from tests.support.fleet import duplicate_references, enqueue_many, states
from tests.support.hosts import Host, PgCluster, TcpRelay, survivors, wait_for

pytestmark = pytest.mark.hosts

HostFactory = Callable[..., Host]


def connect(url: str, timeout: int = 5) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, connect_timeout=timeout)


def test_a_relay_cut_resets_open_connections_and_refuses_new_ones_until_restored(
    own_postgres: PgCluster, own_database: str, pg_relay: TcpRelay
) -> None:
    """Through the relay a query runs; cut() makes the open connection's next query raise
    OperationalError and a new connection fail; after restore() a new connection works."""
    url = own_postgres.url(own_database, port=pg_relay.port)
    conn = connect(url)
    assert conn.execute("SELECT current_database()").fetchone() == (own_database,)
    assert (pg_relay.connections, pg_relay.open_connections) == (1, 1)
    pg_relay.cut()
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    conn.close()
    with pytest.raises(psycopg.OperationalError):
        connect(url)
    assert (pg_relay.cuts, pg_relay.refused, pg_relay.open_connections) == (1, 1, 0)
    pg_relay.restore()
    with connect(url) as again:
        assert again.execute("SELECT 2").fetchone() == (2,)
    assert pg_relay.connections == 2


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def test_a_blackhole_holds_queries_and_new_connections_until_restored(
    own_postgres: PgCluster, own_database: str, pg_relay: TcpRelay
) -> None:
    """While blackholed, a query on an open connection and a new connection get no answer (no error
    either, as behind a partition); after restore() both complete."""
    url = own_postgres.url(own_database, port=pg_relay.port)
    conn = connect(url)
    pg_relay.cut("blackhole")
    query, answer = _in_thread(lambda: conn.execute("SELECT 41 + 1").fetchone())
    fresh, fresh_answer = _in_thread(lambda: connect(url, timeout=30).execute("SELECT 7").fetchone())
    query.join(0.5)
    assert query.is_alive() and fresh.is_alive(), "the blackhole answered"
    pg_relay.restore()
    query.join(10)
    fresh.join(10)
    assert (answer, fresh_answer) == ([(42,)], [(7,)])
    conn.close()


@pytest.mark.parametrize("mode", ["immediate", "fast"])
def test_a_restart_keeps_committed_data_and_the_port(own_postgres: PgCluster, own_database: str, mode: str) -> None:
    """Rows committed before a crash (immediate) or a clean stop (fast) are there after the restart,
    on the same port; a connection from before the restart is broken."""
    url, port = own_postgres.url(own_database), own_postgres.port
    with connect(url) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept SELECT generate_series(1, 1000)")
    before = connect(url)
    seconds = own_postgres.restart(mode)
    print(f"restart({mode}): {seconds:.2f}s", file=sys.stderr)
    assert own_postgres.port == port
    with pytest.raises(psycopg.OperationalError):
        before.execute("SELECT 1")
    before.close()
    with connect(url) as conn:
        assert conn.execute("SELECT count(*), sum(n) FROM kept").fetchone() == (1000, 500500)


def test_stop_refuses_connections_until_start(own_postgres: PgCluster) -> None:
    """A stopped cluster refuses connections and reports not running; start() brings it back."""
    own_postgres.stop("fast")
    try:
        assert not own_postgres.running
        with pytest.raises(psycopg.OperationalError):
            connect(own_postgres.url(), timeout=2)
    finally:
        own_postgres.start()
    assert own_postgres.running
    with connect(own_postgres.url()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


SHOW_ME = [sys.executable, "-c", "import os, socket; print(socket.gethostname(), os.getpid(), flush=True)"]


def test_two_hosts_have_their_own_names_and_the_same_small_pids(make_host: HostFactory) -> None:
    """Each host sees its own host name and is pid 1 of its own namespace: the same command in two
    hosts gets the same small pid, while the pids seen from outside differ; the machine's name stays."""
    machine = socket.gethostname()
    hosts = [make_host(name, "sh", "-c", 'echo "$$"; exec "$@"', "sh", *SHOW_ME) for name in ("alpha", "beta")]
    assert [h.wait(10) for h in hosts] == [0, 0]
    seen = [h.stdout_path.read_text().split() for h in hosts]
    assert [s[0] for s in seen] == ["1", "1"], seen  # the shell, $$ inside
    assert [s[1] for s in seen] == ["alpha", "beta"]
    assert seen[0][2] == seen[1][2] and int(seen[0][2]) < 10, seen  # python: the same small pid in both
    assert hosts[0].init_pid != hosts[1].init_pid
    assert socket.gethostname() == machine


def _sleepers(make_host: HostFactory, name: str) -> Host:
    """A host with a tree: two children, an orphan (reparented to the host's pid 1) and a setsid'd one."""
    host = make_host(name, "sh", "-c", "sleep 300 & sleep 300 & (sleep 300 &); setsid sleep 300 & wait")
    wait_for(lambda: len(host.pids()) >= 5, 10, "the host's processes started")
    return host


def test_kill_leaves_no_process_of_the_host(make_host: HostFactory) -> None:
    """kill() ends every process of the host, orphans and other sessions included, and reaps the wrapper."""
    host = _sleepers(make_host, "doomed")
    procs = host.processes()
    assert procs[0].pid == host.init_pid and host.inner_pid(host.init_pid) == 1
    bystander = _sleepers(make_host, "bystander")
    host.kill()
    assert not host.alive and host.pids() == []
    assert survivors(procs) == []
    assert bystander.alive and len(bystander.pids()) >= 5  # only that host died


def _counter(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except FileNotFoundError:
        return 0


def test_stop_freezes_the_whole_host_and_cont_resumes_it(make_host: HostFactory, tmp_path: Path) -> None:
    """A host whose counting loop is a child of its pid 1 (forking a sleep and an mv per tick) stops
    counting while stopped, every process of it stopped, and counts on after cont()."""
    counter = tmp_path / "counter"
    loop = f"i=0; while :; do i=$((i+1)); echo $i > {counter}.tmp; mv {counter}.tmp {counter}; sleep 0.01; done"
    host = make_host("ticker", "sh", "-c", f"({loop}) & wait")
    wait_for(lambda: _counter(counter) >= 3, 10, "the host counts")
    host.stop()
    assert host.stopped
    frozen = _counter(counter)
    time.sleep(0.3)  # a negative: nothing may happen in this window
    assert _counter(counter) == frozen and host.stopped
    host.cont()
    wait_for(lambda: _counter(counter) >= frozen + 3, 10, "the host counts again")
    assert not host.stopped


@pytest.mark.browser
@pytest.mark.slow
def test_a_worker_runs_chromium_inside_a_host_and_registers_under_its_name(
    make_host: HostFactory, tmp_path: Path, shop: Any
) -> None:
    """A browserworker worker (Chromium included) works inside a Host: it drains its runs, and the
    worker registry names the host and the pid the worker has inside it (1), not the machine's."""
    db = tmp_path / "bw.db"
    ids = enqueue_many(db, "short_order.py", shop, 3, prefix=f"inhost-{tmp_path.name[-6:]}")
    host = make_host(
        "worker-host",
        sys.executable,
        "-m",
        "browserworker",
        "--log-level",
        "info",
        "worker",
        "--db",
        str(db),
        "-n",
        "2",
        "--once",
    )
    assert host.wait(180) == 0, host.output()
    assert states(db)["SUCCEEDED"] == len(ids)
    assert duplicate_references(shop) == {}
    store = open_store(db)
    try:
        assert [(w.host, w.pid) for w in store.workers()] == [("worker-host", 1)]
    finally:
        store.close()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.browser
@pytest.mark.slow
def test_kill_takes_chromium_with_the_host_and_terminate_stops_a_worker_gracefully(
    make_host: HostFactory, tmp_path: Path, shop: Any
) -> None:
    """Two hosts each running a run with Chromium open: kill() leaves no process of its host (Chromium
    and the driver included); terminate() reaches the other worker although it is its host's pid 1,
    and it exits 0."""
    db = tmp_path / "bw.db"
    enqueue_many(db, "slow_steps.py", shop, 2, prefix=f"inhost-kill-{tmp_path.name[-6:]}")
    worker = [sys.executable, "-m", "browserworker", "worker", "--db", str(db), "-n", "1", "--lease-ttl", "120"]
    doomed, graceful = make_host("doomed", *worker), make_host("graceful", *worker)
    wait_for(lambda: states(db)["RUNNING"] == 2, 120, "both runs running")
    tree = doomed.processes()
    assert any("chrom" in _comm(p.pid) for p in tree), [_comm(p.pid) for p in tree]
    doomed.kill()
    assert survivors(tree) == []
    graceful.terminate()
    assert graceful.wait(60) == 0, graceful.output()
    assert graceful.pids() == []


def test_killing_a_host_that_ended_spares_the_host_that_reuses_its_namespace_number(make_host: HostFactory) -> None:
    """The kernel reuses a freed pid namespace's number (pid:[INODE]) for a later namespace: kill(),
    stop() and pids() of a host that already ended touch nothing, in particular not a newer host
    whose namespace got the same number (forced here, as it happens when the kernel recycles it)."""
    ended = make_host("ended", "true")
    assert ended.wait(10) == 0
    newer = _sleepers(make_host, "newer")
    ended.ns = newer.ns  # the reuse, made certain
    assert ended.pids() == [] and not ended.alive
    ended.kill()
    ended.stop()
    assert newer.alive and not newer.stopped and len(newer.pids()) >= 5


@pytest.mark.browser
@pytest.mark.slow
def test_two_hosts_drain_a_postgres_store_through_the_relay_both_as_pid_1(
    make_host: HostFactory, own_postgres: PgCluster, own_database: str, pg_relay: TcpRelay, shop: Any, tmp_path: Path
) -> None:
    """The chaos test's set-up end to end: two hosts' workers, both pid 1 of their host, drain runs from
    the PostgreSQL store of the test's own cluster through the relay, each order placed once, and the
    registry tells the two workers apart by host name."""
    direct, relayed = own_postgres.url(own_database), own_postgres.url(own_database, port=pg_relay.port)
    ids = enqueue_many(direct, "short_order.py", shop, 6, prefix=f"pg-hosts-{tmp_path.name[-6:]}")  # type: ignore
    worker = [sys.executable, "-m", "browserworker", "worker", "--db", relayed, "-n", "2", "--once"]
    hosts = [make_host(name, *worker) for name in ("pg-a", "pg-b")]
    assert [h.wait(180) for h in hosts] == [0, 0], [h.output() for h in hosts]
    assert states(direct)["SUCCEEDED"] == len(ids)  # type: ignore[arg-type]
    assert duplicate_references(shop) == {}
    assert pg_relay.connections >= 2
    store = open_store(direct)
    try:
        assert sorted((w.host, w.pid) for w in store.workers()) == [("pg-a", 1), ("pg-b", 1)]
    finally:
        store.close()
