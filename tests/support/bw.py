"""``BW``: the ``browserworker`` CLI run in a child process against one database (fixture ``bw``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.paths import FLOWS


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
