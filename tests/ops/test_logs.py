"""Structured logs: JSON lines off a terminal, every step line fully identified, secrets never logged;
and the worker's /metrics endpoint living exactly as long as the worker."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import structlog
from pydantic import SecretStr

from browserworker.control import enqueue
from browserworker.flow import load_flow
from browserworker.logs import configure_logging
from browserworker.sandbox.db import SandboxDB
from browserworker.store import open_store
from tests.support.bw import BW
from tests.support.paths import FLOWS

STEP_FIELDS = ("run_id", "step_id", "attempt_no", "request_key", "fingerprint", "state", "worker_id", "lease_epoch")
LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def test_json_lines_mask_secret_keys_and_secret_values(capsys: pytest.CaptureFixture[str]) -> None:
    """Off a terminal every line is one JSON object; secret-named keys and SecretStr values are masked."""
    configure_logging("info", json=True)
    log = structlog.get_logger("test")
    log.info("login", password="hunter2-pw", token="tok-123", user="demo", secret_input=SecretStr("s3cr3t-val"))
    log.debug("not at info level", password="dbg")
    err = capsys.readouterr().err
    [line] = err.splitlines()
    event = json.loads(line)
    assert event["event"] == "login" and event["user"] == "demo" and event["password"] == "[redacted]"
    for secret in ("hunter2-pw", "tok-123", "s3cr3t-val", "dbg"):
        assert secret not in err


def test_structlog_loads_only_for_a_line_to_write() -> None:
    """A line below the level costs no structlog import (nor rich's); the first line at the level
    loads it, set up as the command's default: JSON on stderr, secrets masked. A bound logger
    keeps its context until then."""
    code = (
        "import sys\n"
        "from browserworker.logs import get_logger\n"
        "log = get_logger('browserworker.test').bind(run_id='r1')\n"
        "log.info('below the level', password='hidden-pw')\n"
        "print('structlog' in sys.modules, 'rich' in sys.modules)\n"
        "log.warning('at the level', password='shown-pw')\n"
        "print('structlog' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert done.stdout.split() == ["False", "False", "True"], done.stdout
    [line] = done.stderr.splitlines()
    event = json.loads(line)
    assert (event["event"], event["run_id"], event["password"], event["level"]) == (
        "at the level",
        "r1",
        "[redacted]",
        "warning",
    )
    assert "below the level" not in done.stderr and "pw" not in line.replace("password", "")


def test_configure_logging_sets_the_level_before_structlog_loads() -> None:
    """The command configures logging before anything is imported: at --log-level info an info
    line is written (structlog loads for it), at error a warning is not and structlog stays out."""
    code = (
        "import sys\n"
        "from browserworker.logs import configure_logging, get_logger\n"
        "configure_logging(sys.argv[1], json=True)\n"
        "get_logger('browserworker.test').info('an info line')\n"
        "get_logger('browserworker.test').warning('a warning line')\n"
        "print('structlog' in sys.modules)\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    info = subprocess.run([sys.executable, "-c", code, "info"], capture_output=True, text=True, check=True, env=env)
    assert [json.loads(line)["event"] for line in info.stderr.splitlines()] == ["an info line", "a warning line"]
    assert info.stdout.strip() == "True"
    error = subprocess.run([sys.executable, "-c", code, "error"], capture_output=True, text=True, check=True, env=env)
    assert error.stderr == "" and error.stdout.strip() == "False"


@pytest.mark.browser
@pytest.mark.slow
def test_worker_logs_identify_every_step_and_never_the_password(tmp_path: Path, shop: Any) -> None:
    """A worker runs two orders whose login password is a secret input, at debug level, with
    --metrics-port: the runs succeed (the secret was used), no output line contains it, every JSON
    line about a step carries all eight identifying fields, and /metrics answers while the worker
    runs and is gone after it exits."""
    password = f"pw-{secrets.token_hex(8)}"
    username = f"ops-{secrets.token_hex(4)}"
    SandboxDB(shop.db_path, seed_users=False).add_user(username, password)
    db = tmp_path / "bw.db"
    store = open_store(db)
    loaded = load_flow(FLOWS / "place_order.py")
    ids = [
        enqueue(
            store, loaded, {"base_url": shop.url, "item": f"tea-{i}", "username": username, "password": password}
        ).id
        for i in range(2)
    ]
    store.close()

    stdout = tmp_path / "worker.out"
    with open(stdout, "w") as out_file:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "browserworker",
                "--log-level",
                "debug",
                "worker",
                "--db",
                str(db),
                "--once",
                "-n",
                "2",
                "--metrics-port",
                "0",
            ],
            stdout=out_file,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    lines: list[str] = []
    url: list[str] = []
    seen = threading.Event()

    def pump() -> None:
        assert worker.stderr is not None
        for line in worker.stderr:
            lines.append(line)
            if line.startswith("metrics on "):
                url.append(line.split()[-1])
                seen.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    assert seen.wait(timeout=60), "".join(lines)
    with LOCAL.open(url[0], timeout=10) as resp:
        body = resp.read().decode()
    assert "browserworker_queue_depth" in body and "browserworker_workers" in body
    assert "browserworker_process_dispatches_total" in body  # the worker's own counters, an extension
    worker.wait(timeout=120)
    reader.join(timeout=10)
    out = stdout.read_text()
    assert worker.returncode == 0, "".join(lines[-30:])
    with pytest.raises(urllib.error.URLError):
        LOCAL.open(url[0], timeout=2)

    shown = [BW(db).show(i) for i in ids]
    assert [v["run"]["state"] for v in shown] == ["SUCCEEDED", "SUCCEEDED"]
    everything = out + "".join(lines) + json.dumps(shown)
    assert password not in everything
    events = [json.loads(line) for line in lines if line.startswith("{")]
    about_steps = [e for e in events if e.get("step_id")]
    assert {e["event"] for e in about_steps} >= {"action finished", "intent committed", "effect finished"}
    for event in about_steps:
        missing = [f for f in STEP_FIELDS if event.get(f) in (None, "")]
        assert not missing, (missing, event)
    assert {e["run_id"] for e in about_steps} == set(ids)
    assert all(e["level"] in ("debug", "info", "warning", "error") and e["timestamp"] for e in events)
