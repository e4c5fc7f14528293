"""Proving a flow: ``browserworker chaos`` crashes every effect at every fault point and counts
what landed on the target (``_chaos``); ``_selftest`` runs a verifier once against a clean run.
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from .._faults import CHAOS_POINTS, POINTS
    from .._faults import configure as configure_faults
    from ..errors import InjectedFault
    from ._chaos import run_chaos

__getattr__, __dir__ = face(__name__)

__all__ = [
    "CHAOS_POINTS",
    "POINTS",
    "InjectedFault",
    "configure_faults",
    "run_chaos",
]
