"""Many hosts on one machine: simulated hosts, a PostgreSQL cluster of the test's own, and a cuttable link.

What a test gets: the fixtures ``make_host``, ``own_postgres``, ``own_database`` and ``pg_relay``
(registered by ``pytest_plugins`` in tests/conftest.py: a test takes them by name, never imports
them), and the helpers and types it imports::

    from tests.support.hosts import Host, PgCluster, TcpRelay, survivors, wait_for

- :class:`Host` — a command run as a host of its own: ``unshare --uts --pid --fork --mount-proc``, its
  own host name (``socket.gethostname()`` inside is the name given), its own pid numbers (the command
  is pid 1 of its namespace; two hosts' processes have the same small pids), its stdout and stderr in
  files. ``kill()`` is a power cut: SIGKILL to the namespace's pid 1, which kills every process in it
  (Chromium too), and returns once none is left (``survivors(procs)`` checks a snapshot of
  ``host.processes()`` afterwards). ``stop()``/``cont()`` freeze and thaw the whole host;
  ``terminate()`` is SIGTERM to its pid 1.
- :class:`~pg_cluster.PgCluster` (fixture ``own_postgres``, one per test module) — a throw-away
  PostgreSQL 15 cluster that may be stopped, crashed (``restart("immediate")``) and restarted on the
  same port; never the shared system cluster. Fixture ``own_database``: a fresh database in it, by name.
- :class:`~tcp_relay.TcpRelay` (fixture ``pg_relay``) — 127.0.0.1:``relay.port`` forwarded to that
  cluster; ``cut()`` resets every connection (and new ones) until ``restore()``; ``cut("blackhole")``
  is a partition (nothing forwarded, sockets stay open).
- ``wait_for(predicate, timeout)`` — poll until true; the chaos test's only way to wait.

A chaos test of the PostgreSQL store, sketched (N hosts each running a worker against the session
sandbox through the relay; the fleet helpers count outcomes, as in tests/fleet/test_workers.py)::

    pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.hosts]

    def test_hosts_die_freeze_and_lose_the_database_yet_every_order_lands_once(
            tmp_path, shop, own_postgres, pg_relay, make_host):
        '''Kill, freeze and cut hosts, crash the database: every verified run ends SUCCEEDED with one order.'''
        own_postgres.create_database("chaos")
        direct = own_postgres.url("chaos")                      # the test's own view: no relay
        relayed = own_postgres.url("chaos", port=pg_relay.port)  # what the workers use
        ids = enqueue_many(direct, "short_order.py", shop, 200, prefix=f"hosts-{tmp_path.name[-6:]}")
        worker = [sys.executable, "-m", "browserworker", "--log-level", "info", "worker", "--db", relayed,
                  "-n", "3", "--lease-ttl", "3"]
        hosts = [make_host(f"host{i}", *worker) for i in range(4)]     # env: PYTHONUNBUFFERED=1 already set
        wait_until_done(direct, 20, timeout=120)
        hosts[0].kill()                                # power cut: its leases must expire and move elsewhere
        hosts[1].stop()                                # frozen past its lease: must dispatch nothing when thawed
        wait_for(lambda: events(direct, "lease_expired"), 60, "a frozen host's lease reclaimed")
        pg_relay.cut()                                 # every host loses the database at once ...
        pg_relay.restore()                             # ... and reconnects
        own_postgres.restart("immediate")              # the database crashes and recovers (same port)
        hosts[1].cont()
        hosts.append(make_host("host4", *worker))      # a replacement host
        counts = wait_until_done(direct, len(ids), timeout=600)
        assert counts["SUCCEEDED"] == len(ids) and duplicate_references(shop) == {}
        # the worker registry shows host0..host4 as owner hosts (the UTS namespace at work)

Notes for that test: the fleet helpers take a ``Path`` today; they call ``open_store(db)``, so a URL
should do once the PostgreSQL store lands. ``wait_until_done`` polls through the direct URL, not the
relay, so a cut does not blind the test. Each host's logs are ``host.stdout_path``/``host.stderr_path``
(print them on failure). A host inherits the test's environment (so the hermetic
``BROWSERWORKER_CHROMIUM_ARGS`` of conftest) plus ``PYTHONUNBUFFERED=1`` and its ``env``. A worker is its
host's pid 1: pid 1 ignores signals it has no handler for, so
``terminate()`` (SIGTERM, a graceful stop) relies on the worker's handler (it has one); ``kill()`` and
``stop()`` always work. Two hosts' workers may well have the same pid: the store must tell them apart
by host name, which is the point of the exercise. ``kill()`` returns the wrapper's exit code, which
says nothing (util-linux 2.38's ``unshare`` exits 1 when its child was SIGKILLed); ``wait()`` on a
host that ended by itself returns the command's own exit code.

Freezing uses signals, not the cgroup freezer: ``stop()`` sends SIGSTOP to every process of the host
(found in /proc: the members of its pid namespace and their descendants) and repeats until every one
is stopped, so a process forked meanwhile is caught too; ``cont()`` sends SIGCONT to them all. The
processes stop within milliseconds of each other, not atomically. (The cgroup v1 freezer exists on
this machine but needs a cgroup created under /sys/fs/cgroup; signals need nothing outside the test.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.pg_cluster import BIN, PgCluster, available
from tests.support.tcp_relay import TcpRelay

__all__ = [
    "Host",
    "HostError",
    "PgCluster",
    "Proc",
    "TcpRelay",
    "make_host",
    "own_database",
    "own_postgres",
    "pg_relay",
    "survivors",
    "wait_for",
]

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_SET_NAME_AND_EXEC = 'hostname "$0" && read -r go && [ "$go" = go ] && exec "$@" </dev/null'
"""The host's pid 1 sets the host name, then waits on stdin (a pipe) for Host to have found it, then
becomes the command: so a command that ends at once cannot end before its host was seen."""


def wait_for(
    predicate: Callable[[], object], timeout: float, message: str = "condition", interval: float = 0.02
) -> object:
    """Poll ``predicate`` until it returns something truthy (returned); TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{message}: not true after {timeout}s")
        time.sleep(interval)


