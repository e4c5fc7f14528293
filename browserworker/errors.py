"""Exceptions raised by browserworker.

Every error a user can cause (bad flow file, bad input, unknown run) derives from
:class:`UsageError`; the CLI turns those into a one-line message and exit code 2.
"""

from __future__ import annotations


class BrowserworkerError(Exception):
    """Base class of every browserworker exception."""


class UsageError(BrowserworkerError):
    """The user asked for something impossible: bad flow, bad input, unknown id."""


class FlowLoadError(UsageError):
    """A flow file could not be loaded; the message names the file and line."""


class FlowDefinitionError(UsageError):
    """A flow is defined wrongly (duplicate step id, verifier on an action...)."""


class InputError(UsageError):
    """Flow inputs failed validation."""


class RunNotFound(UsageError):
    """No run with that id in the store."""


class QueueFull(BrowserworkerError):
    """Enqueue refused: the queue is at its maximum depth (backpressure). Nothing was written."""


class StoreError(BrowserworkerError):
    """The store could not be opened or written (locked, full, read-only...)."""


class LeaseLost(BrowserworkerError):
    """A fenced write hit zero rows: another owner (or nobody) holds the run now.

    The worker that sees this must stop at once and dispatch nothing more.
    """


class BrowserNotFound(BrowserworkerError):
    """No Chromium could be found; the message says how to get one."""


class UndeclaredEffect(BrowserworkerError):
    """An action tried to send what only an effect may (``undeclared_effects="fail"``); it was not sent."""

