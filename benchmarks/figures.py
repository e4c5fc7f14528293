"""What each line of ``make bench`` states besides its figure, so a reader can trust it on a
noisy machine: the spread of its ABBA pairs (min-max), the load while it was measured, and
whether its target was met in every pair or only by the median."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["load_range", "loaded", "pair_ratios", "spread", "verdict"]


def abba(sides: list[T], rep: int) -> list[T]:
    """The sides of a comparison in ABBA order: as given on even repetitions, reversed on
    odd ones. Plain alternation (ABAB) always runs B second, so a machine that slows down
    (or speeds up) during the benchmark charges the drift to one side; ABBA cancels a
    linear drift over each pair of repetitions."""
    return sides if rep % 2 == 0 else sides[::-1]


def loaded(measure: Callable[[], Any]) -> Any:
    """``measure()`` (a row, or a list of a line's rows), each row given the machine's 1-minute
    load average before and after the measurement (``load``)."""
    before = os.getloadavg()[0]
    out = measure()
    load = [before, os.getloadavg()[0]]
    if isinstance(out, list):
        return [{**row, "load": load} for row in out]
    return {**out, "load": load}


def load_range(rows: list[dict[str, Any]] | dict[str, Any]) -> str:
    """The load averages seen around ``rows``' measurements: ``load 1.2-3.4``."""
    rows = [rows] if isinstance(rows, dict) else rows
    seen = [x for row in rows for x in row.get("load", [])]
    return f"load {min(seen):.1f}-{max(seen):.1f}" if seen else "load not recorded"


def pair_ratios(ours: list[float], theirs: list[float]) -> list[float]:
    """Ours over theirs in each ABBA pair (repetition i of each side)."""
    return [a / b for a, b in zip(ours, theirs, strict=False) if b]


def verdict(values: list[float], met: Callable[[float], bool], *, what: str = "pairs", fmt: str | None = None) -> str:
    """Whether a target was met in every pair (or repetition), only by the median, or not. With
    ``fmt``, the pairs' median is said too: where the line's ratio is of the sides' medians, it
    can fall on the other side of the target (the verdict goes by the pairs)."""
    if not values:
        return "no"
    hits = sum(1 for v in values if met(v))
    if hits == len(values):
        return f"yes, in every one of {hits} {what}"
    median = statistics.median(values)
    told = f"; their median {fmt.format(median)}" if fmt is not None else ""
    if met(median):
        return f"yes by the median only ({hits} of {len(values)} {what}{told})"
    return f"no ({hits} of {len(values)} {what}{told})"


def spread(values: list[float], fmt: str = "{:.2f}x", *, what: str = "pairs") -> str:
    """The min-max of the pairs' (or repetitions') values."""
    if not values:
        return f"no {what}"
    return f"{what} {fmt.format(min(values))}-{fmt.format(max(values))}"
