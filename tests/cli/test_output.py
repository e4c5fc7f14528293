"""What the CLI prints for scripts: `--json` on every command a script reads, tables that are
never wrapped when stdout is not a terminal, and one exit code per error class."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from browserworker import errors
from browserworker.cli import main
from browserworker.cli.failures import Stage, explain
from browserworker.ops import print_chaos, terminal
from browserworker.prove._chaos import ChaosReport, ChaosResult
from browserworker.recording import ReplayError
from browserworker.states import AttemptState, RunState
from browserworker.store import SQLiteStore
from tests.support import opsdata
from tests.support.cli import commands
from tests.support.paths import FLOWS, TEST_FLOWS

FLOW = FLOWS / "place_order.py"
INPUTS = ("--input", "base_url=http://127.0.0.1:9", "--input", "item=tea")

#: The commands a script reads; each has --json.
SCRIPTED = (
    "run",
    "enqueue",
    "worker",
    "show",
    "runs",
    "review",
    "resolve",
    "cancel",
    "queue",
    "status",
    "health",
    "backup",
    "restore",
    "check-db",
    "chaos",
    "replay",
)


def bw(db: Path, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"BROWSERWORKER_DB": str(db)})


def as_json(result: Result) -> Any:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("command", SCRIPTED)
def test_commands_a_script_reads_have_json(command: str) -> None:
    assert "--json" in {opt for p in commands()[command].params for opt in p.opts}


def test_every_option_of_every_command_says_what_it_does() -> None:
    """`--help` describes every option (the CLI reference is generated from it)."""
    for name, command in commands().items():
        assert command.callback is not None and command.callback.__module__.startswith("browserworker.cli."), name
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "limit":
                assert param.help, (name, param.opts)


def test_enqueue_show_cancel_queue_json(tmp_path: Path) -> None:
    db = tmp_path / "bw.db"
    queued = as_json(bw(db, "enqueue", str(FLOW), *INPUTS, "--run-id", "j1", "--json"))
    assert queued["id"] == "j1" and queued["state"] == "QUEUED"
    assert as_json(bw(db, "show", "j1", "--json"))["run"]["id"] == "j1"
    assert as_json(bw(db, "queue", "default", "--max-depth", "3", "--json")) == {"queue": "default", "max_depth": 3}
    assert as_json(bw(db, "cancel", "j1", "--json")) == {"id": "j1", "outcome": "cancelled"}
    assert as_json(bw(db, "runs", "--json"))[0]["state"] == "CANCELLED"


def test_review_and_resolve_json(tmp_path: Path) -> None:
    db = tmp_path / "bw.db"
    store = SQLiteStore(db)
    run = opsdata.running(store, "parked")
    attempt = opsdata.dispatched(store, run)
    opsdata.finish(store, attempt, run.lease_epoch, AttemptState.UNKNOWN, "test")
    store.set_run_state(run.id, run.lease_epoch, RunState.NEEDS_REVIEW, error="unknown")
    store.close()
    [item] = as_json(bw(db, "review", "--json"))
    assert (item["run_id"], item["step_id"]) == ("parked", "submit")
    resolved = as_json(bw(db, "resolve", "parked", "submit", "--not-done", "--json"))
    assert resolved["id"] == "parked" and resolved["state"] == "QUEUED"


def test_health_status_backup_restore_check_db_json(tmp_path: Path) -> None:
    db, copy = tmp_path / "bw.db", tmp_path / "copy.db"
    store = SQLiteStore(db)
    opsdata.queued(store, "old", age=3600)
    store.close()
    sick = bw(db, "health", "--json")
    assert sick.exit_code == 1
    verdict = json.loads(sick.stdout)
    assert not verdict["healthy"] and [b["rule"] for b in verdict["breaches"]] == ["max-queue-age"]
    assert as_json(bw(db, "health", "--max-queue-age", "off", "--json")) == {"healthy": True, "breaches": []}
    assert as_json(bw(db, "status", "--json"))["states"] == {"QUEUED": 1}
    assert as_json(bw(db, "backup", str(copy), "--json"))["integrity"] == "ok"
    assert as_json(bw(db, "check-db", "--json"))["integrity"] == "ok"
    assert as_json(bw(db, "restore", str(copy), "--json"))["runs"] == {"QUEUED": 1}


def test_a_piped_table_never_splits_a_cell(tmp_path: Path) -> None:
    """`runs` through a pipe (a real one, not a terminal): every row whole on one line."""
    db = tmp_path / "bw.db"
    store = SQLiteStore(db)
    ids = [f"a-long-run-id-that-would-not-fit-in-eighty-columns-{n}-" + "x" * 40 for n in range(3)]
    for run_id in ids:
        opsdata.queued(store, run_id, flow="a-flow-with-a-name-long-enough-to-need-its-own-line")
    store.close()
    out = subprocess.run(
        [sys.executable, "-m", "browserworker", "runs", "--db", str(db)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "80"},
    ).stdout
    for run_id in ids:
        [row] = [line for line in out.splitlines() if run_id in line]
        assert "a-flow-with-a-name-long-enough-to-need-its-own-line" in row and "QUEUED" in row


def test_the_chaos_table_keeps_after_response_whole_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    """The chaos table on a stdout that is not a terminal: no cell (`after_response`) split."""
    report = ChaosReport()
    for point in ("after_response", "after_intent_commit", "reply_lost"):
        report.results.append(
            ChaosResult(
                step="submit-the-order",
                point=point,
                round=1,
                run_id="r",
                fired=True,
                run_state="SUCCEEDED",
                classification="dispatched, response journaled",
                decision="verifier said done (asked 2x)",
                landings=1,
                probe="count",
                verdict="ok",
                seconds=1.0,
            )
        )
    print_chaos(report, terminal())
    rows = [line for line in capsys.readouterr().out.splitlines() if "submit-the-order" in line]
    assert len(rows) == 3 and all("verifier said done (asked 2x) [SUCCEEDED]" in row for row in rows)
    assert any("after_response" in row for row in rows)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.UsageError, 2),
        (errors.FlowLoadError, 2),
        (errors.InputError, 2),
        (errors.RunNotFound, 2),
        (errors.BrowserNotFound, 2),
        (ReplayError, 2),
        (errors.StoreError, 5),
        (errors.LeaseLost, 5),
        (errors.QueueFull, 6),
        (errors.UndeclaredEffect, 1),
    ],
)
def test_each_error_class_carries_its_exit_code(error: type[errors.BrowserworkerError], code: int) -> None:
    assert error.exit_code == code
    line, exit_code = explain(error("boom"), Stage())
    assert exit_code == code and line.endswith("boom")
    assert line.startswith("error: " if code == 5 else "Error: ")


def test_the_stage_says_what_an_error_left_behind() -> None:
    """Opening: any failure is a refusal (2); a run under way: whatever stops it but bad usage is 5."""
    assert explain(errors.StoreError("no database at x"), Stage(refusing=True)) == ("Error: no database at x", 2)
    under_way = Stage(left=", run r stopped without an outcome", hint="; resume it with --run-id r", under_way=True)
    assert explain(errors.StoreError("locked"), under_way) == (
        "error: store unavailable, run r stopped without an outcome: locked; resume it with --run-id r",
        5,
    )
    assert explain(errors.BrowserNotFound("could not launch"), under_way) == ("error: could not launch", 5)
    assert explain(errors.LeaseLost("epoch 3"), under_way) == (
        "error: lease lost, stopped without dispatching anything more: epoch 3",
        5,
    )
    assert explain(errors.InputError("bad"), under_way) == ("Error: bad", 2)


def test_db_may_be_a_url_and_evidence_goes_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from browserworker.cli.invocation import Invocation

    monkeypatch.chdir(tmp_path)
    db = tmp_path / "bw.db"
    opsdata.queued(SQLiteStore(db), "via-url")
    assert [r["id"] for r in as_json(bw(tmp_path / "unused.db", "runs", "--db", f"sqlite:///{db}", "--json"))] == [
        "via-url"
    ]
    session = Invocation(click.Context(main))
    session.db = f"sqlite:///{db}"
    assert session.evidence_dir == Path("browserworker.evidence")
    session.db = str(db)
    assert session.evidence_dir == tmp_path / "bw.db.evidence"


def test_an_unknown_input_is_a_usage_error_and_nothing_is_written(tmp_path: Path) -> None:
    """``--input colour=red`` for a field the flow's model does not have is refused (exit 2,
    naming the input and the flow's inputs), for ``run`` and ``enqueue``, and nothing is
    written; a model that allows extras takes them."""
    db = tmp_path / "bw.db"
    for command in ("run", "enqueue"):
        done = bw(db, command, str(FLOW), *INPUTS, "--input", "colour=red")
        assert done.exit_code == 2, done.output
        assert "unknown input 'colour'" in done.output and "base_url, item" in done.output
    assert not db.exists() or SQLiteStore(db).list_runs() == []
    loose = tmp_path / "loose.py"
    loose.write_text(
        "from pydantic import BaseModel, ConfigDict\nfrom browserworker import Flow\n\n"
        "class Inputs(BaseModel):\n    model_config = ConfigDict(extra='allow')\n    item: str\n\n"
        "flow = Flow('loose', inputs=Inputs)\n\n@flow.step\nasync def look(ctx):\n    pass\n"
    )
    queued = as_json(bw(db, "enqueue", str(loose), "--input", "item=tea", "--input", "colour=red", "--json"))
    assert as_json(bw(db, "show", queued["id"], "--json"))["run"]["inputs"] == {"item": "tea", "colour": "red"}


def test_show_prints_a_secret_input_as_redacted_not_as_empty(tmp_path: Path) -> None:
    """``show``'s text view prints a secret input as ``[redacted]`` (as --json does): the
    marker must not be eaten as console markup and read as an empty password; a result with
    brackets prints whole too."""
    db = tmp_path / "bw.db"
    flow = TEST_FLOWS / "secret_order.py"
    queued = bw(
        db,
        "enqueue",
        str(flow),
        "--input",
        "base_url=http://127.0.0.1:9",
        "--input",
        "username=u",
        "--input",
        "password=hunter2",
        "--input",
        "api_token=t0k",
        "--input",
        "note=n",
        "--run-id",
        "s1",
    )
    assert queued.exit_code == 0, queued.output
    shown = bw(db, "show", "s1")
    assert shown.exit_code == 0, shown.output
    assert "'password': '[redacted]'" in shown.output and "'api_token': '[redacted]'" in shown.output
    assert "hunter2" not in shown.output and "''" not in shown.output


def test_progress_gives_no_duration_for_an_outcome_it_did_not_see_start() -> None:
    """A recovery decides an attempt without running it here: its line has no duration, never
    a negative one (``(-0.0s)``)."""
    import io
    from types import SimpleNamespace

    from browserworker.ops import Progress

    out = io.StringIO()
    progress = Progress(out)
    attempt = SimpleNamespace(
        step_id="submit",
        kind="effect",
        attempt_no=1,
        state=AttemptState.SUCCEEDED,
        decided_by="verifier",
        error=None,
        result={"order_id": "1"},
    )
    progress.outcome(attempt)  # type: ignore[arg-type]
    assert "submit [effect #1]" in out.getvalue() and "s)" not in out.getvalue()
