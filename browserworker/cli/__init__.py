"""The ``browserworker`` command: a thin face over the library.

Each command parses its options, calls one library function and prints its result; the
modules are one concern each:

- :mod:`.process`: the console script: the process's garbage collector paced through start-up,
  then settled (``settle``) as a command's work begins;
- :mod:`.app`: the command group, which imports a command's module when the command is asked
  for; a browserworker error ends a command there;
- :mod:`.failures`: the one place an error becomes a line and an exit code;
- :mod:`.options`: the options several commands share (flow and inputs, ``--db``, ``--json``...);
- :mod:`.invocation`: the store of one invocation, opened once and closed on exit;
- :mod:`.execute`: ``run``, ``enqueue``, ``worker``;
- :mod:`.runs`: ``show``, ``runs``, ``review``, ``resolve``, ``cancel``, ``queue``;
- :mod:`.ops`: ``status``, ``metrics``, ``health``, ``backup``, ``restore``, ``check-db``, ``migrate``;
- :mod:`.sessions`: ``sessions``, ``sessions drop``;
- :mod:`.limits`: ``limits`` (budgets of limit keys);
- :mod:`.approvals`: ``approvals``, ``approve``, ``reject``;
- :mod:`.prove`: ``chaos``, ``replay``, ``sandbox``;
- :mod:`.console`: ``console`` (the operator console);
- :mod:`.mcp`: ``mcp`` (durable browser tools for AI agents), ``mcp export``.

Exit codes of ``run``: 0 SUCCEEDED, 1 FAILED, 2 usage error / bad input / bad flow (nothing
written), 3 NEEDS_REVIEW, 4 CANCELLED, 5 stopped without an outcome (lease lost or store
failure; resume with ``--run-id``), 6 (``enqueue``) the queue is full, 7 (``--record``) the
run SUCCEEDED but a verifier failed its self-test, 8 AWAITING_APPROVAL.
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the command group loads on first use: the console script paces the collector first
    from .app import main

__all__ = ["main"]

__getattr__, __dir__ = face(__name__)
