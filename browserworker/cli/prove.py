"""The commands that prove flows before production: ``chaos`` (crash every effect at every
fault point), ``replay`` (a recording, offline) and ``sandbox`` (the demo shop)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .._faults import CHAOS_POINTS
from ..ops import Progress, print_chaos, terminal
from ..runtime import BrowserSettings
from . import process
from .app import main
from .options import FlowArgs, emit, flow_options, headed_option, json_option


@main.command()
@flow_options
@click.option(
    "--points",
    default="all",
    show_default=True,
    help=f"Comma-separated fault points, or 'all' ({', '.join(CHAOS_POINTS)}).",
)
@click.option("--step", "steps", multiple=True, help="Only these effect steps (repeatable).")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True, help="Runs per step and point.")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Scenarios run at once (each a run of its own: the target must take that many at once).",
)
@json_option("the results")
@click.pass_context
def chaos(
    ctx: click.Context, flow: FlowArgs, points: str, steps: tuple[str, ...], rounds: int, jobs: int, as_json: bool
) -> None:
    """Self-test each effect's verifier, then crash FLOW_FILE at every fault point of every
    effect, resume it, and check the target.

    The verifier must say not done before the dispatch and done after the effect, in a
    clean run. Landings are counted with the effect's @effect.count probe (or its verifier)
    on the real target. Exits 1 on a wrong verifier or any duplicate, lost or hung run.
    Each scenario runs in a throw-away database.
    """
    from ..prove import run_chaos

    request = flow.request()
    chosen = list(CHAOS_POINTS) if points == "all" else [p.strip() for p in points.split(",") if p.strip()]
    progress = None if as_json else lambda item: click.echo(f"  {item.describe()}", err=True)
    process.settle()
    report = run_chaos(
        request.loaded,
        request.inputs,
        points=chosen,
        rounds=rounds,
        browser=BrowserSettings.discover(),
        steps=steps,
        progress=progress,
        jobs=jobs,
    )
    emit(report.to_dict(), as_json, lambda: print_chaos(report, terminal()))
    for line in report.problems():
        click.echo(f"error: {line}", err=True)
    ctx.exit(0 if report.ok else 1)


@main.command()
@click.argument("recording")
@click.option(
    "--crash-at",
    metavar="STEP:POINT",
    help="Crash the replay there (SIGKILL; e.g. submit:after_dispatch, submit:reply_lost) and resume it.",
)
@click.option("--settle", type=click.FloatRange(min=0), help="Override every effect's settle time (seconds).")
@headed_option
@json_option("the replayed run and journal")
@click.pass_context
def replay(
    ctx: click.Context, recording: str, crash_at: str | None, settle: float | None, headed: bool, as_json: bool
) -> None:
    """Replay RECORDING (recordings/NAME or NAME) offline and compare it with the recording.

    Nothing leaves the machine. Exit 0 if the replay matches, 1 with a readable diff if not;
    with --crash-at, the resumed run's exit code (0 SUCCEEDED, 1 FAILED, 3 NEEDS_REVIEW).
    """
    from ..recording import replay as replay_recording

    process.settle()
    result = replay_recording(
        recording,
        crash_at=crash_at,
        settle=settle,
        browser=BrowserSettings.discover(headless=not headed),
        extensions=[Progress(sys.stderr)],
    )
    emit(result.journal, as_json, lambda: click.echo(result.report()))
    ctx.exit(result.exit_code)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8800, show_default=True, help="0 picks a free port.")
@click.option(
    "--db",
    "db",
    type=click.Path(dir_okay=False, path_type=Path),
    default="sandbox.db",
    show_default=True,
    help="The sandbox's own SQLite file (its orders outlive any worker).",
)
@click.option("--dedupe", is_flag=True, help="Deduplicate order POSTs on their reference.")
def sandbox(host: str, port: int, db: Path, dedupe: bool) -> None:
    """Serve the sandbox shop (login, order form, orders API, fault knobs) for demos and tests."""
    from ..sandbox import serve

    def ready(url: str) -> None:
        click.echo(f"sandbox listening on {url} (orders in {db}); Ctrl-C to stop")

    process.settle()
    serve(host=host, port=port, db_path=str(db), dedupe=dedupe, ready=ready)
