"""The commands that execute runs: ``run`` (here, now), ``enqueue`` (for the workers), ``worker``.

``run`` and ``worker`` go through the :class:`~browserworker.runtime._engine.Engine` and share one
signal set-up (:func:`on_signals`): the first SIGTERM/SIGINT stops at the next step
boundary, a second exits at once with code 5 (leases then expire).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import control
from ..errors import UsageError
from ..journal import LeaseSettings
from ..ops import Progress, broken_line, journal_view, outcome_line, run_summary, worker_line
from ..runtime import BrowserProcess, BrowserSettings
from ..states import TERMINAL_RUN_STATES, RunState
from ..store.records import RunRecord
from . import process
from .app import main
from .failures import EXIT_STOPPED, stage
from .invocation import invocation
from .options import FlowArgs, db_option, emit, flow_options, headed_option, json_option, lease_option

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime import Engine, RunRequest

T = TypeVar("T")

RUN_EXIT_CODES = {
    RunState.SUCCEEDED: 0,
    RunState.FAILED: 1,
    RunState.NEEDS_REVIEW: 3,
    RunState.CANCELLED: 4,
    RunState.AWAITING_APPROVAL: 8,
}
EXIT_VERIFIER_BROKEN = 7


@main.command()
@flow_options
@click.option("--run-id", help="Name the run, or resume the unfinished run with this id.")
@db_option
@headed_option
@lease_option
@json_option("the final run and journal")
@click.option(
    "--record",
    "record_name",
    metavar="NAME",
    help="Record the run into recordings/NAME (or a path) for offline replay in tests.",
)
@click.option("--trace", is_flag=True, help="With --record: also keep a Playwright trace (screenshots) per step.")
@click.option("--force", is_flag=True, help="With --record: replace a recording that already has that name.")
@click.pass_context
def run(
    ctx: click.Context,
    flow: FlowArgs,
    run_id: str | None,
    headed: bool,
    lease: LeaseSettings,
    as_json: bool,
    record_name: str | None,
    trace: bool,
    force: bool,
) -> None:
    """Run FLOW_FILE to the end in this process (or resume --run-id).

    Exit codes: 0 SUCCEEDED, 1 FAILED, 2 bad usage/input/flow (nothing written),
    3 NEEDS_REVIEW, 4 CANCELLED, 5 stopped without an outcome (lease lost, store failure),
    7 with --record: the run SUCCEEDED but a verifier failed its self-test (verifier BROKEN),
    8 AWAITING_APPROVAL (``browserworker approve``, then a worker or ``run --run-id`` dispatches it).
    """
    _check_record(record_name, trace, force)
    with _browser_first(BrowserSettings.discover(headless=not headed)) as (runner, browser):
        # opening a missing database creates it: a new run's inputs are checked before that
        request = flow.request(run_id, validate=not run_id or not invocation().exists())
        engine = invocation().engine(browser=browser.settings, lease=lease, extensions=[Progress(sys.stderr)])
        record = _prepare(engine, request, announce=not as_json)
        with stage(
            left=f", run {record.id} stopped without an outcome",
            hint=f"; resume it with --run-id {record.id}",
            under_way=True,
        ):
            process.settle()
            final, broken = _execute(runner, engine, request, record, browser, record_name, trace)
    ctx.exit(_report(engine, final, broken, as_json))


@contextmanager
def _browser_first(settings: BrowserSettings) -> Iterator[tuple[asyncio.Runner, BrowserProcess]]:
    """The event loop ``run`` runs on, with the browser's driver started on it first: node
    boots while this process loads the flow, pydantic and the runtime. The process exits after
    the run, so the browser closes quickly (``quick_close``); a driver the run did not use
    (bad input, nothing to run) is stopped on the way out."""
    with asyncio.Runner() as runner:
        browser = BrowserProcess(settings, quick_close=True)
        runner.run(browser.start_driver())
        try:
            yield runner, browser
        finally:
            runner.run(browser.close())


def _check_record(record_name: str | None, trace: bool, force: bool) -> None:
    """``--trace`` and ``--force`` need ``--record``; a recording is never replaced by accident
    (the tests that replay it would change meaning)."""
    for flag, given in (("--trace", trace), ("--force", force)):
        if given and not record_name:
            raise UsageError(f"{flag} needs --record NAME")
    if not record_name or force:
        return
    from ..recording.files import recording_path

    path = recording_path(record_name)
    if path.exists():
        raise UsageError(f"{path} already holds a recording: record under a new name, or add --force to replace it")


def _prepare(engine: Engine, request: RunRequest, *, announce: bool) -> RunRecord:
    """Create or find the run (a store failure here has started nothing) and say which."""
    with stage(left=", no run started"):
        record, created = engine.prepare(
            request.loaded, request.inputs, run_id=request.run_id, inputs_given=request.inputs_given
        )
    if record.state in TERMINAL_RUN_STATES:
        what = f"has already ended {record.state}; nothing run (`browserworker requeue {record.id}` runs it again)"
    else:
        what = "created" if created else "resumed"
    click.echo(f"run {record.id} {what} ({request.loaded.flow.name}, db {invocation().location})", err=True)
    if announce:
        click.echo(record.id)
    return record


def _execute(
    runner: asyncio.Runner,
    engine: Engine,
    request: RunRequest,
    run: RunRecord,
    browser: BrowserProcess,
    record_name: str | None,
    trace: bool,
) -> tuple[RunRecord, list[str]]:
    """Execute the run on ``browser`` (recording it with ``record_name``); returns the final
    run and the steps whose verifier failed its self-test."""
    stop = asyncio.Event()

    def first_signal() -> None:
        click.echo("stopping at the next step boundary (again to quit at once)", err=True)
        stop.set()

    if record_name:  # the same run, with its network, journal and verifier self-tests recorded
        from ..recording import record

        recorded = runner.run(
            on_signals(
                first_signal,
                record(engine, request.loaded, run, name=record_name, trace=trace, stop=stop, browser=browser),
            )
        )
        return recorded.run, list(recorded.broken)
    return runner.run(on_signals(first_signal, engine.run(request.loaded, run, stop=stop, browser=browser))), []


def _report(engine: Engine, final: RunRecord, broken: list[str], as_json: bool) -> int:
    """Say how the run ended; returns the exit code."""
    click.echo(outcome_line(final), err=True)
    if as_json:
        click.echo(json.dumps(journal_view(engine.store, final), indent=2, default=str))
    code = RUN_EXIT_CODES.get(final.state, EXIT_STOPPED)
    if broken:
        click.echo(broken_line(broken), err=True)
        code = code or EXIT_VERIFIER_BROKEN
    return code


async def on_signals(first: Callable[[], None], work: Awaitable[T]) -> T:
    """Await ``work``; the first SIGTERM/SIGINT calls ``first``, a second exits at once (code 5)."""
    loop = asyncio.get_running_loop()
    seen = False

    def on_signal() -> None:
        nonlocal seen
        if seen:
            os._exit(EXIT_STOPPED)  # a second signal: exit at once, leases expire
        seen = True
        first()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    return await work


@main.command()
@flow_options
@click.option("--run-id", help="Name the run (default: a fresh id).")
@click.option("--queue", default="default", show_default=True, help="The queue to put it on.")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--delay", type=click.FloatRange(min=0), default=0.0, help="Seconds before it may start.")
@db_option
@json_option("the queued run")
def enqueue(flow: FlowArgs, run_id: str | None, queue: str, priority: int, delay: float, as_json: bool) -> None:
    """Queue a run of FLOW_FILE for the workers; prints its run id.

    Inputs are validated now (bad input: exit 2, nothing queued). A full queue refuses the
    run with exit 6 (backpressure), nothing written.
    """
    request = flow.request(run_id)
    record = control.enqueue(
        invocation().store(), request.loaded, request.inputs, run_id=run_id, queue=queue, priority=priority, delay=delay
    )
    emit(run_summary(record), as_json, lambda: click.echo(record.id))


@main.command()
@click.option(
    "--flows",
    "flow_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directories of flow files (repeatable); default: each run's own flow file.",
)
@click.option("--queue", "queues", multiple=True, help="Queues to serve (repeatable).  [default: default]")
@click.option(
    "--concurrency",
    "-n",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Runs at once, each in its own context of one Chromium.",
)
@lease_option
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds in-flight steps may take to finish after SIGTERM/SIGINT.",
)
@click.option(
    "--max-lease-losses",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="A run that lost its lease more often goes to NEEDS_REVIEW.",
)
@click.option(
    "--wait-for-store",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds to keep trying a database server that cannot be reached at start (restarting, "
    "down); then exit 5 (store unavailable).",
)
@click.option(
    "--once",
    is_flag=True,
    help="Exit when nothing is claimable now and nothing is running; runs still "
    "delayed (--delay) or held by a site budget stay queued, and the closing line says how many.",
)
@db_option
@headed_option
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus /metrics on this port.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for --metrics-port.")
@json_option("what the worker did, when it stops,")
def worker(
    flow_dirs: tuple[Path, ...],
    queues: tuple[str, ...],
    concurrency: int,
    lease: LeaseSettings,
    grace: float,
    max_lease_losses: int,
    wait_for_store: float,
    once: bool,
    headed: bool,
    metrics_port: int | None,
    metrics_host: str,
    as_json: bool,
) -> None:
    """Drain the queue: claim runs and execute up to --concurrency at once on one Chromium.

    SIGTERM/SIGINT: stop claiming, let in-flight steps finish within --grace, and hand runs
    back at their next step boundary (no waiting for lease expiry). A second signal exits
    at once.
    """
    from ..runtime import WorkerSettings  # imported here: keeps `run`'s start-up short

    browser = BrowserSettings.discover(headless=not headed)
    settings = WorkerSettings(
        queues=[control.validate_queue(q) for q in queues] or ["default"],
        concurrency=concurrency,
        grace=grace,
        max_lease_losses=max_lease_losses,
        once=once,
        flow_dirs=list(flow_dirs),
    )
    invocation().store(wait=wait_for_store)
    counters = _counters(metrics_port)
    fleet = invocation().engine(browser=browser, lease=lease, extensions=counters).worker(settings)
    click.echo(
        f"worker {fleet.id} serving {', '.join(settings.queues)} (concurrency {concurrency}, db {invocation().location})",
        err=True,
    )
    with _metrics(metrics_port, metrics_host, *counters):
        process.settle()
        stats = asyncio.run(on_signals(fleet.request_stop, fleet.run()))
    click.echo(worker_line(fleet.id, stats), err=True)
    emit(dataclasses.asdict(stats), as_json, lambda: None)


def _counters(port: int | None) -> list[Any]:
    """The worker's own counters (an extension), when it serves ``/metrics``."""
    if port is None:
        return []
    from ..ops import ProcessCounters

    return [ProcessCounters()]


@contextmanager
def _metrics(port: int | None, host: str, counters: Any = None) -> Iterator[None]:
    """Serve ``/metrics`` on ``port`` (none: nothing) while the block runs."""
    if port is None:
        yield
        return
    from ..ops import MetricsServer

    try:
        exporter = MetricsServer(invocation().db, port, host, schema=invocation().schema, counters=counters)
    except OSError as exc:
        raise UsageError(f"--metrics-port {port}: cannot listen on {host}: {exc}") from exc
    click.echo(f"metrics on {exporter.url}", err=True)
    try:
        yield
    finally:
        exporter.close()
