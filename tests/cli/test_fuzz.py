"""Bad input, fuzzed (hypothesis): `--input` and `--inputs-json` values, run ids, flow files
that raise at import. Every refusal is one clear line with exit 2 and writes nothing: no
database file, or no new row in an existing one. The CLI runs in-process (CliRunner)."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from browserworker.cli import main
from browserworker.errors import UsageError
from browserworker.flow import load_flow, parse_inputs
from browserworker.runtime import validate_run_id
from browserworker.store import NewRun, SQLiteStore
from tests.support.paths import FLOWS

FLOW = FLOWS / "place_order.py"
LOADED = load_flow(FLOW)
GOOD = ("--input", "base_url=http://127.0.0.1:9", "--input", "item=tea")
FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# -- strategies ---------------------------------------------------------------------------------

FIELDS = ("base_url", "item", "quantity", "username", "password")
any_text = st.text(max_size=80)
keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=12))
field_pair = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(FIELDS), any_text)
pairs = st.lists(
    st.one_of(field_pair, field_pair, field_pair, st.builds(lambda k, v: f"{k}={v}", keys, any_text), any_text),
    max_size=4,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
inputs_json = st.one_of(
    st.none(),
    st.none(),
    st.none(),
    any_text,  # mostly not JSON at all
    json_values.map(json.dumps),  # JSON, mostly not an object
    st.dictionaries(st.one_of(st.sampled_from(FIELDS), any_text), json_values, max_size=5).map(json.dumps),
)
run_ids = st.one_of(
    st.text(max_size=200),
    st.sampled_from(
        [
            "../etc/passwd",
            "a/b",
            "..",
            ".",
            "/abs",
            "C:\\x",
            "a\\b",
            "~root",
            "a b",
            "-rf",
            "x'; DROP TABLE runs;--",
            "1 OR 1=1",
            "' OR ''='",
            "%",
            "_",
            "early'--",
            "a\x00b",
            "r\n2",
            "\u202eevil",
            "ü",
            "🙂",
            "a" * 129,
            "z" * 5000,
        ]
    ),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,140}", fullmatch=True),
)
RAISES = {
    "ValueError": "raise ValueError({msg!r})",
    "RuntimeError": "raise RuntimeError({msg!r})",
    "KeyError": "raise KeyError({msg!r})",
    "ZeroDivisionError": "({msg!r}, 1 / 0)",
    "ModuleNotFoundError": "import browserworker_no_such_module_xyz  # {msg!r}",
    "AssertionError": "assert False, {msg!r}",
    "TypeError": "len({msg!r}, 1)",
    "SystemExit": "import sys; sys.exit({msg!r})",
    "FlowBroken": "class FlowBroken(Exception): pass\nraise FlowBroken({msg!r})",
}


# -- helpers ------------------------------------------------------------------------------------


@contextmanager
def workdir(with_db: bool) -> Iterator[Path]:
    """A fresh directory; with ``with_db``, a database already holding one run ("early")."""
    with tempfile.TemporaryDirectory(prefix="bw-fuzz-") as tmp:
        db = Path(tmp) / "bw.db"
        if with_db:
            store = SQLiteStore(db)
            store.create_run(NewRun(id="early", flow_name="place-order", inputs={"base_url": "x", "item": "y"}))
            store.close()
        yield db


def invoke(db: Path, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"BROWSERWORKER_DB": str(db), "BROWSERWORKER_FAULTS": ""})


def rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(db)
    try:
        return {
            t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
            for t in ("runs", "attempts", "events", "outbox")
        }
    finally:
        conn.close()


def assert_refused(result: Result, *needles: str) -> None:
    """Exit 2, one line of error (no traceback, no crash), naming the problem."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def expected_inputs(raw_pairs: Sequence[str], raw_json: str | None) -> dict[str, Any] | None:
    """What the library makes of these inputs: the stored inputs, or None if they are invalid."""
    try:
        return LOADED.flow.dump_inputs(LOADED.flow.validate_inputs(parse_inputs(raw_pairs, raw_json)))
    except UsageError:
        return None


def input_args(raw_pairs: Sequence[str], raw_json: str | None) -> list[str]:
    args = [a for pair in raw_pairs for a in ("--input", pair)]
    return args + (["--inputs-json", raw_json] if raw_json is not None else [])


def valid_run_id(run_id: str) -> bool:
    try:
        validate_run_id(run_id)
    except UsageError:
        return False
    return True


# -- inputs -------------------------------------------------------------------------------------


@FUZZ
@given(raw_pairs=pairs, raw_json=inputs_json)
def test_fuzzed_bad_inputs_to_run_are_refused_before_any_write(raw_pairs: list[str], raw_json: str | None) -> None:
    """`run` with invalid `--input`/`--inputs-json` values: exit 2, one line, no database file."""
    assume(expected_inputs(raw_pairs, raw_json) is None)
    with workdir(with_db=False) as db:
        result = invoke(db, "run", str(FLOW), *input_args(raw_pairs, raw_json))
        assert_refused(result)
        assert not db.exists()


