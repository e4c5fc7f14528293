"""The commands about runs in the journal: ``show``, ``runs``, ``review``, ``resolve``, ``cancel``,
``requeue`` and ``queue`` (a queue's depth limit). Each reads or changes the store and prints the result."""

from __future__ import annotations

import click

from .. import control
from ..errors import RunNotFound, UsageError
from ..ops import (
    cancel_line,
    journal_view,
    print_journal,
    print_runs,
    queue_line,
    resolve_line,
    review_lines,
    run_summary,
    terminal,
)
from ..states import RunState
from .app import main
from .invocation import invocation
from .options import db_option, emit, json_option

who_option = click.option(
    "--who", metavar="NAME", help="Who decides, journaled with the decision (default: your user name)."
)


@main.command()
@click.argument("run_id")
@db_option
@json_option("the run and its journal")
def show(run_id: str, as_json: bool) -> None:
    """Show a run and its per-step journal: states, keys, fingerprints, decisions, evidence."""
    store = invocation().store(create=False)
    record = store.get_run(run_id)
    if record is None:
        raise RunNotFound(f"no run {run_id!r} in {invocation().location}")
    view = journal_view(store, record)
    emit(view, as_json, lambda: print_journal(view, terminal()))


@main.command("runs")
@db_option
@click.option(
    "--state", type=click.Choice([s.value for s in RunState], case_sensitive=False), help="Only runs in this state."
)
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@json_option("the runs")
def runs_command(state: str | None, limit: int, as_json: bool) -> None:
    """List runs, newest first."""
    found = invocation().store(create=False).list_runs(RunState(state.upper()) if state else None, limit=limit)
    emit([run_summary(r) for r in found], as_json, lambda: print_runs(found, terminal()))


@main.command()
@db_option
@json_option("the runs waiting for review")
def review(as_json: bool) -> None:
    """List runs waiting for a person (NEEDS_REVIEW), with their UNKNOWN steps and evidence."""
    items = control.review_items(invocation().store(create=False))
    emit([i.to_dict() for i in items], as_json, lambda: click.echo("\n".join(review_lines(items))))


@main.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--done", "decision", flag_value="done", help="It landed: skip the step on re-run.")
@click.option("--not-done", "decision", flag_value="not_done", help="It did not land: replay with the same key.")
@click.option("--failed", "decision", flag_value="failed", help="End the run FAILED.")
@click.option("--result", "result_json", metavar="JSON", help="With --done: the step's result.")
@who_option
@db_option
@json_option("the run")
def resolve(
    run_id: str, step: str, decision: str | None, result_json: str | None, who: str | None, as_json: bool
) -> None:
    """Decide an UNKNOWN step of a NEEDS_REVIEW run; the decision (who, when) is journaled
    and the run is re-queued (or ends FAILED)."""
    decided, result = control.parse_decision(decision, result_json)
    run = control.resolve(invocation().store(create=False), run_id, step, decided, result=result, who=who)
    emit(run_summary(run), as_json, lambda: click.echo(resolve_line(run)))


@main.command()
@click.argument("run_id")
@who_option
@db_option
@json_option("the outcome")
def cancel(run_id: str, who: str | None, as_json: bool) -> None:
    """Cancel a run: a queued one at once; a running one at its next step boundary
    (never between an effect's intent and its outcome)."""
    outcome = control.cancel(invocation().store(create=False), run_id, who=who)
    line = cancel_line(run_id, outcome)
    if line is None:
        raise UsageError(f"run {run_id} is already {outcome}")
    emit({"id": run_id, "outcome": outcome}, as_json, lambda: click.echo(line))


@main.command()
@click.argument("run_id")
@who_option
@db_option
@json_option("the run")
def requeue(run_id: str, who: str | None, as_json: bool) -> None:
    """Put a FAILED or CANCELLED run back in its queue, with its id and journal: SUCCEEDED steps
    are skipped, effects keep their request keys, and every step starts a fresh failure budget.
    The requeue (who, when) is journaled; a worker or `run --run-id` then runs it."""
    run = control.requeue(invocation().store(create=False), run_id, who=who)
    emit(run_summary(run), as_json, lambda: click.echo(f"run {run.id} requeued ({run.queue})"))


@main.command("queue")
@click.argument("name")
@click.option("--max-depth", type=click.IntRange(min=0), help="Refuse enqueues beyond this many QUEUED runs.")
@click.option("--unlimited", is_flag=True, help="Remove the depth limit.")
@db_option
@json_option("the queue's limit")
def queue_command(name: str, max_depth: int | None, unlimited: bool, as_json: bool) -> None:
    """Show or set a queue's maximum depth (backpressure)."""
    control.validate_queue(name)
    store = invocation().store()
    if unlimited or max_depth is not None:
        store.set_queue_limit(name, None if unlimited else max_depth)
    limit = store.queue_limits().get(name)
    emit({"queue": name, "max_depth": limit}, as_json, lambda: click.echo(queue_line(name, limit)))
