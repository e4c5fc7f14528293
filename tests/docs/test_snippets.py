"""The README's and the docs' code runs as shown against the bundled sandbox shop.

The code blocks are read out of the Markdown files themselves (the README on GitHub cannot
include files), so a page that drifts from the kit fails here. The one substitution: the
pages start the sandbox on port 8800 (`browserworker sandbox --port 8800 &`); the tests use
the session's sandbox on a free port instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from browserworker.cli import main
from tests.support.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS_URL = "http://127.0.0.1:8800"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def blocks(page: Path, lang: str) -> list[str]:
    """The fenced code blocks of ``page`` in language ``lang`` (``""``: unlabelled), in order."""
    return [body for found, body in _FENCE.findall(page.read_text()) if found == lang]


def command_lines(page: Path) -> list[str]:
    """Every ``browserworker ...`` command in the page's shell blocks, and after a ``$ `` prompt in
    its console and plain blocks (the rest is output); ``\\`` continuations joined."""
    found = []
    for lang in ("sh", "console", ""):
        for body in blocks(page, lang):
            for line in body.replace("\\\n", " ").splitlines():
                line = line.strip()
                if lang != "sh" and not line.startswith("$ "):
                    continue
                line = line.removeprefix("$ ")
                if line.startswith("browserworker "):
                    found.append(line)
    return found


def argv_of(line: str) -> list[str]:
    """The arguments after ``browserworker`` (a ``$(...)`` substitution read as one word)."""
    words = shlex.split(re.sub(r"\$\([^)]*\)", "X", line), comments=True)
    return [w for w in words if w != "&"][1:]


def env_without_db() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("BROWSERWORKER_DB", "BROWSERWORKER_DB_SCHEMA")}


def bw(cwd: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "browserworker", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env_without_db(),
        timeout=120,
    )


@pytest.mark.browser
def test_the_readme_flow_runs_as_shown_against_the_sandbox(tmp_path: Path, shop: Any) -> None:
    """The README's flow, saved as `my_order.py`, and its "Run it" commands (`run`, `runs`,
    `show RUN_ID`) succeed against the sandbox: the run SUCCEEDED and the shop has exactly
    one order for its submit's request key (the flow signs in first: /orders/new needs it)."""
    [flow] = blocks(ROOT / "README.md", "python")
    run_it = (ROOT / "README.md").read_text().split("## Run it", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    assert "Save the flow above as `my_order.py`" in (ROOT / "README.md").read_text()
    (tmp_path / "my_order.py").write_text(flow)
    run_id = None
    lines = [line for line in run_it.splitlines() if line.startswith("browserworker ")]
    assert [argv_of(line)[0] for line in lines] == ["sandbox", "run", "runs", "show"]
    for line in lines[1:]:  # the sandbox is the session's (started on a free port)
        argv = argv_of(line.replace(DOCS_URL, shop.url))
        argv = [run_id if a == "RUN_ID" else a for a in argv]
        done = bw(tmp_path, argv)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        if argv[0] == "run":
            run_id = json.loads(bw(tmp_path, ["runs", "--json"]).stdout)[0]["id"]
    assert run_id is not None
    view = json.loads(bw(tmp_path, ["show", run_id, "--json"]).stdout)
    assert view["run"]["state"] == "SUCCEEDED"
    assert view["run"]["inputs"]["password"] != "demo"  # the secret input is masked in what show prints
    assert len(shop.orders(f"{run_id}/submit")) == 1


@pytest.mark.browser
def test_every_python_snippet_of_the_docs_runs(tmp_path: Path, shop: Any) -> None:
    """Every ```python block of README.md and docs/*.md runs: the blocks of one page in order,
    in one namespace (a later block continues an earlier one, as the page reads), in a fresh
    directory holding the repository's `flows/`. Those that run a flow (the `Engine` example)
    run it against the sandbox and must succeed; `Flow(...)` definitions must be accepted;
    test functions (docs/proving.md) are defined, not run (their fixtures are pytest's)."""
    (tmp_path / "flows").symlink_to(ROOT / "flows")
    before = len(shop.orders())
    ran: dict[str, int] = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for page in PAGES:
            namespace: dict[str, Any] = {"__name__": f"snippets_{page.stem}"}
            for n, code in enumerate(blocks(page, "python")):
                try:
                    exec(compile(code.replace(DOCS_URL, shop.url), f"{page.name}[{n}]", "exec"), namespace)
                except Exception as exc:  # noqa: BLE001 - name the block that failed
                    pytest.fail(f"{page.relative_to(ROOT)} python block {n + 1} fails: {exc!r}")
                ran[page.name] = ran.get(page.name, 0) + 1
    finally:
        os.chdir(cwd)
    assert ran == {
        "README.md": 1,
        "agents.md": 1,
        "approvals.md": 1,
        "budgets.md": 1,
        "fleet.md": 1,
        "flows.md": 6,
        "proving.md": 2,
        "sessions.md": 1,
    }
    assert len(shop.orders()) == before + 2  # the Engine example and the agent played by a script: one order each


@pytest.mark.browser
def test_the_writing_flows_example_places_an_order_on_the_sandbox(tmp_path: Path, shop: Any) -> None:
    """docs/flows.md's first flow, saved as a file, runs with `browserworker run` and places one
    order with the quantity given."""
    flow = blocks(ROOT / "docs" / "flows.md", "python")[0]
    (tmp_path / "order.py").write_text(flow)
    done = bw(
        tmp_path,
        [
            "run",
            "order.py",
            "--input",
            f"base_url={shop.url}",
            "--input",
            "item=tea",
            "--input",
            "quantity=3",
            "--run-id",
            "docs-flows-1",
        ],
    )
    assert done.returncode == 0, done.stderr
    [order] = shop.orders("docs-flows-1/submit")
    assert order["quantity"] == 3 and order["item"] == "tea"


def test_every_browserworker_command_in_the_docs_parses() -> None:
    """Each `browserworker ...` line in a shell or console block of README.md and docs/*.md
    names a real command with options it takes (parsed by the CLI itself, not run)."""
    checked = 0
    for page in PAGES:
        for line in command_lines(page):
            argv = argv_of(line)
            group: click.Command = main
            while isinstance(group, click.Group) and argv and argv[0] in group.list_commands(click.Context(group)):
                found = group.get_command(click.Context(group), argv[0])
                assert found is not None
                group, argv = found, argv[1:]
            assert group is not main, f"{page.name}: {line!r} names no command"
            try:
                group.make_context(group.name or "", list(argv), parent=click.Context(main))
            except click.ClickException as exc:
                pytest.fail(f"{page.name}: {line!r}: {exc.format_message()}")
            checked += 1
    assert checked > 30


def test_the_sessions_page_names_the_check_after_the_login_function() -> None:
    """docs/sessions.md and docs/flows.md call the check `@<login function>.check`, as the
    snippet defines it (`log_in`), not `@login.check`."""
    for page in ("sessions.md", "flows.md"):
        assert "@login.check" not in (ROOT / "docs" / page).read_text()
    assert "@log_in.check" in blocks(ROOT / "docs" / "sessions.md", "python")[0]


def test_the_sandbox_fault_knobs_are_documented_with_their_defaults(shop: Any) -> None:
    """docs/proving.md's knob table lists every knob of the sandbox's /api/faults, each with the
    default the running sandbox reports, and a PUT of an unknown knob is the 400 it describes."""
    from urllib.error import HTTPError
    from urllib.request import Request, urlopen

    page = (ROOT / "docs" / "proving.md").read_text().split("## The sandbox's fault knobs", 1)[1]
    table = dict(re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", page.split("\n## ", 1)[0], re.M))
    live = json.loads(urlopen(f"{shop.url}/api/faults", timeout=10).read())
    assert table == {name: json.dumps(value) for name, value in live.items()}
    bad = Request(
        f"{shop.url}/api/faults",
        data=b'{"drop_after_comit": true}',
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(HTTPError) as refused:
        urlopen(bad, timeout=10)
    assert refused.value.code == 400 and "drop_after_comit" in refused.value.read().decode()
