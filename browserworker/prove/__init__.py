"""Proving a flow: ``browserworker chaos`` crashes every effect at every fault point and counts
what landed on the target (``_chaos``); ``_selftest`` runs a verifier once against a clean run.
"""

from .._faults import CHAOS_POINTS, POINTS
from .._faults import configure as configure_faults
from ..errors import InjectedFault
from ._chaos import run_chaos

__all__ = [
    "CHAOS_POINTS",
    "POINTS",
    "InjectedFault",
    "configure_faults",
    "run_chaos",
]
