"""The ``browserworker`` command group's commands, loaded (each command's module loads on demand)."""

from __future__ import annotations

import click

from browserworker.cli import main


def commands() -> dict[str, click.Command]:
    """Every command of ``browserworker``, by name."""
    ctx = click.Context(main)
    found = {name: main.get_command(ctx, name) for name in main.list_commands(ctx)}
    return {name: command for name, command in found.items() if command is not None}
