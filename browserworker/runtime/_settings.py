"""The settings a run takes from its process, made where a process starts (the
:class:`~browserworker.runtime.Engine` reads the environment when it is not given them) and
handed down with each run: nothing below reads the environment.

- :class:`ApprovalSettings`: how long an ``approve=`` effect's request is held and may wait;
- :class:`SessionSettings`: the key that seals saved login sessions and their maximum age.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import UsageError

__all__ = [
    "ENV_APPROVAL_HOLD",
    "ENV_APPROVAL_TTL",
    "ENV_SESSION_KEY",
    "ENV_SESSION_MAX_AGE",
    "ApprovalSettings",
    "SessionSettings",
]

ENV_APPROVAL_TTL = "BROWSERWORKER_APPROVAL_TTL"
ENV_APPROVAL_HOLD = "BROWSERWORKER_APPROVAL_HOLD"
ENV_SESSION_KEY = "BROWSERWORKER_SESSION_KEY"
ENV_SESSION_MAX_AGE = "BROWSERWORKER_SESSION_MAX_AGE"


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


@dataclass(frozen=True)
class SessionSettings:
    """``key``: the sealing key of saved login sessions as given (32 bytes in URL-safe base64;
    None: the store's own key file, SQLite only); ``max_age``: seconds a saved session may be
    reused, for every flow without its own ``session_max_age`` (None: the default), and the
    age ``browserworker sessions`` judges every saved session by."""

    key: str | None = None
    max_age: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SessionSettings:
        """The settings ``BROWSERWORKER_SESSION_KEY`` and ``BROWSERWORKER_SESSION_MAX_AGE`` say
        (unset or empty: None); :class:`~browserworker.errors.UsageError` naming the variable for
        a maximum age that is not a number of seconds (a key is checked when it is used)."""
        env = os.environ if env is None else env
        key = (env.get(ENV_SESSION_KEY) or "").strip() or None
        age = _seconds(env, ENV_SESSION_MAX_AGE, 0.0)
        return cls(key=key, max_age=age if age > 0 else None)


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