class HostError(RuntimeError):
    """A host did not start, or a process of it outlived kill()."""


def _pid_ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:  # gone, or a zombie
        return None


@dataclass(frozen=True)
class Proc:
    """One process as /proc/PID/stat shows it."""

    pid: int
    ppid: int
    state: str
    """R, S, D, T (stopped), t (traced), Z (zombie), ..."""
    start: int
    """Start time in clock ticks since boot: with the pid, it names one process (pids are reused)."""


def _stat(pid: int | str) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)"
    except (OSError, IndexError):
        return None
    return Proc(int(pid), int(fields[1]), fields[0], int(fields[19]))


def _process_table() -> dict[int, Proc]:
    """Every process there is, by pid."""
    procs = (_stat(entry) for entry in os.listdir("/proc") if entry.isdigit())
    return {p.pid: p for p in procs if p is not None}


def survivors(procs: Iterable[Proc]) -> list[Proc]:
    """Those of ``procs`` still alive (same pid, same start time, not a zombie)."""
    return [p for p in procs if (now := _stat(p.pid)) is not None and now.start == p.start and now.state != "Z"]


def _signal(proc: Proc, sig: int) -> None:
    """Signal ``proc`` unless it is gone, through a pidfd so that a reused pid is never hit."""
    try:
        fd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return
    try:
        now = _stat(proc.pid)
        if now is not None and now.start == proc.start:
            signal.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


