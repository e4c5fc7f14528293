"""Recordings: record a run, replay it offline (crash scenarios included), secrets redacted.

- :func:`record` executes a new run with an :class:`~browserworker.runtime._engine.Engine` as ``run``
  does and writes ``recordings/NAME/`` (``browserworker run FLOW.py --record NAME [--trace]``),
  self-testing each effect's verifier;
- :func:`replay` runs a recording's flow offline against the :class:`ReplayRouter`,
  optionally crashing it at a point and resuming it, and compares the outcome with the
  recording (``browserworker replay recordings/NAME``; the pytest fixture ``replay``).

See :mod:`.files` for the format, :mod:`.redact` for what never reaches a recording, and
:mod:`.router` for the matching rules.
"""

from .._redact import REDACTED, Redactor
from ..errors import ReplayError
from .files import FORMAT, Recording, recording_path
from .recorder import RecordedRun, record
from .replayer import CRASH_POINTS, ReplayResult, replay, replay_async, run_sync
from .router import ReplayRouter

__all__ = [
    "CRASH_POINTS",
    "FORMAT",
    "REDACTED",
    "RecordedRun",
    "Recording",
    "Redactor",
    "ReplayError",
    "ReplayResult",
    "ReplayRouter",
    "record",
    "recording_path",
    "replay",
    "replay_async",
    "run_sync",
]
