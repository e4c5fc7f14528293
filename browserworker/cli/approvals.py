"""``approvals``, ``approve``, ``reject``: the requests waiting for a person before they dispatch."""

from __future__ import annotations

import time

import click

from .. import control
from ..store.records import ApprovalRecord
from .app import main
from .invocation import invocation
from .options import db_option, emit, json_option


def _line(a: ApprovalRecord) -> str:
    waited = time.time() - a.created_at
    left = a.expires_at - time.time()
    return (
        f"{a.run_id}  {a.flow_name}  {a.step_id}  key={a.request_key}  {a.summary.get('method')} "
        f"{a.summary.get('url')}  waiting {waited:.0f}s, expires in {left:.0f}s"
        + (f"\n  screenshot: {a.screenshot}" if a.screenshot else "")
    )


@main.command("approvals")
@db_option
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@json_option("the waiting approvals")
def approvals_command(limit: int, as_json: bool) -> None:
    """List the requests waiting for approval: run, flow, step, request key, the request
    (secrets masked), screenshot, waiting since, expires at."""
    found = control.list_approvals(invocation().store(create=False), limit=limit)
    emit(
        [a.to_dict() for a in found],
        as_json,
        lambda: click.echo("\n".join(_line(a) for a in found) if found else "no approvals waiting"),
    )


_by = click.option("--by", "who", metavar="NAME", help="Who decides (default: the login name).")


@main.command()
@click.argument("run_id")
@click.argument("step")
@_by
@db_option
@json_option("the decided approval")
def approve(run_id: str, step: str, who: str | None, as_json: bool) -> None:
    """Approve the request STEP of RUN_ID waits with: the run dispatches it. Who and when are journaled."""
    done = control.approve(invocation().store(create=False), run_id, step, who=who)
    emit(done.to_dict(), as_json, lambda: click.echo(f"approved {run_id} {step} ({done.decided_by})"))


@main.command()
@click.argument("run_id")
@click.argument("step")
@click.option("--reason", metavar="TEXT", help="Why (journaled, shown in the run's error).")
@_by
@db_option
@json_option("the decided approval")
def reject(run_id: str, step: str, reason: str | None, who: str | None, as_json: bool) -> None:
    """Reject the request STEP of RUN_ID waits with: nothing is sent and the run ends FAILED."""
    done = control.reject(invocation().store(create=False), run_id, step, who=who, reason=reason)
    emit(done.to_dict(), as_json, lambda: click.echo(f"rejected {run_id} {step} ({done.decided_by})"))