class Host:
    """A command running as a simulated host; see the module docstring.

    ``hostname``: its name; ``init_pid``: its pid 1 as seen from outside; ``wrapper``: the ``unshare``
    process (outside the namespace, the parent of pid 1); ``ns``: its pid namespace (``pid:[INODE]``);
    ``stdout_path``, ``stderr_path``: its output.
    """

    def __init__(
        self,
        name: str,
        command: list[str],
        *,
        log_dir: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        start_timeout: float = 10,
    ) -> None:
        """Start ``command`` inside a new UTS + PID + mount namespace named ``name``; return once it runs."""
        if not _NAME.match(name):
            raise ValueError(f"host name must be a lower-case DNS label, not {name!r}")
        self.hostname = name
        self.stdout_path = Path(log_dir) / f"{name}.out"
        self.stderr_path = Path(log_dir) / f"{name}.err"
        argv = [
            "unshare",
            "--uts",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "--",
            "sh",
            "-c",
            _SET_NAME_AND_EXEC,
            name,
            *command,
        ]
        with open(self.stdout_path, "w") as out, open(self.stderr_path, "w") as err:
            # the `unshare` process, outside the namespace: it waits for the host's pid 1 (and SIGKILLs
            # it, --kill-child, should it die itself)
            self.wrapper = subprocess.Popen(
                argv,
                stdout=out,
                stderr=err,
                stdin=subprocess.PIPE,
                cwd=cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )
        assert self.wrapper.stdin is not None
        self._own_ns = _pid_ns("self")
        try:
            self.ns = str(wait_for(self._find_ns, start_timeout, f"host {name} started"))
            self.init_pid = int(str(wait_for(self._find_init, start_timeout, f"host {name} has a pid 1")))
            self.wrapper.stdin.write(b"go\n")
            self.wrapper.stdin.close()
        except (TimeoutError, HostError, OSError):
            self.wrapper.kill()
            self.wrapper.wait()
            raise

    def _find_ns(self) -> str | None:
        if self.wrapper.poll() is not None:
            raise HostError(
                f"host {self.hostname} exited {self.wrapper.returncode} at once: {self.stderr_path.read_text()}"
            )
        try:
            ns = os.readlink(f"/proc/{self.wrapper.pid}/ns/pid_for_children")
        except OSError:
            return None
        return ns if ns != self._own_ns else None

    def _find_init(self) -> int | None:
        return next(
            (p.pid for p in _process_table().values() if p.ppid == self.wrapper.pid and _pid_ns(p.pid) == self.ns), None
        )

    # -- the process tree ----------------------------------------------------
    def _tree(self) -> dict[int, Proc]:
        """Every live process of the host: its pid namespace's members and their descendants (by parent
        pid: a nested namespace's too). Empty once the wrapper has exited: the namespace is gone then
        (the wrapper holds it while it lives), and its ``pid:[INODE]`` may name a new host's namespace."""
        if self.wrapper.poll() is not None:
            return {}
        table = _process_table()
        members = {pid for pid in table if _pid_ns(pid) == self.ns}
        grew = True
        while grew:
            more = {p.pid for p in table.values() if p.ppid in members and p.pid not in members}
            members |= more
            grew = bool(more)
        if self.wrapper.poll() is not None:  # it exited during the scan: the inode may be reused already
            return {}
        return {pid: table[pid] for pid in members if table[pid].state != "Z"}

    def processes(self) -> list[Proc]:
        """The host's live processes, pid 1 of the host first if it lives."""
        return sorted(self._tree().values(), key=lambda p: (p.pid != self.init_pid, p.pid))

    def pids(self) -> list[int]:
        """The host's processes (pids as seen from outside), pid 1 of the host first if it lives."""
        return [p.pid for p in self.processes()]

    @property
    def alive(self) -> bool:
        """True while the host's pid 1 runs."""
        return self.init_pid in self._tree()

    def inner_pid(self, pid: int) -> int | None:
        """The pid a host process has inside its host (the last ``NSpid`` of /proc/PID/status)."""
        try:
            with open(f"/proc/{pid}/status") as f:
                line = next(line for line in f if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            return None
        return int(line.split()[-1])

    # -- signals -------------------------------------------------------------
    def _signal_tree(self, sig: int, tree: dict[int, Proc] | None = None, *, only_init: bool = False) -> None:
        procs = (tree if tree is not None else self._tree()).values()
        for proc in procs:
            if not only_init or proc.pid == self.init_pid:
                _signal(proc, sig)

    def terminate(self) -> None:
        """SIGTERM to the host's pid 1 (a graceful stop, if the command handles SIGTERM)."""
        self._signal_tree(signal.SIGTERM, only_init=True)

    def kill(self, timeout: float = 30) -> int | None:
        """SIGKILL the whole host and return once the wrapper has reaped its pid 1 and no process of the
        host is left (HostError if one is). The kernel kills every process of a pid namespace whose pid 1
        dies; the others are signalled too, for a descendant in a nested namespace. The exit code is
        the wrapper's (util-linux 2.38's unshare exits 1 when its child was SIGKILLed)."""
        tree = self._tree()
        self._signal_tree(signal.SIGKILL, tree, only_init=True)
        self._signal_tree(signal.SIGKILL, tree)
        try:
            code = self.wrapper.wait(timeout)
            wait_for(lambda: not survivors(tree.values()), timeout, f"host {self.hostname}'s processes gone")
        except (TimeoutError, subprocess.TimeoutExpired) as e:
            left = survivors(tree.values())
            raise HostError(f"host {self.hostname}: processes left after SIGKILL: {left}") from e
        return code

    def stop(self, timeout: float = 10) -> list[int]:
        """SIGSTOP every process of the host, again until all are stopped; return their pids."""

        def frozen() -> bool:
            running = {pid: p for pid, p in self._tree().items() if p.state not in "Tt"}
            self._signal_tree(signal.SIGSTOP, running)
            return not running

        wait_for(frozen, timeout, f"host {self.hostname} frozen", interval=0.005)
        return self.pids()

    def cont(self) -> None:
        """SIGCONT every process of the host."""
        self._signal_tree(signal.SIGCONT)

    @property
    def stopped(self) -> bool:
        """True when every process of the host is stopped."""
        tree = self._tree()
        return bool(tree) and all(p.state in "Tt" for p in tree.values())

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the host to end by itself; its exit code (negative: killed by that signal)."""
        return self.wrapper.wait(timeout)

    def output(self) -> str:
        """What the host printed so far, stdout then stderr."""
        return self.stdout_path.read_text(errors="replace") + self.stderr_path.read_text(errors="replace")


# -- fixtures ----------------------------------------------------------------
@pytest.fixture
def make_host(tmp_path: Path) -> Iterator[Callable[..., Host]]:
    """``make_host(name, *command, env=None)`` starts a Host logging to tmp_path; all are killed after the test."""
    started: list[Host] = []

    def start(name: str, *command: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Host:
        host = Host(name, list(command), log_dir=tmp_path, env=env, cwd=cwd)
        started.append(host)
        return host

    yield start
    for host in started:
        host.kill()


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[PgCluster]:
    """A started PostgreSQL cluster of this test module's own (deleted after it); fails (never skips)
    without PostgreSQL's server binaries: the tests that need one are part of the suite."""
    if not available():
        pytest.fail(
            f"PostgreSQL's server binaries are not in {BIN} (install postgresql-15) or runuser is missing",
            pytrace=False,
        )
    cluster = PgCluster()
    try:
        cluster.start()
        print(f"own_postgres: initdb {cluster.init_seconds:.2f}s, start {cluster.start_seconds:.2f}s", file=sys.stderr)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def own_database(own_postgres: PgCluster) -> Iterator[str]:
    """A fresh empty database in ``own_postgres`` (its name), dropped after the test."""
    name = f"hosts_{uuid.uuid4().hex[:10]}"
    own_postgres.create_database(name)
    yield name
    if own_postgres.running:
        own_postgres.drop_database(name)


@pytest.fixture
def pg_relay(own_postgres: PgCluster) -> Iterator[TcpRelay]:
    """A TcpRelay to ``own_postgres`` (connect to ``own_postgres.url(db, port=pg_relay.port)``)."""
    relay = TcpRelay(("127.0.0.1", own_postgres.port))
    yield relay
    relay.close()
