"""The small things a new user meets first: input and flow errors that name every problem and
the fix, a SQLite --db that says why it cannot be opened, a quiet library, ``show`` giving a
reason for every lease epoch, and ``worker --once`` saying what it left queued."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mcp.client.stdio  # noqa: F401  (see below)
import pytest
from click.testing import CliRunner, Result

from browserworker.cli import main
from browserworker.errors import FlowDefinitionError, InputError, StoreError
from browserworker.flow import load_flow
from browserworker.store import NewRun, Owner, SQLiteStore, open_store
from browserworker.store.testing import backdate
from tests.support.paths import ROOT

FLOW = ROOT / "flows" / "place_order.py"

# The MCP SDK is imported above, not first by an `mcp` command under CliRunner: its stdio client
# takes the sys.stderr of the moment it is imported as its default error log, and CliRunner's
# stand-in (no file descriptor) would then break every later test that starts a stdio server.


def bw(db: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--db", str(db)])


def test_bad_inputs_name_every_problem_the_flows_inputs_and_the_close_match(tmp_path: Path) -> None:
    """`--input base-url=...` (a dash), a misspelt key and an out-of-range value are reported in
    one message, each with the field meant and the flow's inputs; exit 2, nothing written."""
    db = tmp_path / "bw.db"
    done = bw(
        db, "run", str(FLOW), "--input", "base-url=http://127.0.0.1:9", "--input", "itm=tea", "--input", "quantity=0"
    )
    assert done.exit_code == 2
    assert "'base-url' is not a valid field name (did you mean 'base_url'?)" in done.output
    assert "unknown input 'itm' (did you mean 'item'?)" in done.output
    assert "quantity: Input should be greater than or equal to 1" in done.output
    assert "(its inputs: base_url, item, password, quantity, username)" in done.output
    assert len(done.output.strip().splitlines()) == 1
    assert not db.exists()


def test_input_given_as_two_arguments_gets_a_key_value_hint(tmp_path: Path) -> None:
    """`--input base_url http://...` is click's "unexpected extra argument", followed by a hint
    that an --input is one KEY=VALUE argument; exit 2."""
    done = bw(tmp_path / "bw.db", "run", str(FLOW), "--input", "base_url", "http://127.0.0.1:9")
    assert done.exit_code == 2
    assert "unexpected extra argument" in done.output
    assert "each --input is one KEY=VALUE argument" in done.output
    assert not (tmp_path / "bw.db").exists()


def test_a_context_option_typo_names_the_file_line_and_the_option_meant(tmp_path: Path) -> None:
    """A misspelt static context option is refused at load with the flow file's line and the
    Playwright option it resembles; one computed from the inputs names where its function is."""
    static = tmp_path / "static_flow.py"
    static.write_text(
        'from browserworker import Flow\n\nflow = Flow("x", context={"locle": "fr-FR"})\n\n'
        "@flow.step\nasync def a(ctx):\n    pass\n"
    )
    with pytest.raises(FlowDefinitionError) as refused:
        load_flow(static)
    assert str(refused.value).startswith(f"{static.resolve()}:3: ")
    assert "'locle' (did you mean 'locale'?)" in str(refused.value)

    computed = tmp_path / "computed_flow.py"
    computed.write_text(
        "from browserworker import Flow\n\n"
        'flow = Flow("y", context=lambda inputs: {"http_credential": {"username": "u"}})\n\n'
        "@flow.step\nasync def a(ctx):\n    pass\n"
    )
    loaded = load_flow(computed).flow
    with pytest.raises(InputError) as bad:
        loaded.context_options(loaded.validate_inputs({}))
    assert f"context= at {computed.resolve()}:3" in str(bad.value)
    assert "'http_credential' (did you mean 'http_credentials'?)" in str(bad.value)


def test_a_sqlite_db_that_cannot_be_opened_says_why_and_creates_nothing(tmp_path: Path) -> None:
    """A directory, a missing parent directory and an immutable directory each get their reason
    (exit 2 from the CLI); the missing directory is not created."""
    with pytest.raises(StoreError, match="it is a directory"):
        open_store(tmp_path)
    missing = tmp_path / "no-such-dir" / "bw.db"
    with pytest.raises(StoreError, match="no-such-dir does not exist"):
        open_store(missing)
    assert not missing.parent.exists()
    done = bw(missing, "run", str(FLOW), "--input", "base_url=http://127.0.0.1:9", "--input", "item=tea")
    assert done.exit_code == 2 and "does not exist (create it first)" in done.output
    assert not missing.parent.exists()

    frozen = tmp_path / "frozen"
    frozen.mkdir()
    subprocess.run(["chattr", "+i", str(frozen)], check=True)
    try:
        with pytest.raises(
            StoreError,
            match="unable to open database file: its directory .* is not writable by this user, or is immutable",
        ):
            open_store(frozen / "bw.db")
    finally:
        subprocess.run(["chattr", "-i", str(frozen)], check=True)
    assert not (frozen / "bw.db").exists()


