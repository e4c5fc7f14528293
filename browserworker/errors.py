"""Exceptions raised by browserworker: every one a user can meet is here and exported by
``browserworker`` (``docs/api.md`` lists them with their exit codes).

Every error a user can cause (bad flow file, bad input, unknown run) derives from
:class:`UsageError`. Each class carries the exit code the ``browserworker`` command ends
with when it stops a command: 2 a refusal (nothing written), 5 stopped without an outcome
(store failure, lease lost; resume the run), 6 a full queue (backpressure), 1 otherwise.
:class:`InjectedFault` is the one that is not a :class:`BrowserworkerError`: it stands for
an unexpected failure, on purpose.

This module is the bottom layer: it imports nothing of the package.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import ClassVar


def suggest(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to ``word`` (``-`` read as ``_``, case
    ignored), or ``""`` when none is close: the tail of an "unknown name" message."""
    by_norm = {c.lower().replace("-", "_"): c for c in choices}
    norm = word.lower().replace("-", "_")
    if norm in by_norm and by_norm[norm] != word:
        return f" (did you mean {by_norm[norm]!r}?)"
    close = difflib.get_close_matches(norm, list(by_norm), n=1, cutoff=0.7)
    return f" (did you mean {by_norm[close[0]]!r}?)" if close else ""


class BrowserworkerError(Exception):
    """Base class of every browserworker exception."""

    exit_code: ClassVar[int] = 1


class UsageError(BrowserworkerError):
    """The user asked for something impossible: bad flow, bad input, unknown id."""

    exit_code = 2


class FlowLoadError(UsageError):
    """A flow file could not be loaded; the message names the file and line."""


class FlowDefinitionError(UsageError):
    """A flow is defined wrongly (duplicate step id, verifier on an action...)."""


class InputError(UsageError):
    """Flow inputs failed validation."""


class RunNotFound(UsageError):
    """No run with that id in the store."""


class DatabaseInUse(UsageError):
    """Restore refused: something is (or may be) using the database."""


class SessionKeyError(UsageError):
    """No usable key to seal login sessions with (``BROWSERWORKER_SESSION_KEY``)."""


class ToolCallError(UsageError):
    """An agent's tool call cannot be carried out as asked (an unknown run, an unknown or stale
    ref, a ``verify`` that is not valid, a session another server holds): nothing of it was done."""


class ReplayError(BrowserworkerError):
    """A replay could not be carried out (bad recording, crash point never reached...)."""

    exit_code = 2


class QueueFull(BrowserworkerError):
    """Enqueue refused: the queue is at its maximum depth (backpressure). Nothing was written."""

    exit_code = 6


class OverBudget(BrowserworkerError):
    """A run of a limit key may not start now: the key is paused, at its concurrency or out of
    its rate (``browserworker limits``). Nothing was written; ``retry_in`` seconds is a guess
    of when it may."""

    exit_code = 6

    def __init__(self, key: str, reason: str, retry_in: float) -> None:
        super().__init__(f"limit key {key!r} is {reason}")
        self.key = key
        self.reason = reason
        self.retry_in = max(0.05, retry_in)


class StoreError(BrowserworkerError):
    """The store could not be opened or written (locked, full, read-only...)."""

    exit_code = 5


class StoreUnavailable(StoreError):
    """The store's server cannot be reached now (down, restarting, out of connections): a
    condition that passes. A starting worker waits for it (``--wait-for-store``); every
    command that meets it ends with exit 5, never with a refusal."""


class GroupSpoiled(StoreError):
    """A call failed in a group run without savepoints (``group(isolate=False)``): the whole
    group was rolled back and nothing of it is durable; run the batch again isolated."""


class LeaseLost(BrowserworkerError):
    """A fenced write hit zero rows: another owner (or nobody) holds the run now.

    The worker that sees this must stop at once and dispatch nothing more.
    """

    exit_code = 5


class BrowserNotFound(BrowserworkerError):
    """No Chromium could be found; the message says how to get one."""

    exit_code = 2


class UndeclaredEffect(BrowserworkerError):
    """An action tried to send what only an effect may (``undeclared_effects="fail"``); it was not sent."""


class InjectedFault(RuntimeError):
    """Raised at a fault point configured with the ``raise`` action (``BROWSERWORKER_FAULTS``,
    :func:`browserworker.prove.configure_faults`): an unexpected failure, on purpose, so it is
    not a :class:`BrowserworkerError`."""
