"""The ``browserworker`` command's process: Python's garbage collector paced through its
start-up, then settled for its work.

A command's start-up makes objects that live until the process exits: the modules of click,
pydantic, Playwright's API and the runtime, the flow file's, the store's and the engine's
set-up. Python's cyclic collector would examine them over and over while they are being made
(``browserworker run``'s start-up triggers a full collection that takes 35-40 ms on a slow
machine and frees nothing), and then again at every collection of the oldest generation while
the command works.

So :func:`main` collects rarely during start-up (:data:`STARTUP_THRESHOLDS`, not Python's
default of every 700 new objects), and a command calls :func:`settle` once its start-up is
done and its work begins (a run's first step, a worker's first claim, a server's first
request): what exists then is moved out of the collector's sight for good (``gc.freeze``) and
the default pace comes back. A command that never settles (one that reads the store and
exits) still collects, only rarely. Cyclic garbage that start-up left before ``settle`` is
never collected: start-up makes almost none (its one full collection frees nothing).

Only the command does this: the process is its own. Used as a library (the pytest plugin, an
application's own code, the command group invoked in a test's process), :func:`settle` leaves
the collector alone.
"""

from __future__ import annotations

import gc

__all__ = ["STARTUP_THRESHOLDS", "main", "settle"]

STARTUP_THRESHOLDS = (50_000, 1_000, 1_000)
"""The collector's thresholds until :func:`settle`: a young collection every 50,000 new
objects (instead of 700), the older generations all but never."""

_DEFAULT_THRESHOLDS = gc.get_threshold()
_paced = False  # whether main() paced this process (only then does settle() touch the collector)


def main() -> None:
    """The ``browserworker`` console script and ``python -m browserworker``: the command group
    (:data:`browserworker.cli.main`) run with the collector paced for start-up."""
    global _paced
    _paced = True
    gc.set_threshold(*STARTUP_THRESHOLDS)
    from .app import main as command

    command(prog_name="browserworker")


def settle() -> None:
    """Start-up is over: what it made is kept out of every later collection, and the collector
    keeps its default pace from here on; nothing, in a process :func:`main` did not start. A
    second call freezes what was made since the first."""
    if not _paced:
        return
    gc.freeze()
    gc.set_threshold(*_DEFAULT_THRESHOLDS)
