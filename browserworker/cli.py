"""The ``browserworker`` command: a thin face over the library.

Each command parses its options, calls one library function and prints. Exit codes of
``run``: 0 SUCCEEDED, 1 FAILED, 2 usage error / bad input / bad flow (nothing written),
3 NEEDS_REVIEW, 4 CANCELLED, 5 stopped without an outcome (lease lost or store failure;
resume with ``--run-id``), 7 (``--record``) the run SUCCEEDED but a verifier failed its self-test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from .browser import BrowserSettings
from . import jobs
from .faults import CHAOS_POINTS
from .errors import BrowserNotFound, LeaseLost, QueueFull, StoreError, UsageError
from .leases import LeaseSettings
from .loader import load_flow, parse_inputs
from .logs import configure_logging
from .engine import Engine
from .runner import RunRequest, prepare_run, validate_run_id
from .states import RunState
from .store.sqlite import SQLiteStore
from .views import Progress, journal_view, print_chaos, print_journal, print_runs, run_summary

if TYPE_CHECKING:
    from rich.console import Console

    from .worker import Worker

EXIT_CODES = {
    RunState.SUCCEEDED: 0,
    RunState.FAILED: 1,
    RunState.NEEDS_REVIEW: 3,
    RunState.CANCELLED: 4,
}
EXIT_USAGE = 2
EXIT_INTERRUPTED = 5
EXIT_QUEUE_FULL = 6
EXIT_VERIFIER_BROKEN = 7
DEFAULT_DB = "browserworker.db"

db_option = click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), envvar="BROWSERWORKER_DB",
                         default=DEFAULT_DB, show_default=True, show_envvar=True, help="The journal database.")


class UsageFailure(click.ClickException):
    """A one-line error with exit code 2."""

    exit_code = EXIT_USAGE


def _fail(message: str) -> NoReturn:
    raise UsageFailure(message)


def _console() -> Console:
    from rich.console import Console  # imported here: `run` and `worker` never print tables

    return Console()


def _evidence_dir(db: Path) -> Path:
    """Screenshots kept as review evidence live beside the database."""
    return db.parent / f"{db.name}.evidence"


def _open_store(db: Path, *, create: bool = True) -> SQLiteStore:
    try:
        return SQLiteStore(db, create=create)
    except StoreError as exc:
        _fail(str(exc))


class _Commands(click.Group):
    """The command group; a store that fails mid-command (locked past the busy timeout, disk
    full, read-only) is one line on stderr and exit 5, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StoreError as exc:
            click.echo(f"error: store unavailable: {exc}", err=True)
            ctx.exit(EXIT_INTERRUPTED)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--record", "record_name", metavar="NAME",
              help="Record the run into recordings/NAME (or a path) for offline replay in tests.")
