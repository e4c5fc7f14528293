"""The engine: one object that assembles a store, a browser, leases and extensions.

Everything that executes runs goes through it: ``browserworker run`` and ``worker``,
recording and replay, chaos and the pytest plugin. None of them wires a store, a lease,
a browser session and an executor together itself::

    engine = Engine(open_store("browserworker.db"), browser=BrowserSettings.discover())
    loaded = load_flow("flow.py")
    run, created = engine.prepare(loaded, {"sku": "A-1"})
    final = asyncio.run(engine.run(loaded, run))
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .browser import BrowserSession, BrowserSettings
from .errors import UsageError
from .executor import Executor
from .extensions import Extensions
from .journal import RunJournal
from .leases import Lease, LeaseSettings, owner_is_gone, this_owner
from .loader import LoadedFlow
from .runner import RunRequest, prepare_run
from .states import TERMINAL_RUN_STATES, RunState
from .store.aio import AsyncStore
from .store.base import Store
from .store.records import Owner, RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from .worker import Worker, WorkerSettings, WorkerStats

__all__ = ["Engine", "LeasedRun"]


class Engine:
    """Runs runs: here and now (:meth:`run`), or as a worker serving queues (:meth:`serve`).

    ``extensions`` (see :mod:`browserworker.extensions`) hear about every run this engine
    executes; ``evidence_dir`` keeps screenshots of steps parked for review.
    """

    def __init__(self, store: Store, *, browser: BrowserSettings | None = None, lease: LeaseSettings | None = None,
                 extensions: Sequence[object] = (), evidence_dir: Path | None = None) -> None:
        self.store = store
        self.browser = browser if browser is not None else BrowserSettings.discover()
        self.lease = lease if lease is not None else LeaseSettings()
        self.extensions = list(extensions)
        self.evidence_dir = evidence_dir

    def prepare(self, loaded: LoadedFlow, inputs: Mapping[str, Any] | None = None, *, run_id: str | None = None,
                inputs_given: bool = False) -> tuple[RunRecord, bool]:
        """Create the run, or find the one to resume: ``(run, created)``. Raises
        :class:`~browserworker.errors.UsageError` (nothing written) for bad inputs or a bad run id."""
        return prepare_run(self.store, RunRequest(loaded=loaded, inputs=dict(inputs or {}), run_id=run_id,
                                                  inputs_given=inputs_given))

    async def run(self, loaded: LoadedFlow, run: RunRecord, *, stop: asyncio.Event | None = None,
                  extensions: Sequence[object] = ()) -> RunRecord:
        """Lease ``run`` and execute it to its end in this process; returns the final run.

        A terminal or NEEDS_REVIEW run is returned as it is. Setting ``stop`` hands the run
        back (QUEUED) at its next step boundary. ``extensions`` hear this run only.
        Raises :class:`~browserworker.errors.LeaseLost` if another owner takes the run away.
        """
        if run.state in TERMINAL_RUN_STATES or run.state == RunState.NEEDS_REVIEW:
            return run
        ext = self.extensions_for(extensions)
        astore = AsyncStore(self.store)
        owner = this_owner("run")
        try:
            leased = LeasedRun(self, astore, await _acquire(astore, run, self.lease, ext, owner), loaded, owner, ext)
            leased.start()  # before Chromium starts: a slow launch must not outlive a short lease
            async with BrowserSession(self.browser) as session:
                watcher = asyncio.create_task(_watch_stop(stop, leased)) if stop is not None else None
                try:
                    return await leased.execute(session)
                finally:
                    if watcher is not None:
                        watcher.cancel()
        finally:
            astore.close()

    def worker(self, settings: WorkerSettings, *, label: str = "worker") -> Worker:
        """A worker serving ``settings.queues`` with this engine (``await worker.run()``)."""
        from .worker import Worker

        return Worker(self, settings, label=label)

    async def serve(self, settings: WorkerSettings) -> WorkerStats:
        """Serve queues as a worker until stopped (or, with ``settings.once``, until they are empty)."""
        return await self.worker(settings).run()

    def extensions_for(self, more: Sequence[object] = ()) -> Extensions:
        """A run's subscribers: this engine's extensions, then ``more``."""
        return Extensions([*self.extensions, *more])

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LeasedRun:
    """One run this process holds the lease of: its heartbeat, its journal and, once it
    executes, its executor. The engine builds it; a worker keeps one per slot."""

    def __init__(self, engine: Engine, astore: AsyncStore, run: RunRecord, loaded: LoadedFlow, owner: Owner,
                 extensions: Extensions) -> None:
        self.engine = engine
        self.run = run
        self.loaded = loaded
        self.extensions = extensions
        self.lease = Lease(astore, run.id, run.lease_epoch, engine.lease, extensions)
        self.journal = RunJournal(astore, run, owner, self.lease, engine.lease)
        self.executor: Executor | None = None
        self.stop_requested = False
        self._beating = False

    @property
    def settled(self) -> bool:
        """The run's end is committed; only closing its context is left."""
        return self.executor is not None and self.executor.settled

    def request_stop(self) -> None:
        """Hand the run back at its next step boundary."""
        self.stop_requested = True
        if self.executor is not None:
            self.executor.stop_requested = True

    def start(self) -> None:
        """Start heartbeating."""
        self.lease.start()
        self._beating = True

    async def execute(self, session: BrowserSession) -> RunRecord:
        """Execute the run in ``session`` to its end (heartbeating from :meth:`start`, or from now)."""
        executor = Executor(self.loaded.flow, self.journal, session, self.extensions,
                            evidence_dir=self.engine.evidence_dir)
        executor.stop_requested = self.stop_requested
        self.extensions.add(executor.closer)
        self.executor = executor
        if not self._beating:
            self.start()
        try:
            return await executor.execute()
        finally:
            await self.lease.stop()


async def _acquire(store: AsyncStore, run: RunRecord, settings: LeaseSettings, ext: Extensions,
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
                await ext.emit("notice", claimed, None, f"previous owner {current.owner} (pid {current.owner_pid}) "
                               "is gone: reclaimed at once")
                return claimed
            continue
        wait = max(0.2, (current.lease_expires_at or 0) + settings.skew - time.time())
        if not announced:
            await ext.emit("notice", current, None, f"waiting for the lease of {current.owner} (pid "
                           f"{current.owner_pid} on {current.owner_host}, epoch {current.lease_epoch}) to expire, "
                           f"in about {wait:.0f}s")
            announced = True
        await asyncio.sleep(min(wait, 5.0))


async def _watch_stop(stop: asyncio.Event, leased: LeasedRun) -> None:
    await stop.wait()
    leased.request_stop()
