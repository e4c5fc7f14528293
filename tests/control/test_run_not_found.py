"""A run id the store does not hold raises :class:`RunNotFound` on every public path that takes
one (a :class:`UsageError`, so the CLI still exits 2), and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from browserworker import control
from browserworker._redact import Redactor
from browserworker.cli import main
from browserworker.errors import RunNotFound, UsageError
from browserworker.recording.recorder import journal_data
from browserworker.store import NewRun, SQLiteStore, SQLStore

UNKNOWN = "no-such-run"

PATHS: dict[str, Callable[[SQLStore], Any]] = {
    "control.cancel": lambda s: control.cancel(s, UNKNOWN, who="ann"),
    "control.requeue": lambda s: control.requeue(s, UNKNOWN, who="ann"),
    "control.resolve": lambda s: control.resolve(s, UNKNOWN, "submit", "done", who="ann"),
    "control.approve": lambda s: control.approve(s, UNKNOWN, "submit", who="ann"),
    "control.reject": lambda s: control.reject(s, UNKNOWN, "submit", who="ann", reason="no"),
    "control.approvals_of_run": lambda s: control.approvals_of_run(s, UNKNOWN),
    "store.cancel": lambda s: s.cancel(UNKNOWN, who="ann"),
    "store.requeue": lambda s: s.requeue(UNKNOWN, who="ann"),
    "store.resolve": lambda s: s.resolve(UNKNOWN, "submit", "done", who="ann"),
    "store.approvals.decide": lambda s: s.approvals.decide(UNKNOWN, "submit", "approve", who="ann"),
    "recording.journal_data": lambda s: journal_data(s, UNKNOWN, Redactor()),
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_an_unknown_run_raises_run_not_found(any_store: SQLStore, path: str) -> None:
    """Each path says ``no run '<id>'`` as a RunNotFound (a UsageError) and writes nothing."""
    any_store.create_run(NewRun(id="known", flow_name="f", inputs={}))
    before = (any_store.list_runs(), any_store.events("known"))
    with pytest.raises(RunNotFound, match=f"no run '{UNKNOWN}'") as raised:
        PATHS[path](any_store)
    assert isinstance(raised.value, UsageError)
    assert (any_store.list_runs(), any_store.events("known")) == before
    assert any_store.events(UNKNOWN) == []


def test_a_known_run_without_approvals_lists_none(any_store: SQLStore) -> None:
    """Only an unknown run raises: a run that asked for nothing has no approvals."""
    any_store.create_run(NewRun(id="known", flow_name="f", inputs={}))
    assert control.approvals_of_run(any_store, "known") == []


def test_the_bulk_actions_report_an_unknown_run_and_do_the_rest(any_store: SQLStore) -> None:
    any_store.enqueue(NewRun(id="known", flow_name="f", inputs={}))
    outcomes = control.cancel_many(any_store, ["known", UNKNOWN], who="ann")
    assert outcomes == {"known": "cancelled", UNKNOWN: f"error: no run '{UNKNOWN}'"}
    assert control.requeue_many(any_store, [UNKNOWN], who="ann") == {UNKNOWN: f"error: no run '{UNKNOWN}'"}


@pytest.mark.parametrize(
    "args",
    [
        ("show", UNKNOWN),
        ("cancel", UNKNOWN),
        ("requeue", UNKNOWN),
        ("resolve", UNKNOWN, "submit", "--done"),
        ("approve", UNKNOWN, "submit"),
        ("reject", UNKNOWN, "submit"),
    ],
    ids=lambda args: args[0],
)
def test_the_cli_exits_2_for_an_unknown_run(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Every command that takes a run id: one line naming the id, exit 2, nothing written."""
    db = tmp_path / "bw.db"
    store = SQLiteStore(db)
    store.create_run(NewRun(id="known", flow_name="f", inputs={}))
    store.close()
    result = CliRunner().invoke(main, list(args), env={"BROWSERWORKER_DB": str(db)})
    assert result.exit_code == 2, result.output
    assert f"no run '{UNKNOWN}'" in result.output and len(result.output.strip().splitlines()) == 1
    assert isinstance(result.exception, SystemExit)
    after = SQLiteStore(db)
    assert [r.id for r in after.list_runs()] == ["known"] and after.events(UNKNOWN) == []
    after.close()
