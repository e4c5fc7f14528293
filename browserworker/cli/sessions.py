"""The ``sessions`` commands: the saved login sessions (login sessions), never their state."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from ..ops import terminal
from .app import main
from .failures import stage
from .invocation import invocation
from .options import db_option, emit, json_option

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime import SessionInfo


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


@main.group("sessions", invoke_without_command=True)
@db_option
@json_option("the sessions")
@click.pass_context
def sessions_command(ctx: click.Context, as_json: bool) -> None:
    """The saved login sessions: key, flow, when saved and last used, uses, age, expired?, readable?

    The sessions' contents (cookies, tokens) are never shown. "unreadable": sealed with
    another key than this store's (BROWSERWORKER_SESSION_KEY or the key file beside a SQLite
    database): its next run logs in again and replaces it.
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..runtime import SessionSettings, list_sessions

    found, problem = list_sessions(invocation().store(create=False), SessionSettings.from_env())
    emit({"sessions": [s.to_dict() for s in found], "key_problem": problem}, as_json, lambda: _show(found, problem))


def _show(found: list[SessionInfo], problem: str | None) -> None:
    from rich.table import Table

    if problem:
        click.echo(f"cannot tell which sessions are readable: {problem}", err=True)
    if not found:
        click.echo("no saved login sessions")
        return
    table = Table(box=None)
    for col in ("key", "flow", "saved", "used", "uses", "age", "expired", "readable"):
        table.add_column(col)
    for s in found:
        readable = "?" if s.readable is None else "yes" if s.readable else "UNREADABLE"
        table.add_row(
            s.key,
            s.flow or "-",
            _when(s.saved_at),
            _when(s.used_at),
            str(s.uses),
            _age(s.age_s),
            "EXPIRED" if s.expired else "no",
            readable + (" (login in progress)" if s.login_in_progress else ""),
        )
    terminal().print(table)


@sessions_command.command("drop")
@click.argument("key")
@db_option
def drop_command(key: str) -> None:
    """Forget the saved login session KEY: the next run with that key logs in again."""
    from ..runtime import drop_session

    with stage(refusing=True):
        drop_session(invocation().store(create=False), key)
    click.echo(f"dropped login session {key}")


@sessions_command.command("new-key")
def new_key_command() -> None:
    """Print a new sealing key for BROWSERWORKER_SESSION_KEY (32 random bytes, URL-safe base64).

    Give every worker of a fleet the same key; keep it with your other secrets.
    """
    from ..runtime import generate_key

    click.echo(generate_key())
