"""The CLI surface: help everywhere, one-line errors with exit 2, nothing written on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from browserworker.cli import main
from browserworker.store import NewRun, SQLiteStore
from tests.support.cli import commands
from tests.support.paths import FLOWS

FLOW = FLOWS / "place_order.py"


def all_commands() -> list[str]:
    return sorted(commands())


@pytest.mark.parametrize("command", all_commands())
def test_every_command_has_help(command: str) -> None:
    """`browserworker CMD --help` prints usage and a description."""
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output and len(commands()[command].help or "") > 10


def invoke(tmp_path: Path, *args: str) -> click.testing.Result:
    env = {"BROWSERWORKER_DB": str(tmp_path / "bw.db")}
    return CliRunner().invoke(main, list(args), env=env)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("run", "missing.py"), "no such flow file"),
        (("run", str(FLOW), "--input", "item"), "must look like KEY=VALUE"),
        (("run", str(FLOW), "--input", "item=tea"), "base_url: Field required"),
        (("run", str(FLOW), "--input", "item=tea", "--input", "base_url=x", "--input", "quantity=lots"), "quantity"),
        (("run", str(FLOW), "--inputs-json", "{bad"), "not valid JSON"),
        (("run", str(FLOW), "--flow", "nope"), "no flow named 'nope'"),
        (("run", str(FLOW), "--run-id", "../etc/passwd"), "invalid run id"),
        (("run", str(FLOW), "--run-id", "x'; DROP TABLE runs;--"), "invalid run id"),
        (("show", "nope"), "no database"),
        (("runs",), "no database"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    """Each bad input: a one-line error naming the problem, exit 2, no database created."""
    result = invoke(tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "bw.db").exists()


def test_syntax_error_in_flow_names_file_and_line(tmp_path: Path) -> None:
    """A flow with a syntax error: `file:line: syntax error`, exit 2, nothing written."""
    bad = tmp_path / "bad.py"
    bad.write_text("from browserworker import Flow\n\nflow = Flow('x'\n@@@\n")
    result = invoke(tmp_path, "run", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:" in result.output and "syntax error" in result.output
    assert not (tmp_path / "bw.db").exists()


def test_unknown_run_id_for_show_is_exit_2(tmp_path: Path) -> None:
    """`show` of an id the database does not hold is exit 2 and leaves the database alone."""
    db = tmp_path / "bw.db"
    SQLiteStore(db).create_run(NewRun(id="known", flow_name="f", inputs={}))
    result = invoke(tmp_path, "show", "unknown")
    assert result.exit_code == 2 and "no run 'unknown'" in result.output
    assert [r.id for r in SQLiteStore(db).list_runs()] == ["known"]


def test_bad_inputs_on_existing_db_write_no_row(tmp_path: Path) -> None:
    """Invalid inputs never create a run row, even when the database exists."""
    db = tmp_path / "bw.db"
    SQLiteStore(db).create_run(NewRun(id="known", flow_name="f", inputs={}))
    result = invoke(tmp_path, "run", str(FLOW), "--input", "item=tea", "--run-id", "new-one")
    assert result.exit_code == 2
    assert [r.id for r in SQLiteStore(db).list_runs()] == ["known"]


def test_resume_with_other_inputs_is_refused(tmp_path: Path) -> None:
    """An existing run id with different inputs is refused rather than silently changed."""
    db = tmp_path / "bw.db"
    SQLiteStore(db).create_run(
        NewRun(id="r1", flow_name="place-order", inputs={"base_url": "http://127.0.0.1:1", "item": "tea"})
    )
    result = invoke(
        tmp_path, "run", str(FLOW), "--run-id", "r1", "--input", "base_url=http://127.0.0.1:1", "--input", "item=coffee"
    )
    assert result.exit_code == 2 and "other inputs" in result.output


def test_runs_and_show_json(tmp_path: Path) -> None:
    """`runs --json` and `show --json` print machine-readable views; secrets masked."""
    db = tmp_path / "bw.db"
    SQLiteStore(db).create_run(
        NewRun(id="r1", flow_name="f", inputs={"password": "hunter2"}, secret_fields=("password",))
    )
    listed = json.loads(invoke(tmp_path, "runs", "--json").output)
    assert [r["id"] for r in listed] == ["r1"] and listed[0]["state"] == "QUEUED"
    shown = invoke(tmp_path, "show", "r1", "--json")
    assert shown.exit_code == 0
    view = json.loads(shown.output)
    assert view["run"]["inputs"] == {"password": "[redacted]"} and "hunter2" not in shown.output
    assert [e["kind"] for e in view["events"]] == ["run_created"]
    assert invoke(tmp_path, "runs", "--state", "succeeded", "--json").output.strip() == "[]"


def test_db_defaults_to_cwd_and_env_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --db the database is ./browserworker.db; BROWSERWORKER_DB overrides it."""
    monkeypatch.chdir(tmp_path)
    SQLiteStore(tmp_path / "browserworker.db").create_run(NewRun(id="here", flow_name="f", inputs={}))
    env = {k: v for k, v in os.environ.items() if k != "BROWSERWORKER_DB"}
    result = CliRunner().invoke(main, ["runs", "--json"], env={**env, "BROWSERWORKER_DB": None})
    assert [r["id"] for r in json.loads(result.output)] == ["here"]


def test_each_command_is_registered_by_the_module_the_group_loads_for_it() -> None:
    """The group imports a command's module only when the command is asked for: every module
    of ``COMMAND_MODULES`` registers exactly the commands it is named for, and nothing else
    registers one (a new command missing from the table would not be found)."""
    import importlib

    from browserworker.cli.app import COMMAND_MODULES

    for module in set(COMMAND_MODULES.values()):
        importlib.import_module(f"browserworker.cli.{module}")
    assert sorted(main.commands) == sorted(COMMAND_MODULES)
    for name, command in main.commands.items():
        assert command.callback is not None
        assert command.callback.__module__ == f"browserworker.cli.{COMMAND_MODULES[name]}", name


def test_run_loads_no_flow_pydantic_or_runtime_before_its_driver_starts() -> None:
    """``browserworker run`` starts the browser's driver before it loads the flow: importing the
    group and the ``run`` command's module loads neither pydantic, the flow's definitions, the
    runtime's engine nor the gate, nor any other command's module."""
    heavy = ["pydantic", "browserworker.flow._flow", "browserworker.flow._loader", "browserworker.runtime._engine"]
    heavy += ["browserworker.gate._gate", *(f"browserworker.cli.{m}" for m in ("runs", "ops", "console", "mcp"))]
    code = (
        "import json, sys, click\n"
        "from browserworker.cli import main\n"
        "assert main.get_command(click.Context(main), 'run') is not None\n"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []
