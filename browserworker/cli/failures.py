"""The one place an error becomes a message and an exit code.

Every :class:`~browserworker.errors.BrowserworkerError` carries its exit code; :func:`explain`
makes it one line. What the line says about a store failure depends on the :class:`Stage`
the command is in (a run not started yet; a run stopped without an outcome, and how to
resume it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click

from ..errors import BrowserworkerError, LeaseLost, StoreError, UsageError

__all__ = ["EXIT_STOPPED", "EXIT_USAGE", "Stage", "current_stage", "explain", "stage"]

EXIT_USAGE = UsageError.exit_code
EXIT_STOPPED = StoreError.exit_code
_STAGE = "browserworker.stage"


@dataclass(frozen=True)
class Stage:
    """Where a command is, for the line an error prints (see :func:`explain`).

    ``refusing``: nothing is written yet, so whatever fails is a refusal (exit 2).
    ``left`` and ``hint`` say what a store failure leaves behind (", no run started"; a run
    stopped without an outcome, and how to resume it). ``under_way``: a run is executing, so
    whatever stops it but bad usage leaves it without an outcome (exit 5).
    """

    refusing: bool = False
    left: str = ""
    hint: str = ""
    under_way: bool = False


@contextmanager
def stage(**fields: Any) -> Iterator[None]:
    """Be in ``Stage(**fields)`` for the block; an error keeps the stage it happened in."""
    meta = click.get_current_context().meta
    before = meta.get(_STAGE, Stage())
    meta[_STAGE] = Stage(**fields)
    yield
    meta[_STAGE] = before


def explain(exc: BrowserworkerError, where: Stage) -> tuple[str, int]:
    """The one line ``exc`` prints and the exit code it ends with.

    Refusals read like click's own (``Error: ...``); what stopped a command part-way reads
    ``error: ...`` with what it left behind."""
    code = exc.exit_code
    if where.refusing:
        code = EXIT_USAGE
    elif where.under_way and not isinstance(exc, UsageError):
        code = EXIT_STOPPED
    if code != EXIT_STOPPED:
        return f"Error: {exc}", code
    if isinstance(exc, StoreError):
        return f"error: store unavailable{where.left}: {exc}{where.hint}", code
    if isinstance(exc, LeaseLost):
        return f"error: lease lost, stopped without dispatching anything more: {exc}", code
    return f"error: {exc}", code


def current_stage(ctx: click.Context) -> Stage:
    """The stage the command of ``ctx`` is in (or was in when an error stopped it)."""
    found: Stage = ctx.meta.get(_STAGE, Stage())
    return found
