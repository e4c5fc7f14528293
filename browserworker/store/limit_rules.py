"""Site budgets: how many runs of one *limit key* may run at once across the fleet, how
often they may start, and pauses a site asked for (``Retry-After`` on a 429 or 503).

Every run has a limit key: its flow's name, or what ``Flow(limit=...)`` derives from its
validated inputs (a string, or a function of the inputs returning one, e.g. the origin of
the site it acts on). A key with a budget (``browserworker limits set``) is held back where
runs are claimed: a run whose key is paused, at its concurrency or out of rate tokens is not
claimed, and the claim takes the next eligible run instead. Keys without a budget cost
nothing. The rate is a token bucket kept in the key's row: ``rate`` claims per minute, a
burst of one minute's worth (at least one), refilled by the store's clock.

Pure parsing and arithmetic here; the store applies them (:mod:`browserworker.store.limits`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import FlowDefinitionError, InputError, UsageError

__all__ = [
    "MAX_PAUSE",
    "THROTTLE_STATUSES",
    "LimitKey",
    "burst_of",
    "check_key",
    "check_limit",
    "parse_rate",
    "refill",
    "resolve_key",
    "retry_after",
]

#: what ``Flow(limit=...)`` takes: a key, or a function of the validated inputs giving one
LimitKey = str | Callable[[Any], str] | None

MAX_PAUSE = 3600.0
"""The longest pause a ``Retry-After`` can ask for, in seconds (a longer one is cut to this)."""

THROTTLE_STATUSES = frozenset({429, 503})
"""Answers that, with a ``Retry-After`` header, pause the run's key."""

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*([A-Za-z]+)\s*")
_PER_MINUTE = {"s": 60.0, "sec": 60.0, "second": 60.0, "m": 1.0, "min": 1.0, "minute": 1.0, "h": 1 / 60, "hour": 1 / 60}


def check_key(key: object, where: str, error: type[Exception] = UsageError) -> str:
    """``key`` if it is a valid limit key (1-200 letters, digits, ``. _ : / @ + -``), else ``error``."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise error(
            f"{where}: invalid limit key {key!r}: use 1-200 letters, digits, '.', '_', ':', '/', '@', "
            "'+' or '-', starting with a letter or digit"
        )
    return key


def check_limit(limit: object, flow_name: str) -> LimitKey:
    """``Flow(limit=...)`` as given, checked when the flow is defined."""
    if limit is None or callable(limit):
        return limit
    return check_key(limit, f"flow {flow_name!r}: limit=", FlowDefinitionError)


def resolve_key(limit: LimitKey, inputs: Any, flow_name: str) -> str:
    """The limit key of one run: the flow's name, the static key, or the function's answer for its inputs."""
    if limit is None:
        return flow_name
    if not callable(limit):
        return limit
    try:
        key = limit(inputs)
    except Exception as exc:  # noqa: BLE001 - the flow's own code: say where
        raise InputError(f"flow {flow_name!r}: the limit key from the inputs failed: {exc!r}") from exc
    return check_key(key, f"flow {flow_name!r}: limit=", InputError)


def parse_rate(text: str) -> float:
    """``"N/min"`` (or ``N/s``, ``N/h``) as claims per minute; :class:`UsageError` otherwise."""
    match = _RATE.fullmatch(text or "")
    unit = match.group(2).lower() if match else ""
    unit = unit[:-1] if unit.endswith("s") and unit[:-1] in _PER_MINUTE else unit
    if match is None or unit not in _PER_MINUTE:
        raise UsageError(f"invalid rate {text!r}: write N/s, N/min or N/h (e.g. 30/min)")
    per_minute = float(match.group(1)) * _PER_MINUTE[unit]
    if per_minute <= 0:
        raise UsageError(f"invalid rate {text!r}: N must be positive")
    return per_minute


def burst_of(rate: float) -> float:
    """The bucket's size: one minute's worth of claims, at least one."""
    return max(1.0, rate)


def refill(rate: float, tokens: float, refilled_at: float, now: float) -> float:
    """The tokens in the bucket at ``now`` (never more than its burst)."""
    return min(burst_of(rate), tokens + max(0.0, now - refilled_at) * rate / 60.0)


def retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds a ``Retry-After`` header (delta-seconds or an HTTP-date) asks to wait, at most
    :data:`MAX_PAUSE`; None when there is none or it cannot be read."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        import email.utils  # here: an HTTP-date is rare, and the email package costs every start-up

        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = when.timestamp() - now
    return min(MAX_PAUSE, max(0.0, seconds))