def test_the_library_logs_warnings_only_unless_the_application_configures_logging() -> None:
    """Imported from Python, browserworker's info lines stay quiet and its warnings reach
    stderr (as the CLI's default); an application's own structlog set-up is kept."""
    code = (
        "import structlog, browserworker\n"
        "log = structlog.get_logger('browserworker')\n"
        "log.info('an info line')\nlog.warning('a warning line')\n"
    )
    quiet = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert "a warning line" in quiet.stderr and "an info line" not in quiet.stderr + quiet.stdout
    own = (
        "import logging, structlog\n"
        "structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))\n" + code
    )
    kept = subprocess.run(
        [sys.executable, "-c", own], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert "an info line" in kept.stdout + kept.stderr


def test_show_gives_the_reason_for_every_lease_epoch(tmp_path: Path) -> None:
    """A hand-back (SIGTERM's release) and a lease expiry found by a reclaimer each appear in
    `show`'s decisions with their epoch and who: the epoch never jumps without a line."""
    db = tmp_path / "bw.db"
    store = SQLiteStore(db)
    store.enqueue(NewRun(id="r1", flow_name="f", inputs={}))
    first = store.claim_next(Owner("worker-a", "host", 1), ["default"], ttl=30)
    store.release_run("r1", first.lease_epoch, worker="worker-a")
    store.claim_next(Owner("worker-b", "host", 2), ["default"], ttl=30)
    backdate(store, "r1", 100, column="lease_expires_at")
    assert [r.id for r in store.reclaim_expired(skew=0, max_lease_losses=3, worker="worker-c")] == ["r1"]
    store.close()
    done = bw(db, "show", "r1")
    assert done.exit_code == 0, done.output
    lines = [line.split(" ", 3)[3] for line in done.output.splitlines() if " lease_" in line]
    assert lines == [
        "lease_claimed QUEUED->LEASED: claimed (epoch 1)",
        "lease_released LEASED->QUEUED: released by worker-a (epoch 1)",
        "lease_claimed QUEUED->LEASED: claimed (epoch 3)",
        "lease_expired LEASED->QUEUED: requeued (owner worker-b) (epoch 4)",
    ], lines


def test_worker_once_says_what_it_left_queued(tmp_path: Path) -> None:
    """`worker --once` with only a delayed run ends at once, leaves it QUEUED, and says so in
    its closing line and its --json (`left`)."""
    db = tmp_path / "bw.db"
    queued = bw(
        db,
        "enqueue",
        str(FLOW),
        "--input",
        "base_url=http://127.0.0.1:9",
        "--input",
        "item=tea",
        "--delay",
        "3600",
        "--run-id",
        "later",
    )
    assert queued.exit_code == 0, queued.output
    done = subprocess.run(
        [sys.executable, "-m", "browserworker", "worker", "--once", "--json", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "left queued: 1 delayed (--delay not ended)" in done.stderr
    assert json.loads(done.stdout)["left"] == {"delayed": 1}
    store = open_store(db)
    assert str(store.get_run("later").state) == "QUEUED"
    store.close()


def test_mcp_refuses_a_may_send_rule_that_is_not_one_and_creates_nothing(tmp_path: Path) -> None:
    """`mcp --may-send POST` (methods, no URL) exits 2 saying what to write, before the journal
    is opened: no database file."""
    db = tmp_path / "agent.db"
    result = CliRunner().invoke(main, ["mcp", "--may-send", "POST", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "--may-send" in result.output and "'POST *'" in result.output
    assert not db.exists()


def test_mcp_refuses_a_files_directory_that_is_not_one_and_creates_nothing(tmp_path: Path) -> None:
    """`mcp --files DIR` (or `--downloads DIR`) with no such directory (or a file) exits 2 naming
    the option and the path, before the journal is opened: no database file."""
    db, a_file = tmp_path / "agent.db", tmp_path / "notes.txt"
    a_file.write_text("x")
    for option in ("--files", "--downloads"):
        for given in (tmp_path / "missing", a_file):
            result = CliRunner().invoke(main, ["mcp", option, str(given), "--db", str(db)])
            assert result.exit_code == 2, result.output
            assert option in result.output and given.name in result.output
    assert not db.exists()
