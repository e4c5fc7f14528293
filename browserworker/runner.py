"""Running one flow in this process: create (or resume) a run, lease it, execute it.

This is what ``browserworker run`` calls. Everything that can be checked without the
store (flow file, inputs, run id, browser) is checked before anything is written.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from playwright.async_api import BrowserContext

from . import faults
from .browser import BrowserSession, BrowserSettings
from .errors import UsageError
from .executor import Executor
from .hooks import ExecutorHooks, HookBus, StepObserver
from .leases import Lease, LeaseSettings, owner_is_gone, this_owner
from .loader import LoadedFlow
from .states import TERMINAL_RUN_STATES, RunState
from .store.aio import AsyncStore
from .store.base import Store
from .store.records import NewRun, Owner, RunRecord

__all__ = ["RunRequest", "new_run_id", "prepare_run", "run_flow", "validate_run_id"]

log = structlog.get_logger("browserworker.runner")

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


def validate_run_id(run_id: str) -> str:
    """Run ids are 1-128 of ``A-Z a-z 0-9 . _ : @ -``, starting with a letter or digit."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        shown = run_id if len(run_id) <= 60 else run_id[:57] + "..."
        raise UsageError(f"invalid run id {shown!r}: use 1-128 letters, digits, '.', '_', ':', '@' or '-', "
                         "starting with a letter or digit")
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
        if request.inputs_given:
            given = flow.validate_inputs(request.inputs).model_dump(mode="json")
            stored = flow.validate_inputs(existing.inputs).model_dump(mode="json")
            if given != stored:
                raise UsageError(f"run {run_id} exists with other inputs; resume it without --input, "
                                 "or choose a new --run-id")
        return existing, False
    validated = flow.validate_inputs(request.inputs)  # raises InputError before anything is written
    run = store.create_run(NewRun(id=run_id or new_run_id(), flow_name=flow.name, inputs=flow.dump_inputs(validated),
                                  flow_path=str(request.loaded.path), flow_hash=request.loaded.file_hash,
                                  secret_fields=tuple(flow.secret_fields())))
    return run, True


async def _acquire(store: AsyncStore, run: RunRecord, settings: LeaseSettings, hooks: ExecutorHooks,
                   owner: Owner) -> RunRecord:
    """Lease the run: at once if queued, expired, or its owner is provably gone; else wait."""
    announced = False
    while True:
        claimed = await store.call(store.store.claim_run, run.id, owner, settings.ttl, skew=settings.skew)
        if claimed is not None:
            return claimed
        current = await store.call(store.store.get_run, run.id)
        assert current is not None
        if current.state not in (RunState.LEASED, RunState.RUNNING):
            raise UsageError(f"run {run.id} is {current.state} and cannot be resumed")
        if owner_is_gone(current):
            claimed = await store.call(store.store.claim_run, run.id, owner, settings.ttl, skew=settings.skew,
                                       takeover_epoch=current.lease_epoch)
            if claimed is not None:
                hooks.notice(claimed, None, f"previous owner {current.owner} (pid {current.owner_pid}) is gone: "
                             "reclaimed at once")
                return claimed
            continue
        wait = max(0.2, (current.lease_expires_at or 0) + settings.skew - time.time())
        if not announced:
            hooks.notice(current, None, f"waiting for the lease of {current.owner} (pid {current.owner_pid} on "
                         f"{current.owner_host}, epoch {current.lease_epoch}) to expire, "
                         f"in about {wait:.0f}s")
            announced = True
        await asyncio.sleep(min(wait, 5.0))


async def _watch_stop(stop: asyncio.Event, executor: Executor) -> None:
    await stop.wait()
    executor.stop_requested = True


async def run_flow(store: Store, loaded: LoadedFlow, run: RunRecord, *, browser: BrowserSettings,
                   lease: LeaseSettings | None = None, hooks: ExecutorHooks | None = None,
                   observers: Sequence[StepObserver] = (),
                   on_context: Sequence[Callable[[BrowserContext], Awaitable[None]]] = (),
                   evidence_dir: Path | None = None, stop: asyncio.Event | None = None) -> RunRecord:
    """Lease ``run`` and execute it to its end in this process; returns the final run.

    ``observers`` see every step (recording); ``on_context`` prepares every new browser
    context before any step runs in it (a replay router). Setting ``stop`` hands the run
    back (QUEUED) at its next step boundary; the returned run is then QUEUED.

    A terminal or NEEDS_REVIEW run is returned as it is. Raises
    :class:`~browserworker.errors.LeaseLost` if another owner takes the run away.
    """
    hooks = hooks or HookBus()
    settings = lease or LeaseSettings()
    if run.state in TERMINAL_RUN_STATES or run.state == RunState.NEEDS_REVIEW:
        return run
    astore = AsyncStore(store)
    owner = this_owner("run")
    try:
        leased = await _acquire(astore, run, settings, hooks, owner)
        held = Lease(astore, leased.id, leased.lease_epoch, settings)
        held.start()  # before Chromium starts: a slow launch must not outlive a short lease
        try:
            async with BrowserSession(browser, on_context=on_context) as session:
                executor = Executor(loaded.flow, astore, session, leased, owner, held, settings, hooks=hooks,
                                    observers=observers, evidence_dir=evidence_dir)
                held.on_lost = executor.on_lease_lost
                watcher = asyncio.create_task(_watch_stop(stop, executor)) if stop is not None else None
                try:
                    return await executor.execute()
                finally:
                    if watcher is not None:
                        watcher.cancel()
        finally:
            await held.stop()
    finally:
        astore.close()
