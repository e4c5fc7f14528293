"""A throw-away PostgreSQL 15 cluster of a test's own: initdb into a temp dir, start, stop, restart, delete.

The system cluster (127.0.0.1:5432) is shared and must never be restarted; a test that stops or crashes
PostgreSQL starts one of these instead::

    cluster = PgCluster()
    cluster.start()                      # initdb on first start (about 0.7 s), then pg_ctl start (about 0.1 s)
    cluster.create_database("chaos")
    url = cluster.url("chaos")           # postgresql://postgres@127.0.0.1:PORT/chaos
    cluster.restart("immediate")         # a crash: no shutdown checkpoint, WAL recovery on start; same port, same data
    cluster.close()                      # stop and delete the directory

The data directory lives in a fresh ``/tmp/bw-pg-*`` directory (not pytest's ``tmp_path``: that is private
to root and user ``postgres`` could not enter it), owned by ``postgres``. As root, every PostgreSQL binary
runs as ``postgres`` through ``runuser -u postgres --`` (PostgreSQL refuses to run as root); as any other
user it runs as that user. It listens on 127.0.0.1 only, on a port free when the cluster was created, kept
across restarts; its unix socket is inside the directory. Authentication is ``trust``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

BIN = Path(os.environ.get("BW_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
STOP_MODES = ("smart", "fast", "immediate")
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "shared_buffers": "'16MB'",
    "max_connections": "100",
    "max_wal_size": "'256MB'",
    "max_worker_processes": "2",
    "max_parallel_workers": "0",
    "autovacuum_naptime": "'5s'",
    "log_min_messages": "warning",
    "log_connections": "off",
}
"""Small and fast: a test cluster holds a few thousand rows and at most a few dozen connections."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def available() -> bool:
    """True when the PostgreSQL binaries are installed (the tests that need them fail without them)."""
    return (BIN / "initdb").exists() and (os.geteuid() != 0 or shutil.which("runuser") is not None)


class PgClusterError(RuntimeError):
    """A PostgreSQL command failed; the message carries its output and the server log's tail."""


class PgCluster:
    """One PostgreSQL cluster in a temp dir, its own port and socket; see the module docstring."""

    def __init__(self, *, port: int | None = None, fsync: bool = True, prefix: str = "bw-pg-") -> None:
        """Reserve a directory and a port; nothing runs until :meth:`start`."""
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = port or free_port()
        self.fsync = fsync
        self.init_seconds: float | None = None
        """How long initdb took (None until the first start)."""
        self.start_seconds: float | None = None
        """How long the last ``pg_ctl start`` took, until the server accepted connections."""
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")

    # -- commands ------------------------------------------------------------
    def _run(self, tool: str, *args: str, timeout: float = 60) -> str:
        cmd = [str(BIN / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if done.returncode != 0:
            raise PgClusterError(
                f"{tool} {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}"
                f"\n--- server log ---\n{self.log_tail()}"
            )
        return done.stdout

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server log (empty before the first start)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def _initdb(self) -> None:
        began = time.monotonic()
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "--auth=trust",
            "--username=postgres",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        settings = {
            **SETTINGS,
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "on" if self.fsync else "off",
            "synchronous_commit": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# tests/support/pg_cluster.py\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        self.init_seconds = time.monotonic() - began

    # -- lifecycle -----------------------------------------------------------
    @property
    def running(self) -> bool:
        """True while the postmaster runs (``pg_ctl status``)."""
        if not (self.data / "PG_VERSION").exists():
            return False
        try:
            self._run("pg_ctl", "-D", str(self.data), "status", timeout=10)
        except PgClusterError:
            return False
        return True

    def start(self, timeout: float = 30) -> None:
        """initdb on the first call, then start and wait until connections are accepted."""
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        began = time.monotonic()
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            str(int(timeout)),
            "start",
            timeout=timeout + 10,
        )
        self.start_seconds = time.monotonic() - began

    def stop(self, mode: str = "fast", timeout: float = 30) -> None:
        """Stop the server: ``fast`` (roll back, checkpoint, exit), ``immediate`` (a crash: every backend
        quits at once, no checkpoint, WAL recovery on the next start) or ``smart`` (wait for clients)."""
        if mode not in STOP_MODES:
            raise ValueError(f"stop mode must be one of {STOP_MODES}, not {mode!r}")
        self._run(
            "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", str(int(timeout)), "stop", timeout=timeout + 10
        )

    def restart(self, mode: str = "fast", timeout: float = 30) -> float:
        """Stop with ``mode`` and start again on the same port with the same data; return the seconds it took."""
        began = time.monotonic()
        self.stop(mode, timeout)
        self.start(timeout)
        return time.monotonic() - began

    def close(self) -> None:
        """Stop the server if it runs (immediate: its data is thrown away) and delete the directory."""
        try:
            if self.running:
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        """Start the cluster; leaving the block closes it."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the cluster (stop and delete)."""
        self.close()

    # -- databases -----------------------------------------------------------
    def url(self, dbname: str = "postgres", port: int | None = None) -> str:
        """The database's URL; ``port`` replaces the cluster's own (to go through a :class:`TcpRelay`)."""
        return f"postgresql://postgres@127.0.0.1:{port or self.port}/{dbname}"

    def _admin(self, statement: str, name: str) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL(statement).format(sql.Identifier(name)))

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        self._admin("CREATE DATABASE {}", name)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting whoever is still in it."""
        self._admin("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)
