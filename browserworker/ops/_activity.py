"""Activity over time: lost leases and duplicates prevented, counted per time slot (the
operator console's chart; ``status`` shows the totals)."""

from __future__ import annotations

from dataclasses import dataclass

from ..store.base import Store

__all__ = ["ActivitySlot", "activity"]


@dataclass(frozen=True)
class ActivitySlot:
    """One slot of time and what happened in it."""

    start: float
    end: float
    lease_expiries: int
    duplicates_prevented: int


def activity(store: Store, *, hours: float = 24.0, slots: int = 24, now: float | None = None) -> list[ActivitySlot]:
    """The last ``hours`` cut into ``slots`` equal slots, oldest first, each with the leases found
    expired (reclaimed) and the UNKNOWN effects proven landed (not replayed) in it."""
    now = store.now() if now is None else now
    width = hours * 3600.0 / slots
    since = now - width * slots
    counts = [[0, 0] for _ in range(slots)]
    for what, at in store.event_times(since):
        slot = min(slots - 1, max(0, int((at - since) // width)))
        counts[slot][0 if what == "lease_expired" else 1] += 1
    return [ActivitySlot(since + i * width, since + (i + 1) * width, c[0], c[1]) for i, c in enumerate(counts)]
