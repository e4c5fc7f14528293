"""``browserworker limits``: the budgets of limit keys (see :mod:`browserworker.budgets`)."""

from __future__ import annotations

import click

from .. import budgets
from ..errors import UsageError
from ..views import limit_lines
from .app import main
from .options import db_option, emit, json_option
from .session import session


@main.command("limits")
@click.argument("action", required=False, type=click.Choice(["list", "set", "clear"]))
@click.argument("key", required=False)
@click.option("--concurrency", type=int, metavar="N", help="set: runs of KEY at once, across the fleet.")
@click.option("--rate", metavar="N/UNIT", help="set: claims of KEY per second, minute or hour (N/s, N/min, N/h).")
@click.option("--all", "all_keys", is_flag=True, help="clear: every key's budget and pause.")
@db_option
@json_option("the keys")
def limits_command(action: str | None, key: str | None, concurrency: int | None, rate: str | None, all_keys: bool,
                   as_json: bool) -> None:
    """Budgets of limit keys: list them (the default), set one, or clear one.

    \b
    browserworker limits [--json]            each key: budget, pause, live runs, claims in the last minute
    browserworker limits set KEY [--concurrency N] [--rate N/min]
    browserworker limits clear KEY | --all

    A run's limit key is its flow's name unless the flow derives one (Flow(limit=...)). Runs of
    a key at its concurrency, out of its rate, or paused by a site's Retry-After wait in the
    queue while other keys' runs go. Bad input: exit 2, nothing written.
    """
    action = action or "list"
    if action == "list":
        if key or concurrency is not None or rate or all_keys:
            raise click.UsageError("limits (list) takes no KEY, --concurrency, --rate or --all")
    elif action == "set":
        if key is None or all_keys:
            raise click.UsageError("limits set needs a KEY (and no --all)")
        if concurrency is None and rate is None:
            raise click.UsageError("limits set KEY needs --concurrency N and/or --rate N/min")
        if concurrency is not None and concurrency < 1:
            raise click.UsageError(f"--concurrency must be a positive whole number, not {concurrency}")
        per_minute = _rate(rate)
        budgets.check_key(key, "limits set")
        session().store().set_limit(key, concurrency=concurrency, rate=per_minute)
    else:
        if (key is None) == (not all_keys) or concurrency is not None or rate:
            raise click.UsageError("limits clear needs a KEY or --all (and no --concurrency or --rate)")
        removed = session().store(create=False).clear_limit(None if all_keys else key)
        if key is not None and not removed:
            raise click.UsageError(f"no budget or pause for limit key {key!r}")
    store = session().store(create=action != "list")
    found = store.limits()
    emit([b.to_dict() for b in found], as_json, lambda: click.echo("\n".join(limit_lines(found, store.now()))))


def _rate(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return budgets.parse_rate(text)
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--rate") from None
