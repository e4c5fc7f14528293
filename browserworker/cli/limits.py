"""``browserworker limits``: the budgets of limit keys (see :mod:`browserworker.store.limit_rules`)."""

from __future__ import annotations

import click

from ..control import manage_limits
from ..ops import limit_lines
from .app import main
from .invocation import invocation
from .options import db_option, emit, json_option


@main.command("limits")
@click.argument("action", required=False, default="list", type=click.Choice(["list", "set", "clear"]))
@click.argument("key", required=False)
@click.option("--concurrency", type=int, metavar="N", help="set: runs of KEY at once, across the fleet.")
@click.option("--rate", metavar="N/UNIT", help="set: claims of KEY per second, minute or hour (N/s, N/min, N/h).")
@click.option("--all", "all_keys", is_flag=True, help="clear: every key's budget and pause.")
@db_option
@json_option("the keys")
def limits_command(
    action: str, key: str | None, concurrency: int | None, rate: str | None, all_keys: bool, as_json: bool
) -> None:
    """Budgets of limit keys: list them (the default), set one, or clear one.

    \b
    browserworker limits [--json]            each key: budget, pause, live runs, claims in the last minute
    browserworker limits set KEY [--concurrency N] [--rate N/min]
    browserworker limits clear KEY | --all

    A run's limit key is its flow's name unless the flow derives one (Flow(limit=...)). Runs of
    a key at its concurrency, out of its rate, or paused by a site's Retry-After wait in the
    queue while other keys' runs go. Bad input: exit 2, nothing written.
    """
    found = manage_limits(
        lambda create: invocation().store(create=create),
        action,
        key,
        concurrency=concurrency,
        rate=rate,
        all_keys=all_keys,
    )
    emit(
        [b.to_dict() for b in found],
        as_json,
        lambda: click.echo("\n".join(limit_lines(found, invocation().store().now()))),
    )
