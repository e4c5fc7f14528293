"""The command group: every command hangs off :data:`main`, and :meth:`Commands.invoke`
turns a browserworker error into its one line on stderr and its exit code (never a traceback).

A command's module is imported when the command is asked for (:data:`COMMAND_MODULES`), not
before: ``browserworker run`` loads neither the console nor the MCP server, and it can start
the browser's driver before it loads the flow and the runtime (see :mod:`.execute`).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from ..errors import BrowserworkerError
from ..logs import configure_logging
from .failures import current_stage, explain
from .invocation import Invocation

__all__ = ["Commands", "main"]


COMMAND_MODULES = {
    **dict.fromkeys(("run", "enqueue", "worker"), "execute"),
    **dict.fromkeys(("show", "runs", "review", "resolve", "cancel", "requeue", "queue"), "runs"),
    **dict.fromkeys(("status", "metrics", "health", "backup", "restore", "check-db", "migrate"), "ops"),
    "sessions": "sessions",
    "limits": "limits",
    **dict.fromkeys(("approvals", "approve", "reject"), "approvals"),
    **dict.fromkeys(("chaos", "replay", "sandbox"), "prove"),
    "console": "console",
    "mcp": "mcp",
}
"""Which module of this package registers each command on :data:`main`."""


class Commands(click.Group):
    """The command group: a browserworker error ends a command with one line and its exit code.
    Each command's module is imported the first time the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            importlib.import_module(f"{__package__}.{module}")
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            exc.message += _input_hint(exc)  # type: ignore[misc]  # click reads it when it shows the error
            raise
        except BrowserworkerError as exc:
            line, code = explain(exc, current_stage(ctx))
            click.echo(line, err=True)
            ctx.exit(code)


def _input_hint(exc: click.UsageError) -> str:
    """A hint for ``--input KEY VALUE`` (two arguments), which click reads as an extra argument."""
    command = exc.ctx.command if exc.ctx is not None else None
    takes_inputs = command is not None and any(p.name == "pairs" for p in command.params)
    if not takes_inputs or "unexpected extra argument" not in exc.message:
        return ""
    return (
        "\nHint: each --input is one KEY=VALUE argument (--input base_url=http://127.0.0.1:8800, "
        "not --input base_url http://127.0.0.1:8800); quote a value with spaces"
    )


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="browserworker")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    envvar="BROWSERWORKER_LOG_LEVEL",
    default="warning",
    show_default=True,
    help="Structured log level (logs go to stderr).",
)
@click.pass_context
def main(ctx: click.Context, log_level: str) -> None:
    """browserworker: run browser automations as durable, crash-safe work.

    Every click that changes the world is journaled as intent before it is sent, and after
    a crash a verifier proves what happened before anything is replayed.
    """
    configure_logging(log_level)
    ctx.obj = Invocation(ctx)
