"""Fault points (browserworker/_faults.py, ``BROWSERWORKER_FAULTS``): what chaos and the crash
tests switch on to crash or fail a run on purpose; the rules parse and fire as written."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from browserworker import _faults as faults
from browserworker.errors import UsageError
from browserworker.flow import load_flow
from browserworker.prove import run_chaos
from browserworker.runtime import BrowserSettings
from tests.support.paths import FLOWS


def test_fault_specs_parse_and_fire_on_the_nth_hit() -> None:
    """`POINT[:STEP]=ACTION[@N]` rules fire only for their step and on the Nth hit; bad specs are refused."""
    faults.configure("after_response:submit=raise@2")
    try:
        faults.hit("after_response", "submit")
        faults.hit("after_response", "other")
        with pytest.raises(faults.InjectedFault):
            faults.hit("after_response", "submit")
        faults.hit("after_response", "submit")  # only the 2nd
    finally:
        faults.configure(None)
    for bad in ("nowhere=kill", "after_response=explode", "after_response=kill@0", "after_response"):
        with pytest.raises(ValueError):
            faults.parse(bad)


# a child that opens a write transaction on its store's thread and, while it is open, reaches a
# fault point whose rule is stop; it writes (one os.write a line) when the transaction began and when it committed
_STOP_CHILD = """
import os, sys, threading, time
from browserworker import _faults as faults
from browserworker.store.sqlite._store import SQLiteConnector

connector = SQLiteConnector(sys.argv[1])
began = threading.Event()

def heartbeat():
    with connector.transaction():
        began.set()
        time.sleep(0.5)  # the transaction stays open while the fault point is reached
    os.write(1, b"committed\\n")  # one write: the two threads' lines never interleave

threading.Thread(target=heartbeat).start()
began.wait()
os.write(1, b"began\\n")
faults.configure("after_response=stop")
faults.hit("after_response")
os.write(1, b"resumed\\n")
"""


def test_a_stop_pauses_the_process_only_once_its_stores_write_transaction_has_ended(tmp_path: Path) -> None:
    """A ``stop`` reached while another thread of the process is inside a store's write
    transaction (a heartbeat's) pauses the process after that transaction commits, never inside
    it: while it is paused, another process can take the database's write lock at once."""
    db = tmp_path / "bw.db"
    child = subprocess.Popen(
        [sys.executable, "-c", _STOP_CHILD, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "began"
        deadline = time.monotonic() + 60
        while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "T":
            assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.stderr else ""
            time.sleep(0.02)
        lock = sqlite3.connect(db, isolation_level=None, timeout=0)
        try:
            lock.execute("BEGIN IMMEDIATE")  # "database is locked" if the pause caught the transaction open
            lock.execute("ROLLBACK")
        finally:
            lock.close()
        child.send_signal(signal.SIGCONT)
        out, err = child.communicate(timeout=60)
        assert sorted(out.split()) == ["committed", "resumed"], err
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_chaos_refuses_fewer_than_one_job_and_an_unknown_point_before_it_runs_anything() -> None:
    """`run_chaos` with ``jobs`` below one, or a point that is not a fault point, is a usage error
    before any verifier self-test or scenario (no browser, no run)."""
    loaded = load_flow(FLOWS / "place_order.py")
    settings = BrowserSettings(executable_path="/nonexistent/chromium")  # never launched
    with pytest.raises(UsageError, match="jobs must be at least 1, not 0"):
        run_chaos(loaded, {}, points=["after_dispatch"], browser=settings, jobs=0)
    with pytest.raises(UsageError, match="unknown chaos point"):
        run_chaos(loaded, {}, points=["nowhere"], browser=settings)
