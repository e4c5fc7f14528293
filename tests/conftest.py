"""Shared fixtures: hermetic Chromium settings, a CLI runner, and the sandbox (from the plugin)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pg import pg_server, pg_url  # noqa: F401  (a real PostgreSQL: tests/pg.py)

ROOT = Path(__file__).resolve().parents[1]
FLOWS = ROOT / "flows"
HERMETIC_ARGS = "--host-resolver-rules='MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost'"


@pytest.fixture(scope="session", autouse=True)
def _hermetic_browser() -> None:
    """Chromium may resolve nothing but loopback in tests."""
    os.environ.setdefault("BROWSERWORKER_CHROMIUM_ARGS", HERMETIC_ARGS)


@dataclass
class BW:
    """Runs the ``browserworker`` CLI in a child process against one database."""

    db: Path
    env: dict[str, str] = field(default_factory=dict)

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env, **(extra or {})}
        env.pop("BROWSERWORKER_DB", None)
        return env

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "browserworker", *args]

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.cmd(*args), capture_output=True, text=True, env=self._env(env), timeout=timeout, cwd=self.db.parent
        )

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.cmd(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env(env),
            cwd=self.db.parent,
        )

    def show(self, run_id: str) -> dict[str, Any]:
        done = self.run("show", run_id, "--db", str(self.db), "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def run_flow(
        self, flow: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.run("run", str(FLOWS / flow), "--db", str(self.db), *args, env=env, timeout=timeout)

    def start_flow(self, flow: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return self.start("run", str(FLOWS / flow), "--db", str(self.db), *args, env=env)


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


def sigkill(proc: subprocess.Popen[str]) -> str:
    """SIGKILL a child, reap it, and return what it printed on stderr."""
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    return err


@pytest.fixture(autouse=True)
def _reap_workers() -> Iterator[None]:
    """Kill (and reap) any worker process a test started and did not stop, even when it failed."""
    yield
    from fleet import STARTED

    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=30)
