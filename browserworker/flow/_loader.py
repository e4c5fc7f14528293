"""Loading flow files and parsing user-supplied inputs.

Every failure here is a :class:`~browserworker.errors.UsageError` whose message names
the file (and line, where there is one), so the CLI can print it on one line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import traceback
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FlowDefinitionError, FlowLoadError, InputError, suggest
from ._flow import Effect, Flow

__all__ = ["LoadedFlow", "file_hash", "load_flow", "parse_inputs", "unproven_effects"]


@dataclass(frozen=True)
class LoadedFlow:
    """A flow together with the file it came from and that file's content hash."""

    flow: Flow[Any]
    path: Path
    file_hash: str


def file_hash(path: Path) -> str:
    """sha256 of a flow file's bytes (recorded with every run)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _import_error_location(path: Path, exc: BaseException) -> str:
    """``file:line`` of the deepest frame of ``exc`` that lies in the flow file."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path:
            line = frame.lineno
    return f"{path}:{line}" if line else str(path)


def unproven_effects(flow: Flow[Any]) -> list[str]:
    """A line for each effect with neither a verifier nor ``idempotent=True``: after a crash
    mid-dispatch nothing can prove it landed, so its run waits for a person."""
    return [
        f"effect {step.id!r} of flow {flow.name!r} has no verifier and is not idempotent: after a crash "
        "between its dispatch and its outcome the run waits for a person (NEEDS_REVIEW); add @"
        f"{step.id}.verify or idempotent=True to let the kit decide"
        for step in flow.steps
        if isinstance(step, Effect) and step.verifier is None and not step.idempotent
    ]


def load_flow(path: str | Path, name: str | None = None) -> LoadedFlow:
    """Import a flow file and return its :class:`Flow` (``name`` picks one of several)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FlowLoadError(f"{p}: no such flow file")
    p = p.resolve()
    if p.suffix != ".py":
        raise FlowLoadError(f"{p}: a flow file must be a .py file")
    module_name = f"browserworker_flow_{p.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, p)
    if spec is None or spec.loader is None:  # pragma: no cover - defensive
        raise FlowLoadError(f"{p}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(p.parent))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        where = f"{p}:{exc.lineno}" if exc.lineno else str(p)
        raise FlowLoadError(f"{where}: syntax error: {exc.msg}") from None
    except FlowDefinitionError as exc:  # a Flow(...) or decorator refused: say where in the file
        sys.modules.pop(module_name, None)
        if str(p) in str(exc):
            raise
        raise type(exc)(f"{_import_error_location(p, exc)}: {exc}") from None
    except (Exception, SystemExit) as exc:  # the flow's own import-time code raised (or called sys.exit)
        sys.modules.pop(module_name, None)
        message = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())  # one line
        raise FlowLoadError(f"{_import_error_location(p, exc)}: {type(exc).__name__}: {message}") from None
    finally:
        try:
            sys.path.remove(str(p.parent))
        except ValueError:  # pragma: no cover
            pass

    flows = {obj.name: obj for obj in vars(module).values() if isinstance(obj, Flow)}
    if not flows:
        raise FlowLoadError(f"{p}: no Flow defined (add e.g. `flow = Flow('my-flow', inputs=MyInputs)`)")
    if name is None:
        if len(flows) > 1:
            raise FlowLoadError(
                f"{p}: defines {len(flows)} flows ({', '.join(sorted(flows))}); pick one with --flow NAME"
            )
        flow = next(iter(flows.values()))
    elif name in flows:
        flow = flows[name]
    else:
        raise FlowLoadError(f"{p}: no flow named {name!r} (it defines: {', '.join(sorted(flows))})")
    if not flow.steps:
        raise FlowLoadError(f"{p}: flow {flow.name!r} has no steps")
    return LoadedFlow(flow=flow, path=p, file_hash=file_hash(p))


def parse_inputs(
    pairs: Iterable[str] = (),
    inputs_json: str | None = None,
    *,
    fields: Iterable[str] = (),
    problems: list[str] | None = None,
) -> dict[str, Any]:
    """Merge ``--inputs-json`` (an object) with ``--input KEY=VALUE`` pairs (which win).

    ``fields`` (the flow's input names) lets a malformed key's message suggest the one
    meant. Every malformed pair is a problem: with ``problems`` given they are appended to
    it (to be reported with the inputs' own problems) and the rest parsed; without, one
    :class:`InputError` names them all."""
    fields = list(fields)
    data: dict[str, Any] = {}
    if inputs_json is not None:
        try:
            loaded = json.loads(inputs_json)
        except json.JSONDecodeError as exc:
            raise InputError(f"--inputs-json is not valid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(loaded, Mapping):
            raise InputError('--inputs-json must be a JSON object, e.g. \'{"item": "tea"}\'')
        data.update(loaded)
    found: list[str] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            found.append(f"--input {pair!r} must look like KEY=VALUE{suggest(key, fields) if key else ''}")
        elif not key.isidentifier():
            found.append(f"--input key {key!r} is not a valid field name{suggest(key, fields)}")
        else:
            data[key] = value
    if found and fields and not any("did you mean" in f for f in found):
        found.append(f"the flow's inputs: {', '.join(fields)}")
    if problems is not None:
        problems.extend(found)
    elif found:
        raise InputError("; ".join(found))
    return data
