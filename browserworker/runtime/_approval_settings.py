"""How long an ``approve=`` effect's request is held and may wait: :class:`ApprovalSettings`,
made where a process starts (the :class:`~browserworker.runtime.Engine` reads the environment
when it is not given them) and handed down to the gate with the run (the gate reads no
environment)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import UsageError

__all__ = ["ENV_APPROVAL_HOLD", "ENV_APPROVAL_TTL", "ApprovalSettings"]

ENV_APPROVAL_TTL = "BROWSERWORKER_APPROVAL_TTL"
ENV_APPROVAL_HOLD = "BROWSERWORKER_APPROVAL_HOLD"


@dataclass(frozen=True)
class ApprovalSettings:
    """``ttl``: seconds an approval may wait before it expires, for every effect without its own
    ``approve_timeout=``; ``hold``: seconds a worker keeps the page open, holding the request,
    before it parks the run (0: park at once)."""

    ttl: float = 24 * 3600.0
    hold: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApprovalSettings:
        """The settings ``BROWSERWORKER_APPROVAL_TTL`` and ``BROWSERWORKER_APPROVAL_HOLD`` say (unset
        or empty: the defaults); :class:`~browserworker.errors.UsageError` naming the variable
        for what is not a number of seconds."""
        env = os.environ if env is None else env
        default = cls()
        return cls(
            ttl=_seconds(env, ENV_APPROVAL_TTL, default.ttl),
            hold=_seconds(env, ENV_APPROVAL_HOLD, default.hold),
        )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    given = (env.get(name) or "").strip()
    if not given:
        return default
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise UsageError(f"{name} must be a number of seconds (0 or more), not {given!r}")
    return value
