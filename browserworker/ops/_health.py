"""Health rules over the ops snapshot: what ``browserworker health`` checks.

Each rule names a threshold; :func:`check` returns one :class:`Breach` per rule (and
queue) that is over it. No breaches means healthy. The rules:

- ``max_queue_age``: the oldest claimable QUEUED run of a queue waited longer than this
  (work is arriving faster than it is drained, or no worker serves the queue);
- ``max_unknown``: more effect attempts are UNKNOWN now (sent, outcome unproven) than this;
- ``max_unknown_growth`` per ``growth_window``: more attempts became UNKNOWN in the window,
  and are still unresolved, in one queue — a queue with nothing pending but growing
  UNKNOWN is *not* healthy: its runs are ending in ambiguity;
- ``max_stale_workers``: more registered workers stopped heartbeating without stopping
  cleanly (silent past ``stale_after``, or their process is gone on this host) than this,
  within the last hour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError
from ..store.base import Store
from ._metrics import DEFAULT_STALE_AFTER, OpsSnapshot, snapshot

__all__ = [
    "Breach",
    "HealthRules",
    "check",
    "check_store",
    "format_age",
    "parse_duration",
    "parse_growth",
    "rules_from_options",
]

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1.5h``, ``1d`` → seconds."""
    match = _DURATION.match(text)
    if not match:
        raise UsageError(f"invalid duration {text!r}: use e.g. 90s, 5m, 1h")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_growth(text: str) -> tuple[int, float]:
    """``N/10m`` → (N, 600.0): at most N new unresolved UNKNOWN attempts per window."""
    count, sep, window = text.partition("/")
    if not sep or not count.strip().isdigit():
        raise UsageError(f"invalid growth {text!r}: use N/WINDOW, e.g. 0/10m")
    seconds = parse_duration(window)
    if seconds <= 0:
        raise UsageError(f"invalid growth {text!r}: the window must be longer than 0")
    return int(count), seconds


def format_age(seconds: float | None) -> str:
    """A short human age: ``45s``, ``4m05s``, ``2h10m``, ``3d4h``."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60:02d}s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600}h" + (f"{s % 3600 // 60:02d}m" if s % 3600 // 60 else "")
    return f"{s // 86400}d" + (f"{s % 86400 // 3600}h" if s % 86400 // 3600 else "")


@dataclass(frozen=True)
class HealthRules:
    """Thresholds; None switches a rule off."""

    max_queue_age: float | None = 300.0
    max_unknown: int | None = None
    max_unknown_growth: int | None = 0
    growth_window: float = 600.0
    max_stale_workers: int | None = 0
    stale_after: float = DEFAULT_STALE_AFTER


@dataclass(frozen=True)
class Breach:
    """One rule over its threshold, in one line."""

    rule: str
    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def _off(text: str) -> bool:
    return text.strip().lower() in ("off", "none", "")


def _count(text: str, option: str) -> int:
    if not text.strip().isdigit():
        raise UsageError(f"invalid {option} {text!r}: use a whole number, or off")
    return int(text)


def rules_from_options(
    *,
    max_queue_age: str = "5m",
    max_unknown: str = "off",
    max_unknown_growth: str = "0/10m",
    max_stale_workers: str = "0",
    stale_after: str = "60s",
) -> HealthRules:
    """Rules from the ``health`` command's options (each may be ``off``)."""
    growth, window = (None, 600.0) if _off(max_unknown_growth) else parse_growth(max_unknown_growth)
    return HealthRules(
        max_queue_age=None if _off(max_queue_age) else parse_duration(max_queue_age),
        max_unknown=None if _off(max_unknown) else _count(max_unknown, "--max-unknown"),
        max_unknown_growth=growth,
        growth_window=window,
        max_stale_workers=None if _off(max_stale_workers) else _count(max_stale_workers, "--max-stale-workers"),
        stale_after=parse_duration(stale_after),
    )


def check(snap: OpsSnapshot, rules: HealthRules) -> list[Breach]:
    """Every breached rule in ``snap`` (read with ``window=rules.growth_window``)."""
    breaches: list[Breach] = []
    if rules.max_queue_age is not None:
        for q in snap.queues:
            if q.oldest_ready_age is not None and q.oldest_ready_age > rules.max_queue_age:
                breaches.append(
                    Breach(
                        "max-queue-age",
                        q.name,
                        f"queue {q.name}: oldest claimable run waited {format_age(q.oldest_ready_age)} "
                        f"(max {format_age(rules.max_queue_age)}; {q.ready} claimable, "
                        f"{q.queued} queued)",
                    )
                )
    if rules.max_unknown is not None and snap.unknown_open > rules.max_unknown:
        steps = ", ".join(f"{s.flow}/{s.step} {s.open}" for s in snap.unknown if s.open)
        breaches.append(
            Breach(
                "max-unknown", "*", f"{snap.unknown_open} effect attempts UNKNOWN (max {rules.max_unknown}): {steps}"
            )
        )
    if rules.max_unknown_growth is not None:
        for q in snap.queues:
            if q.unknown_recent > rules.max_unknown_growth:
                pending = "nothing pending, but " if q.queued == 0 else ""
                breaches.append(
                    Breach(
                        "max-unknown-growth",
                        q.name,
                        f"queue {q.name}: {pending}{q.unknown_recent} new unresolved UNKNOWN attempts "
                        f"in the last {format_age(snap.window)} (max {rules.max_unknown_growth})",
                    )
                )
    if rules.max_stale_workers is not None:
        stale = [w for w in snap.workers if w.status in ("stale", "dead")]
        if len(stale) > rules.max_stale_workers:
            who = ", ".join(
                f"{w.id} ({w.host} pid {w.pid}{', gone' if w.status == 'dead' else ''}, last heartbeat "
                f"{format_age(w.heartbeat_age)} ago)"
                for w in stale
            )
            breaches.append(
                Breach("max-stale-workers", "*", f"{len(stale)} stale workers (max {rules.max_stale_workers}): {who}")
            )
    return breaches


def check_store(store: Store, rules: HealthRules) -> list[Breach]:
    """Read a snapshot sized for ``rules`` and check it."""
    snap = snapshot(store, window=rules.growth_window, stale_after=rules.stale_after, histograms=False)
    return check(snap, rules)
