"""Creating a run, or finding the one to resume: what ``browserworker run`` does before it
leases and executes it (:meth:`browserworker.runtime._engine.Engine.run`). Everything that can be
checked without the store (flow, inputs, run id) is checked before anything is written.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import _faults as faults
from ..errors import UsageError
from ..flow import LoadedFlow
from ..states import TERMINAL_RUN_STATES
from ..store.base import Store
from ..store.records import NewRun, RunRecord

__all__ = ["RunRequest", "new_run_id", "prepare_run", "validate_run_id"]

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


def validate_run_id(run_id: str) -> str:
    """Run ids are 1-128 of ``A-Z a-z 0-9 . _ : @ -``, starting with a letter or digit."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        shown = run_id if len(run_id) <= 60 else run_id[:57] + "..."
        raise UsageError(
            f"invalid run id {shown!r}: use 1-128 letters, digits, '.', '_', ':', '@' or '-', "
            "starting with a letter or digit"
        )
    return run_id


def new_run_id() -> str:
    """A fresh, sortable, unique run id."""
    return f"r-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"


@dataclass
class RunRequest:
    """What ``run`` was asked to do."""

    loaded: LoadedFlow
    inputs: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    inputs_given: bool = False


def prepare_run(store: Store, request: RunRequest) -> tuple[RunRecord, bool]:
    """Create the run, or find the one to resume. Returns ``(run, created)``.

    Raises :class:`UsageError` (nothing written) for bad inputs, a bad run id, or a run
    id that belongs to another flow or was created with other inputs.
    """
    if faults.ENV_ERROR:
        raise UsageError(faults.ENV_ERROR)
    flow = request.loaded.flow
    run_id = validate_run_id(request.run_id) if request.run_id is not None else None
    existing = store.get_run(run_id) if run_id else None
    if existing is not None:
        if existing.flow_name != flow.name:
            raise UsageError(f"run {run_id} belongs to flow {existing.flow_name!r}, not {flow.name!r}")
        if existing.state in TERMINAL_RUN_STATES:  # nothing will run: the inputs given do not matter
            return existing, False
        if request.inputs_given:
            given = flow.validate_inputs(request.inputs).model_dump(mode="json")
            stored = flow.validate_inputs(existing.inputs).model_dump(mode="json")
            if given != stored:
                raise UsageError(
                    f"run {run_id} exists with other inputs; resume it without --input, or choose a new --run-id"
                )
        return existing, False
    validated = flow.validate_inputs(request.inputs)  # raises InputError before anything is written
    flow.context_options(validated)  # as does a context option computed from them
    flow.session_key(validated)  # and a session key
    limit_key = flow.limit_key(validated)  # and its limit key
    run = store.create_run(
        NewRun(
            id=run_id or new_run_id(),
            flow_name=flow.name,
            inputs=flow.dump_inputs(validated),
            flow_path=str(request.loaded.path),
            flow_hash=request.loaded.file_hash,
            secret_fields=tuple(flow.secret_fields()),
            limit_key=limit_key,
        )
    )
    return run, True
