"""The ``browserworker`` command: a thin face over the library.

Each command parses its options, calls one library function and prints. Exit codes of
``run``: 0 SUCCEEDED, 1 FAILED, 2 usage error / bad input / bad flow (nothing written),
3 NEEDS_REVIEW, 4 CANCELLED, 5 stopped without an outcome (lease lost or store failure;
resume with ``--run-id``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from .browser import BrowserSettings
from .errors import BrowserNotFound, BrowserworkerError, LeaseLost, StoreError, UsageError
from .leases import LeaseSettings
from .loader import load_flow, parse_inputs
from .logs import configure_logging
from .runner import RunRequest, prepare_run, run_flow, validate_run_id
from .states import RunState
from .store.sqlite import SQLiteStore
from .views import Progress, journal_view, print_journal, print_runs, run_summary

EXIT_CODES = {
    RunState.SUCCEEDED: 0,
    RunState.FAILED: 1,
    RunState.NEEDS_REVIEW: 3,
    RunState.CANCELLED: 4,
}
EXIT_USAGE = 2
EXIT_INTERRUPTED = 5
DEFAULT_DB = "browserworker.db"

db_option = click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), envvar="BROWSERWORKER_DB",
                         default=DEFAULT_DB, show_default=True, show_envvar=True, help="The journal database.")


class UsageFailure(click.ClickException):
    """A one-line error with exit code 2."""

    exit_code = EXIT_USAGE


def _fail(message: str) -> NoReturn:
    raise UsageFailure(message)


def _open_store(db: Path, *, create: bool = True) -> SQLiteStore:
    try:
        return SQLiteStore(db, create=create)
    except StoreError as exc:
        _fail(str(exc))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="browserworker")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), envvar="BROWSERWORKER_LOG_LEVEL",
              default="warning", show_default=True, help="Structured log level (logs go to stderr).")
def main(log_level: str) -> None:
    """browserworker: run browser automations as durable, crash-safe work.

    Every click that changes the world is journaled as intent before it is sent, and after
    a crash a verifier proves what happened before anything is replayed.
    """
    configure_logging(log_level)


@main.command()
@click.argument("flow_file", type=click.Path(path_type=Path))
@click.option("--flow", "flow_name", help="Which flow, when the file defines several.")
@click.option("--input", "pairs", multiple=True, metavar="KEY=VALUE", help="An input field (repeatable).")
@click.option("--inputs-json", metavar="JSON", help="All inputs as a JSON object (--input wins).")
@click.option("--run-id", help="Name the run, or resume the unfinished run with this id.")
@db_option
@click.option("--headed", is_flag=True, help="Show the browser window.")
@click.option("--lease-ttl", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="Lease time-to-live in seconds (heartbeats every TTL/3).")
@click.option("--json", "as_json", is_flag=True, help="Print the final run and journal as JSON on stdout.")
def run(flow_file: Path, flow_name: str | None, pairs: tuple[str, ...], inputs_json: str | None, run_id: str | None,
        db: Path, headed: bool, lease_ttl: float, as_json: bool) -> None:
    """Run FLOW_FILE to the end in this process (or resume --run-id).

    Exit codes: 0 SUCCEEDED, 1 FAILED, 2 bad usage/input/flow (nothing written),
    3 NEEDS_REVIEW, 4 CANCELLED, 5 stopped without an outcome (lease lost, store failure).
    """
    try:
        loaded = load_flow(flow_file, flow_name)
        inputs = parse_inputs(pairs, inputs_json)
        given = bool(pairs or inputs_json is not None)
        if run_id:
            validate_run_id(run_id)
        if not run_id or not db.exists():
            loaded.flow.validate_inputs(inputs)
        browser = BrowserSettings.discover(headless=not headed)
    except (UsageError, BrowserNotFound) as exc:
        _fail(str(exc))
    store = _open_store(db)
    err = sys.stderr
    try:
        record, created = prepare_run(store, RunRequest(loaded=loaded, inputs=inputs, run_id=run_id,
                                                        inputs_given=given))
    except UsageError as exc:
        store.close()
        _fail(str(exc))
    click.echo(f"run {record.id} {'created' if created else 'resumed'} ({loaded.flow.name}, db {db})", err=True)
    if not as_json:
        click.echo(record.id)
    try:
        final = asyncio.run(run_flow(store, loaded, record, browser=browser, lease=LeaseSettings(ttl=lease_ttl),
                                     hooks=Progress(err)))
    except LeaseLost as exc:
        click.echo(f"error: lease lost, stopped without dispatching anything more: {exc}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except (StoreError, BrowserNotFound) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except UsageError as exc:
        _fail(str(exc))
    finally:
        pass
    click.echo(f"run {final.id}: {final.state}" + (f" ({final.error})" if final.error else ""), err=True)
    if as_json:
        click.echo(json.dumps(journal_view(store, final), indent=2, default=str))
    store.close()
    sys.exit(EXIT_CODES.get(final.state, EXIT_INTERRUPTED))


@main.command()
@click.argument("run_id")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def show(run_id: str, db: Path, as_json: bool) -> None:
    """Show a run and its per-step journal: states, keys, fingerprints, decisions, evidence."""
    store = _open_store(db, create=False)
    try:
        record = store.get_run(run_id)
        if record is None:
            _fail(f"no run {run_id!r} in {db}")
        view = journal_view(store, record)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(view, indent=2, default=str))
    else:
        print_journal(view, Console())


@main.command("runs")
@db_option
@click.option("--state", type=click.Choice([s.value for s in RunState], case_sensitive=False),
              help="Only runs in this state.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def runs_command(db: Path, state: str | None, limit: int, as_json: bool) -> None:
    """List runs, newest first."""
    store = _open_store(db, create=False)
    try:
        found = store.list_runs(RunState(state.upper()) if state else None, limit=limit)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([run_summary(r) for r in found], indent=2))
    else:
        print_runs(found, Console())


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8800, show_default=True, help="0 picks a free port.")
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), default="sandbox.db", show_default=True,
              help="The sandbox's own SQLite file (its orders outlive any worker).")
@click.option("--dedupe", is_flag=True, help="Deduplicate order POSTs on their reference.")
def sandbox(host: str, port: int, db: Path, dedupe: bool) -> None:
    """Serve the sandbox shop (login, order form, orders API, fault knobs) for demos and tests."""
    from .sandbox import serve

    def ready(url: str) -> None:
        click.echo(f"sandbox listening on {url} (orders in {db}); Ctrl-C to stop", err=False)

    serve(host=host, port=port, db_path=str(db), dedupe=dedupe, ready=ready)


def run_cli(args: list[str] | None = None) -> Any:  # pragma: no cover - convenience for python -m
    return main.main(args=args, prog_name="browserworker")


if __name__ == "__main__":  # pragma: no cover
    run_cli()
