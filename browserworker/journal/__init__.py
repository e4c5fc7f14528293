"""A run's lease and its journal: who owns a run, and every write fenced by that ownership.

``_leases``: owner identity, leases with epochs and expiry, heartbeats, proving an owner is
gone. ``_journal``: :class:`RunJournal`, a run's typed journal writes, each fenced by its
lease epoch and owner (a write whose fence no longer holds raises ``LeaseLost``).
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._journal import RunJournal
    from ._leases import (
        Lease,
        LeaseSettings,
        gone_here,
        own_start_time,
        owner_is_gone,
        parent_pid,
        pid_space,
        process_is_gone,
        this_owner,
    )

__getattr__, __dir__ = face(__name__)

__all__ = [
    "Lease",
    "LeaseSettings",
    "RunJournal",
    "gone_here",
    "own_start_time",
    "owner_is_gone",
    "parent_pid",
    "pid_space",
    "process_is_gone",
    "this_owner",
]
