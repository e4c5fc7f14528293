"""The fixtures every test may take: hermetic Chromium settings, a CLI runner (``bw``), a run id,
the sandbox shop with its fault knobs cleared (``shop``; the sandbox itself comes from the
browserworker plugin), and workers reaped after each test.

The fixtures of ``tests/support/`` are registered here, and only here, by ``pytest_plugins``:
a real PostgreSQL (``pg_server``, ``pg_url``: tests/support/pg.py), the store contract's
``store_target`` and ``any_store`` (tests/support/stores.py), simulated hosts, a PostgreSQL
cluster of a test's own and a cuttable relay (tests/support/hosts.py), and pytest's
``pytester``. A test module never imports a fixture, nor another test module.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.bw import BW
from tests.support.fleet import STARTED

pytest_plugins = [
    "pytester",
    "tests.support.pg",
    "tests.support.stores",
    "tests.support.hosts",
]

HERMETIC_ARGS = "--host-resolver-rules='MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost'"


@pytest.fixture(scope="session", autouse=True)
def _hermetic_browser() -> None:
    """Chromium may resolve nothing but loopback in tests."""
    os.environ.setdefault("BROWSERWORKER_CHROMIUM_ARGS", HERMETIC_ARGS)


@pytest.fixture
def bw(tmp_path: Path) -> BW:
    return BW(db=tmp_path / "browserworker.db")


@pytest.fixture
def run_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def shop(sandbox: Any) -> Iterator[Any]:
    """The session sandbox with its fault knobs cleared before and after the test."""
    sandbox.clear_faults()
    yield sandbox
    sandbox.clear_faults()


@pytest.fixture(autouse=True)
def _reap_workers() -> Iterator[None]:
    """Kill (and reap) any worker process a test started and did not stop, even when it failed."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=30)
