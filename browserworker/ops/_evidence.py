"""What a run leaves beside its journal, for people to look at: the screenshots its journal
names, the recordings made of it, and a view of the journal with its secrets masked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..store.records import REDACTED, RunRecord

__all__ = ["RunRecording", "mask", "recordings_of", "screenshot_file", "screenshots"]

#: headers whose values are credentials (masked in every view)
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "x-csrf-token", "x-xsrf-token"}
)
_MIN_SECRET = 3  # shorter values are not searched for inside other strings


def mask(value: Any, run: RunRecord) -> Any:
    """``value`` (JSON-like) with the run's secrets masked: the values of its secret inputs,
    wherever they appear, and every field named as a secret input or a credential header."""
    names = {str(n).lower() for n in run.secret_fields} | SECRET_HEADERS
    secrets = sorted(
        {
            str(run.inputs[n])
            for n in run.secret_fields
            if n in run.inputs and run.inputs[n] is not None and len(str(run.inputs[n])) >= _MIN_SECRET
        },
        key=len,
        reverse=True,
    )
    return _mask(value, names, secrets)


def _mask(value: Any, names: set[str], secrets: list[str]) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED if str(k).lower() in names and v is not None else _mask(v, names, secrets)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_mask(v, names, secrets) for v in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
    return value


def _named(value: Any) -> Iterator[str]:
    """Every string under a ``screenshot`` key, at any depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "screenshot" and isinstance(v, str) and v:
                yield v
            else:
                yield from _named(v)
    elif isinstance(value, list):
        for v in value:
            yield from _named(v)


def screenshots(journal_view: dict[str, Any]) -> list[str]:
    """The screenshot files a run's journal names (attempts' evidence, decisions' details), in
    the order they appear, each once (``journal_view``: :func:`browserworker.ops._views.journal_view`)."""
    found = list(_named([a.get("evidence") for a in journal_view["journal"]]))
    found += _named([e.get("detail") for e in journal_view["events"]])
    return list(dict.fromkeys(found))


def screenshot_file(named: str, evidence_dir: Path) -> Path | None:
    """The file of a screenshot the journal names, if it is a PNG inside ``evidence_dir`` (a
    relative name is read from the working directory, else from beside the evidence directory)."""
    root = evidence_dir.resolve()
    for candidate in (Path(named), evidence_dir.parent / named):
        path = candidate.resolve()
        if path.suffix == ".png" and path.is_relative_to(root) and path.is_file():
            return path
    return None


@dataclass(frozen=True)
class RunRecording:
    """A recording of a run (``browserworker run --record``), and its Playwright traces."""

    name: str
    path: Path
    status: str | None
    traces: tuple[Path, ...]


def recordings_of(run_id: str, root: Path) -> list[RunRecording]:
    """The recordings under ``root`` (``recordings/``) of run ``run_id``, by name."""
    found = []
    for meta_file in sorted(root.glob("*/meta.json")) if root.is_dir() else []:
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(meta, dict) or meta.get("run_id") != run_id:
            continue
        base = meta_file.parent.resolve()
        traces = tuple(
            p
            for p in ((base / t).resolve() for t in meta.get("traces") or [] if isinstance(t, str))
            if p.is_relative_to(base) and p.is_file()
        )
        found.append(RunRecording(meta_file.parent.name, meta_file.parent, meta.get("status"), traces))
    return found
