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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..flow import Extensions, LoadedFlow
from ..journal import LeaseSettings, this_owner
from ..logs import RunLog
from ..states import TERMINAL_RUN_STATES, RunState
from ..store.aio import AsyncStore
from ..store.base import Store
from ..store.records import RunRecord
from ._browser import BrowserProcess, BrowserSettings
from ._leased_run import LeasedRun, acquire
from ._run_request import RunRequest, prepare_run
from ._settings import ApprovalSettings, SessionSettings

if TYPE_CHECKING:  # pragma: no cover
    from ._worker import Worker, WorkerSettings, WorkerStats

__all__ = ["Engine"]


class Engine:
    """Runs runs: here and now (:meth:`run`), or as a worker serving queues (:meth:`serve`).

    ``extensions`` (see :mod:`browserworker.flow._extensions`) hear about every run this engine
    executes; ``evidence_dir`` keeps screenshots of steps parked for review. Settings not given
    come from the environment, as the command's do: ``browser`` from
    :meth:`BrowserSettings.discover`, ``approvals`` (the hold and default expiry of ``approve=``
    effects) from :meth:`ApprovalSettings.from_env`, ``sessions`` (the sealing key and maximum
    age of saved login sessions) from :meth:`SessionSettings.from_env`.
    """

    def __init__(
        self,
        store: Store,
        *,
        browser: BrowserSettings | None = None,
        lease: LeaseSettings | None = None,
        extensions: Sequence[object] = (),
        evidence_dir: Path | None = None,
        approvals: ApprovalSettings | None = None,
        sessions: SessionSettings | None = None,
    ) -> None:
        self.store = store
        self.browser = browser if browser is not None else BrowserSettings.discover()
        self.lease = lease if lease is not None else LeaseSettings()
        self.approvals = approvals if approvals is not None else ApprovalSettings.from_env()
        self.sessions = sessions if sessions is not None else SessionSettings.from_env()
        self.extensions = list(extensions)
        self.evidence_dir = evidence_dir

    def prepare(
        self,
        loaded: LoadedFlow,
        inputs: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        inputs_given: bool = False,
    ) -> tuple[RunRecord, bool]:
        """Create the run, or find the one to resume: ``(run, created)``. Raises
        :class:`~browserworker.errors.UsageError` (nothing written) for bad inputs or a bad run id."""
        return prepare_run(
            self.store, RunRequest(loaded=loaded, inputs=dict(inputs or {}), run_id=run_id, inputs_given=inputs_given)
        )

    async def run(
        self,
        loaded: LoadedFlow,
        run: RunRecord,
        *,
        stop: asyncio.Event | None = None,
        extensions: Sequence[object] = (),
        browser: BrowserProcess | None = None,
    ) -> RunRecord:
        """Lease ``run`` and execute it to its end in this process; returns the final run.

        A terminal, NEEDS_REVIEW or AWAITING_APPROVAL run is returned as it is (so is one parked for approval). Setting ``stop`` hands the run
        back (QUEUED) at its next step boundary. A run whose key's budget holds it (or that a
        site throttled) waits for the budget, with a notice. ``extensions`` hear this run only.
        Raises :class:`~browserworker.errors.LeaseLost` if another owner takes the run away.
        ``browser``: a :class:`BrowserProcess` of this engine's settings, not entered yet (its
        driver may be starting, see :meth:`BrowserProcess.start_driver`), for the first pass,
        which enters and closes it; if no pass runs, closing it is the caller's (closing again
        does nothing).
        """
        if run.state in TERMINAL_RUN_STATES or run.state in (RunState.NEEDS_REVIEW, RunState.AWAITING_APPROVAL):
            return run
        ext = self.extensions_for(extensions)
        astore = AsyncStore(self.store)
        owner = this_owner("run")
        try:
            while True:
                claimed = await acquire(astore, run, self.lease, ext, owner, stop=stop)
                if claimed is None:  # stopped while waiting (for a budget, a live lease): nothing was taken
                    return await astore.call(self.store.get_run, run.id) or run
                leased = LeasedRun(
                    astore,
                    claimed,
                    loaded,
                    owner,
                    ext,
                    lease=self.lease,
                    approvals=self.approvals,
                    sessions=self.sessions,
                    evidence_dir=self.evidence_dir,
                )
                leased.start()  # before Chromium starts: a slow launch must not outlive a short lease
                process = browser or BrowserProcess(self.browser)
                browser = None  # the given one serves the first pass only; a later one starts its own
                async with process as session:
                    watcher = asyncio.create_task(_watch_stop(stop, leased)) if stop is not None else None
                    try:
                        run = await leased.execute(session)
                    finally:
                        if watcher is not None:
                            watcher.cancel()
                # a throttled run waits here for its key's pause (acquire says so), then goes on
                if not leased.throttled or (stop is not None and stop.is_set()):
                    return run
        finally:
            astore.close()

    def worker(self, settings: WorkerSettings, *, label: str = "worker") -> Worker:
        """A worker serving ``settings.queues`` with this engine (``await worker.run()``)."""
        from ._worker import Worker

        return Worker(self, settings, label=label)

    async def serve(self, settings: WorkerSettings) -> WorkerStats:
        """Serve queues as a worker until stopped (or, with ``settings.once``, until they are empty)."""
        return await self.worker(settings).run()

    def extensions_for(self, more: Sequence[object] = ()) -> Extensions:
        """A run's subscribers: its log lines (:class:`~browserworker.logs.RunLog`), this engine's
        extensions, then ``more``."""
        return Extensions([RunLog(), *self.extensions, *more])

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _watch_stop(stop: asyncio.Event, leased: LeasedRun) -> None:
    await stop.wait()
    leased.request_stop()