@click.option("--trace", is_flag=True, help="With --record: also keep a Playwright trace (screenshots) per step.")
def run(flow_file: Path, flow_name: str | None, pairs: tuple[str, ...], inputs_json: str | None, run_id: str | None,
        db: Path, headed: bool, lease_ttl: float, as_json: bool, record_name: str | None, trace: bool) -> None:
    """Run FLOW_FILE to the end in this process (or resume --run-id).

    Exit codes: 0 SUCCEEDED, 1 FAILED, 2 bad usage/input/flow (nothing written),
    3 NEEDS_REVIEW, 4 CANCELLED, 5 stopped without an outcome (lease lost, store failure),
    7 with --record: the run SUCCEEDED but a verifier failed its self-test (verifier BROKEN).
    """
    if trace and not record_name:
        _fail("--trace needs --record NAME")
    try:
        loaded = load_flow(flow_file, flow_name)
        inputs = parse_inputs(pairs, inputs_json)
        given = bool(pairs or inputs_json is not None)
        if run_id is not None:  # an empty --run-id "$ID" is refused, never taken for a new run
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
    except StoreError as exc:  # locked past the busy timeout, disk full, read-only: nothing was written
        store.close()
        click.echo(f"error: store unavailable, no run started: {exc}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    click.echo(f"run {record.id} {'created' if created else 'resumed'} ({loaded.flow.name}, db {db})", err=True)
    if not as_json:
        click.echo(record.id)
    broken: list[str] = []
    engine = Engine(store, browser=browser, lease=LeaseSettings(ttl=lease_ttl), extensions=[Progress(err)],
                    evidence_dir=_evidence_dir(db))
    try:
        if record_name:  # the same run, with its network, journal and verifier self-tests recorded
            from .recording import record as record_flow
            recorded = asyncio.run(_with_signals(lambda stop: record_flow(
                engine, loaded, record, name=record_name, trace=trace, stop=stop)))
            final, broken = recorded.run, recorded.broken
        else:
            final = asyncio.run(_with_signals(lambda stop: engine.run(loaded, record, stop=stop)))
    except LeaseLost as exc:
        click.echo(f"error: lease lost, stopped without dispatching anything more: {exc}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except StoreError as exc:
        click.echo(f"error: store unavailable, run {record.id} stopped without an outcome: {exc}; "
                   f"resume it with --run-id {record.id}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrowserNotFound as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except UsageError as exc:
        _fail(str(exc))
    if final.state == RunState.QUEUED:
        click.echo(f"run {final.id} stopped and handed back (QUEUED); resume with --run-id {final.id}", err=True)
    else:
        click.echo(f"run {final.id}: {final.state}" + (f" ({final.error})" if final.error else ""), err=True)
    if as_json:
        click.echo(json.dumps(journal_view(store, final), indent=2, default=str))
    store.close()
    code = EXIT_CODES.get(final.state, EXIT_INTERRUPTED)
    if broken:
        click.echo(f"error: verifier BROKEN for {', '.join(broken)} (its self-test above): recovery after a crash "
                   "would trust it; the recording is written", err=True)
        if code == 0:
            code = EXIT_VERIFIER_BROKEN
    sys.exit(code)


@main.command()
@click.argument("flow_file", type=click.Path(path_type=Path))
@click.option("--flow", "flow_name", help="Which flow, when the file defines several.")
@click.option("--input", "pairs", multiple=True, metavar="KEY=VALUE", help="An input field (repeatable).")
@click.option("--inputs-json", metavar="JSON", help="All inputs as a JSON object (--input wins).")
@click.option("--run-id", help="Name the run (default: a fresh id).")
@click.option("--queue", default="default", show_default=True, help="The queue to put it on.")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--delay", type=click.FloatRange(min=0), default=0.0, help="Seconds before it may start.")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the queued run as JSON.")
def enqueue(flow_file: Path, flow_name: str | None, pairs: tuple[str, ...], inputs_json: str | None,
            run_id: str | None, queue: str, priority: int, delay: float, db: Path, as_json: bool) -> None:
    """Queue a run of FLOW_FILE for the workers; prints its run id.

    Inputs are validated now (bad input: exit 2, nothing queued). A full queue refuses the
    run with exit 6 (backpressure), nothing written.
    """
    try:
        loaded = load_flow(flow_file, flow_name)
        inputs = parse_inputs(pairs, inputs_json)
        loaded.flow.validate_inputs(inputs)
        if run_id is not None:
            validate_run_id(run_id)
    except UsageError as exc:
        _fail(str(exc))
    store = _open_store(db)
    try:
        record = jobs.enqueue(store, loaded, inputs, run_id=run_id, queue=queue, priority=priority, delay=delay)
    except QueueFull as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_QUEUE_FULL)
    except UsageError as exc:
        _fail(str(exc))
    finally:
        store.close()
    click.echo(json.dumps(run_summary(record)) if as_json else record.id)


@main.command()
@click.option("--flows", "flow_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directories of flow files (repeatable); default: each run's own flow file.")
@click.option("--queue", "queues", multiple=True, help="Queues to serve (repeatable).  [default: default]")
@click.option("--concurrency", "-n", type=click.IntRange(min=1, max=64), default=1, show_default=True,
              help="Runs at once, each in its own context of one Chromium.")
@click.option("--lease-ttl", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="Lease time-to-live in seconds; heartbeats every TTL/3.")
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds in-flight steps may take to finish after SIGTERM/SIGINT.")
@click.option("--max-lease-losses", type=click.IntRange(min=1), default=3, show_default=True,
              help="A run that lost its lease more often goes to NEEDS_REVIEW.")
@click.option("--once", is_flag=True, help="Exit when the queues are empty and nothing is running.")
@db_option
@click.option("--headed", is_flag=True, help="Show the browser window.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus /metrics on this port.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for --metrics-port.")
def worker(flow_dirs: tuple[Path, ...], queues: tuple[str, ...], concurrency: int, lease_ttl: float, grace: float,
           max_lease_losses: int, once: bool, db: Path, headed: bool, metrics_port: int | None,
           metrics_host: str) -> None:
    """Drain the queue: claim runs and execute up to --concurrency at once on one Chromium.

    SIGTERM/SIGINT: stop claiming, let in-flight steps finish within --grace, and hand runs
    back at their next step boundary (no waiting for lease expiry). A second signal exits
    at once.
    """
    from .worker import WorkerSettings  # imported here: keeps `run`'s start-up short

    try:
        browser = BrowserSettings.discover(headless=not headed)
        for q in queues:
            jobs.validate_queue(q)
        settings = WorkerSettings(queues=list(queues) or ["default"], concurrency=concurrency,
                                  grace=grace, max_lease_losses=max_lease_losses,
                                  once=once, flow_dirs=list(flow_dirs))
        store = _open_store(db)
        fleet_worker = Engine(store, browser=browser, lease=LeaseSettings(ttl=lease_ttl),
                              evidence_dir=_evidence_dir(db)).worker(settings)
    except (UsageError, BrowserNotFound, ValueError) as exc:
        _fail(str(exc))
    click.echo(f"worker {fleet_worker.id} serving {', '.join(settings.queues)} (concurrency {concurrency}, db {db})",
               err=True)
    from .metrics import MetricsServer

    try:
        exporter = None if metrics_port is None else MetricsServer(db, metrics_port, metrics_host)
    except OSError as exc:
        store.close()
        _fail(f"--metrics-port {metrics_port}: cannot listen on {metrics_host}: {exc}")
    if exporter is not None:
        click.echo(f"metrics on {exporter.url}", err=True)
    try:
        stats = asyncio.run(_serve(fleet_worker))
    finally:
        if exporter is not None:
            exporter.close()
    click.echo(f"worker {fleet_worker.id} stopped: claimed {stats.claimed}, finished {stats.finished}, "
               f"released {stats.released}, lease lost {stats.lease_lost}, reclaimed {stats.reclaimed}", err=True)
    store.close()


async def _with_signals(start: Callable[[asyncio.Event], Awaitable[Any]]) -> Any:
    """Run ``start(stop)``; the first SIGTERM/SIGINT sets ``stop``, a second exits at once."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            os._exit(EXIT_INTERRUPTED)
        click.echo("stopping at the next step boundary (again to quit at once)", err=True)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    return await start(stop)


async def _serve(fleet_worker: Worker) -> Any:
    loop = asyncio.get_running_loop()
    signals = {"count": 0}

    def on_signal() -> None:
        signals["count"] += 1
        if signals["count"] > 1:
            os._exit(EXIT_INTERRUPTED)  # a second signal: exit at once, leases expire
        fleet_worker.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    return await fleet_worker.run()


@main.command()
@click.argument("flow_file", type=click.Path(path_type=Path))
@click.option("--flow", "flow_name", help="Which flow, when the file defines several.")
@click.option("--input", "pairs", multiple=True, metavar="KEY=VALUE", help="An input field (repeatable).")
@click.option("--inputs-json", metavar="JSON", help="All inputs as a JSON object (--input wins).")
@click.option("--points", default="all", show_default=True,
              help=f"Comma-separated fault points, or 'all' ({', '.join(CHAOS_POINTS)}).")
@click.option("--step", "steps", multiple=True, help="Only these effect steps (repeatable).")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True, help="Runs per step and point.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def chaos(flow_file: Path, flow_name: str | None, pairs: tuple[str, ...], inputs_json: str | None, points: str,
          steps: tuple[str, ...], rounds: int, as_json: bool) -> None:
    """Self-test each effect's verifier, then crash FLOW_FILE at every fault point of every
    effect, resume it, and check the target.

    The verifier must say not done before the dispatch and done after the effect, in a
    clean run. Landings are counted with the effect's @effect.count probe (or its verifier)
    on the real target. Exits 1 on a wrong verifier or any duplicate, lost or hung run.
    Each scenario runs in a throw-away database.
    """
    from .chaos import run_chaos

    try:
        loaded = load_flow(flow_file, flow_name)
        inputs = parse_inputs(pairs, inputs_json)
        loaded.flow.validate_inputs(inputs)
        browser = BrowserSettings.discover()
        chosen = list(CHAOS_POINTS) if points == "all" else [p.strip() for p in points.split(",") if p.strip()]
        report = run_chaos(loaded, inputs, points=chosen, rounds=rounds, browser=browser, steps=steps,
                           progress=None if as_json else lambda item: click.echo(f"  {item.describe()}", err=True))
    except (UsageError, BrowserNotFound) as exc:
        _fail(str(exc))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        print_chaos(report, _console())
    for line in report.problems():
        click.echo(f"error: {line}", err=True)
    sys.exit(0 if report.ok else 1)


@main.command()
@click.argument("run_id")
@db_option
def cancel(run_id: str, db: Path) -> None:
    """Cancel a run: a queued one at once; a running one at its next step boundary
    (never between an effect's intent and its outcome)."""
    store = _open_store(db, create=False)
    try:
        outcome = jobs.cancel(store, run_id)
    except UsageError as exc:
        _fail(str(exc))
    finally:
        store.close()
    messages = {"cancelled": f"run {run_id} CANCELLED",
                "requested": f"run {run_id} is running: it stops at its next step boundary"}
    if outcome not in messages:
        _fail(f"run {run_id} is already {outcome}")
    click.echo(messages[outcome])


@main.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def review(db: Path, as_json: bool) -> None:
    """List runs waiting for a person (NEEDS_REVIEW), with their UNKNOWN steps and evidence."""
    store = _open_store(db, create=False)
    try:
        items = jobs.review_items(store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([i.to_dict() for i in items], indent=2, default=str))
        return
    if not items:
        click.echo("nothing to review")
    for item in items:
        click.echo(f"run {item.run_id} ({item.flow}): {item.reason or ''}")
        if item.step_id:
            ev = item.evidence
            click.echo(f"  step {item.step_id} #{item.attempt_no}  key {item.request_key}  fp {item.fingerprint}")
            for resp in ev.get("responses", []):
                click.echo(f"    {resp['method']} {resp['url']} -> {resp['status'] or resp['failure'] or 'no response'}")
            for key in ("page_url", "screenshot", "reason"):
                if ev.get(key):
                    click.echo(f"    {key}: {ev[key]}")
            click.echo(f"  resolve: browserworker resolve {item.run_id} {item.step_id} --done|--not-done|--failed")


@main.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--done", "decision", flag_value="done", help="It landed: skip the step on re-run.")
@click.option("--not-done", "decision", flag_value="not_done", help="It did not land: replay with the same key.")
@click.option("--failed", "decision", flag_value="failed", help="End the run FAILED.")
@click.option("--result", "result_json", metavar="JSON", help="With --done: the step's result.")
@db_option
def resolve(run_id: str, step: str, decision: str | None, result_json: str | None, db: Path) -> None:
    """Decide an UNKNOWN step of a NEEDS_REVIEW run; the decision (who, when) is journaled
    and the run is re-queued (or ends FAILED)."""
    if decision is None:
        _fail("say what happened: --done, --not-done or --failed")
    if result_json is not None and decision != "done":
        _fail("--result goes with --done")
    try:
        result = json.loads(result_json) if result_json is not None else None
    except json.JSONDecodeError as exc:
        _fail(f"--result is not valid JSON: {exc.msg}")
    store = _open_store(db, create=False)
    try:
        run = jobs.resolve(store, run_id, step, decision, result=result)
    except UsageError as exc:
        _fail(str(exc))
    finally:
        store.close()
    click.echo(f"run {run_id} {run.state}" + (" (a worker will pick it up)" if run.state == RunState.QUEUED else ""))


@main.command("queue")
@click.argument("name")
@click.option("--max-depth", type=click.IntRange(min=0), help="Refuse enqueues beyond this many QUEUED runs.")
@click.option("--unlimited", is_flag=True, help="Remove the depth limit.")
@db_option
def queue_command(name: str, max_depth: int | None, unlimited: bool, db: Path) -> None:
    """Show or set a queue's maximum depth (backpressure)."""
    try:
        jobs.validate_queue(name)
    except UsageError as exc:
        _fail(str(exc))
    store = _open_store(db)
    try:
        if unlimited or max_depth is not None:
            store.set_queue_limit(name, None if unlimited else max_depth)
        limit = store.queue_limits().get(name)
    finally:
        store.close()
    click.echo(f"queue {name}: max depth {'unlimited' if limit is None else limit}")


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
        print_journal(view, _console())


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
        print_runs(found, _console())


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


@main.command()
@click.argument("recording")
@click.option("--crash-at", metavar="STEP:POINT",
              help="Crash the replay there (SIGKILL; e.g. submit:after_dispatch, submit:reply_lost) and resume it.")
@click.option("--settle", type=click.FloatRange(min=0), help="Override every effect's settle time (seconds).")
@click.option("--headed", is_flag=True, help="Show the browser window.")
@click.option("--json", "as_json", is_flag=True, help="Print the replayed run and journal as JSON on stdout.")
def replay(recording: str, crash_at: str | None, settle: float | None, headed: bool, as_json: bool) -> None:
    """Replay RECORDING (recordings/NAME or NAME) offline and compare it with the recording.

    Nothing leaves the machine. Exit 0 if the replay matches, 1 with a readable diff if not;
    with --crash-at, the resumed run's exit code (0 SUCCEEDED, 1 FAILED, 3 NEEDS_REVIEW).
    """
    from .recording import ReplayError, replay as replay_recording

    try:
        result = replay_recording(recording, crash_at=crash_at, settle=settle,
                                  browser=BrowserSettings.discover(headless=not headed), extensions=[Progress(sys.stderr)])
    except (UsageError, BrowserNotFound, ReplayError) as exc:
        _fail(str(exc))
    click.echo(json.dumps(result.journal, indent=2, default=str) if as_json else result.report())
    sys.exit(result.exit_code)


# -- operations: status, metrics, health, backup, restore, check-db ----------------------


@main.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def status(db: Path, as_json: bool) -> None:
    """Queues (depth, oldest age, UNKNOWN), runs by state, lease expiries and workers."""
    from .metrics import snapshot
    from .ops_views import print_status

    store = _open_store(db, create=False)
    try:
        snap = snapshot(store, histograms=False)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(snap.to_dict(), indent=2))
    else:
        print_status(snap, _console())


@main.command()
@db_option
def metrics(db: Path) -> None:
    """Print the metrics in the Prometheus text format (what worker --metrics-port serves)."""
    from .metrics import exposition

    store = _open_store(db, create=False)
    try:
        text = exposition(store)
    finally:
        store.close()
    click.echo(text.decode(), nl=False)


@main.command("health")
@db_option
@click.option("--max-queue-age", default="5m", show_default=True, metavar="DURATION",
              help="Oldest claimable QUEUED run of any queue (or off).")
@click.option("--max-unknown", default="off", show_default=True, metavar="N",
              help="Effect attempts UNKNOWN now, in all (or off).")
@click.option("--max-unknown-growth", default="0/10m", show_default=True, metavar="N/WINDOW",
              help="New, still unresolved UNKNOWN attempts per queue in the window (or off).")
@click.option("--max-stale-workers", default="0", show_default=True, metavar="N",
              help="Workers that stopped heartbeating without stopping cleanly (or off).")
@click.option("--stale-after", default="60s", show_default=True, metavar="DURATION",
              help="A worker without a heartbeat for this long is stale.")
def health_command(db: Path, max_queue_age: str, max_unknown: str, max_unknown_growth: str, max_stale_workers: str,
                   stale_after: str) -> None:
    """Exit 0 when healthy; else 1, with one line per breached rule (for cron, systemd, probes)."""
    from .health import check_store, rules_from_options

    try:
        rules = rules_from_options(max_queue_age=max_queue_age, max_unknown=max_unknown,
                                   max_unknown_growth=max_unknown_growth, max_stale_workers=max_stale_workers,
                                   stale_after=stale_after)
    except UsageError as exc:
        _fail(str(exc))
    store = _open_store(db, create=False)
    try:
        breaches = check_store(store, rules)
    finally:
        store.close()
    if not breaches:
        click.echo("healthy")
        return
    for breach in breaches:
        click.echo(str(breach))
    sys.exit(1)


@main.command("backup")
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@db_option
def backup_command(dest: Path, db: Path) -> None:
    """Copy the database to DEST, consistently, while workers run (SQLite's backup API)."""
    from .backup import backup
    from .ops_views import backup_line

    try:
        report = backup(db, dest)
    except (UsageError, StoreError) as exc:
        _fail(str(exc))
    click.echo(backup_line(report))


@main.command("restore")
@click.argument("src", type=click.Path(dir_okay=False, path_type=Path))
@db_option
def restore_command(src: Path, db: Path) -> None:
    """Replace the database with the backup SRC; refused while the database is in use.

    The replaced database is kept beside it. Unfinished runs reconcile every effect that
    the backup does not show as done (verifier or review) before anything is dispatched.
    """
    from .backup import restore
    from .ops_views import restore_lines

    try:
        report = restore(src, db)
    except (UsageError, StoreError) as exc:
        _fail(str(exc))
    for line in restore_lines(report):
        click.echo(line)


@main.command("check-db")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def check_db_command(db: Path, as_json: bool) -> None:
    """Report the database's integrity and schema version; exit 1 if it has problems."""
    from .backup import check_db
    from .ops_views import check_lines

    try:
        report = check_db(db)
    except UsageError as exc:
        _fail(str(exc))
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else "\n".join(check_lines(report)))
    sys.exit(0 if report.ok else 1)


def run_cli(args: list[str] | None = None) -> Any:  # pragma: no cover - convenience for python -m
    return main.main(args=args, prog_name="browserworker")


if __name__ == "__main__":  # pragma: no cover
    run_cli()
