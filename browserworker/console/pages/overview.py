"""Overview: the queues, the health rules (green or red, and why), UNKNOWN by flow and step,
the workers by host, and lost leases and duplicates prevented over the last day."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...ops import ActivitySlot, Breach, HealthRules, OpsSnapshot, activity, check, format_age, snapshot
from ..web import console, read, render
from ._page import Page

__all__ = ["PAGE"]

RULES = HealthRules()


@dataclass(frozen=True)
class RuleStatus:
    """One health rule: its name, its threshold, and its breaches (none: green)."""

    rule: str
    threshold: str
    breaches: list[Breach]


def rule_statuses(snap: OpsSnapshot, rules: HealthRules) -> list[RuleStatus]:
    breaches = check(snap, rules)
    limits = {
        "max-queue-age": None if rules.max_queue_age is None else format_age(rules.max_queue_age),
        "max-unknown": None if rules.max_unknown is None else str(rules.max_unknown),
        "max-unknown-growth": None
        if rules.max_unknown_growth is None
        else f"{rules.max_unknown_growth} per {format_age(rules.growth_window)}",
        "max-stale-workers": None if rules.max_stale_workers is None else str(rules.max_stale_workers),
    }
    return [
        RuleStatus(rule, threshold, [b for b in breaches if b.rule == rule])
        for rule, threshold in limits.items()
        if threshold is not None
    ]


def chart(slots: list[ActivitySlot], width: int = 720, height: int = 120) -> dict[str, Any]:
    """Bar geometry of the activity chart (two bars per slot), for the template's inline SVG."""
    top = max([1] + [max(s.lease_expiries, s.duplicates_prevented) for s in slots])
    step = width / max(1, len(slots))
    bar = max(1.0, step / 2 - 2)
    bars = []
    for i, s in enumerate(slots):
        for j, (kind, n) in enumerate((("expiry", s.lease_expiries), ("duplicate", s.duplicates_prevented))):
            h = round(n / top * (height - 14), 1)
            bars.append(
                {
                    "kind": kind,
                    "n": n,
                    "x": round(i * step + j * (bar + 1), 1),
                    "y": round(height - h, 1),
                    "w": round(bar, 1),
                    "h": h,
                    "start": s.start,
                    "end": s.end,
                }
            )
    return {
        "bars": bars,
        "width": width,
        "height": height,
        "top": top,
        "expiries": sum(s.lease_expiries for s in slots),
        "duplicates": sum(s.duplicates_prevented for s in slots),
    }


def _read(store: Any) -> dict[str, Any]:
    snap = snapshot(store, window=RULES.growth_window, stale_after=RULES.stale_after, histograms=False)
    hosts: dict[str, list[Any]] = {}
    for w in snap.workers:
        hosts.setdefault(w.host, []).append(w)
    return {
        "snap": snap,
        "rules": rule_statuses(snap, RULES),
        "hosts": sorted(hosts.items()),
        "chart": chart(activity(store, now=snap.at)),
    }


async def overview(request: Request) -> Response:
    data = await read(_read, console(request).store)
    return render(request, "overview", "overview.html", **data)


PAGE = Page("overview", "Overview", "/", [Route("/", overview, methods=["GET"])])