@FUZZ
@given(base=st.booleans(), raw_pairs=pairs, raw_json=inputs_json)
def test_fuzzed_inputs_to_enqueue_write_one_exact_row_or_nothing(
    base: bool, raw_pairs: list[str], raw_json: str | None
) -> None:
    """`enqueue` either stores exactly the validated inputs as one new run (exit 0) or refuses
    with one line and exit 2, leaving every existing row as it was."""
    if base:  # start from valid inputs, so that the fuzzed values decide
        raw_pairs = ["base_url=http://127.0.0.1:9", "item=tea", *raw_pairs]
    expected = expected_inputs(raw_pairs, raw_json)
    event("valid" if expected is not None else "refused")
    with workdir(with_db=True) as db:
        before = rows(db)
        result = invoke(db, "enqueue", str(FLOW), *input_args(raw_pairs, raw_json), "--run-id", "fuzzed")
        if expected is None:
            assert_refused(result)
            assert rows(db) == before
        else:
            assert result.exit_code == 0, result.output
            store = SQLiteStore(db)
            try:
                assert sorted(r.id for r in store.list_runs()) == ["early", "fuzzed"]
                assert store.get_run("fuzzed").inputs == expected
            finally:
                store.close()


# -- run ids ------------------------------------------------------------------------------------


@FUZZ
@given(run_id=run_ids)
def test_fuzzed_run_ids_are_exact_or_refused(run_id: str) -> None:
    """A run id is either stored exactly as given (valid ids) or refused with one line and
    exit 2 by `run` (no database file) and `enqueue` (no new row); path and SQL text change nothing."""
    with workdir(with_db=True) as db:
        before = rows(db)
        queued = invoke(db, "enqueue", str(FLOW), *GOOD, "--run-id", run_id)
        if valid_run_id(run_id):
            assert queued.exit_code == 0, queued.output
            assert queued.output.strip() == run_id
            after = rows(db)
            assert [r[0] for r in after["runs"]] == ["early", run_id] and after["attempts"] == []
            assert invoke(db, "show", run_id, "--json").exit_code == 0
        else:
            assert_refused(queued, "invalid run id")
            assert rows(db) == before
            assert not any(p.name != db.name and not p.name.startswith(db.name) for p in db.parent.iterdir())
    if not valid_run_id(run_id):
        with workdir(with_db=False) as fresh:
            assert_refused(invoke(fresh, "run", str(FLOW), *GOOD, "--run-id", run_id), "invalid run id")
            assert not fresh.exists()


@FUZZ
@given(run_id=run_ids)
def test_fuzzed_unknown_run_ids_for_show_cancel_resolve_change_nothing(run_id: str) -> None:
    """`show`, `cancel` and `resolve` of an id the database does not hold: exit 2, one line,
    every table unchanged (SQL-looking ids are data, never SQL)."""
    assume(run_id != "early")
    with workdir(with_db=True) as db:
        before = rows(db)
        # `--` so that an id starting with "-" is an argument, not an unknown option (click usage)
        for args in (("show", "--", run_id), ("cancel", "--", run_id), ("resolve", "--done", "--", run_id, "submit")):
            assert_refused(invoke(db, *args))
        assert rows(db) == before


# -- flow files that raise at import ------------------------------------------------------------


@FUZZ
@given(
    kind=st.sampled_from(sorted(RAISES)),
    msg=st.text(max_size=60),
    padding=st.integers(0, 30),
    in_function=st.booleans(),
)
def test_flow_files_raising_at_import_are_refused_with_file_and_line(
    kind: str, msg: str, padding: int, in_function: bool
) -> None:
    """A flow file whose import raises (any exception, even SystemExit, at any line, directly or
    from a function it calls): `run` and `enqueue` exit 2 with one line naming file:line and
    the exception, and write nothing."""
    statement = RAISES[kind].format(msg=msg)
    head = "from browserworker import Flow\n" + "# padding\n" * padding
    if in_function:
        body = "def build():\n" + "".join(f"    {ln}\n" for ln in statement.splitlines()) + "\n\nbuild()\n"
        line = head.count("\n") + statement.count("\n") + 2
    else:
        body = statement + "\n"
        line = head.count("\n") + statement.count("\n") + 1
    source = head + body + "flow = Flow('never-reached')\n"
    with workdir(with_db=True) as db:
        path = db.parent / "broken_flow.py"
        path.write_text(source, encoding="utf-8")
        before = rows(db)
        for command in ("enqueue", "run"):
            result = invoke(db, command, str(path), *GOOD)
            assert_refused(result, f"{path.resolve()}:{line}:", kind)
        assert rows(db) == before
    with workdir(with_db=False) as fresh:
        path = fresh.parent / "broken_flow.py"
        path.write_text(source, encoding="utf-8")
        assert_refused(invoke(fresh, "run", str(path), *GOOD))
        assert not fresh.exists()
