"""A run this process holds the lease of, on its way to an end: leasing it (waiting for a
live owner's lease, taking over a provably dead one), heartbeating, its journal and its executor."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from ..errors import OverBudget, UsageError
from ..flow import Extensions, LoadedFlow
from ..journal import Lease, LeaseSettings, RunJournal, owner_is_gone
from ..states import RunState
from ..store.aio import AsyncStore
from ..store.records import Owner, RunRecord
from ._browser import BrowserProcess
from ._executor import Executor
from ._settings import ApprovalSettings, SessionSettings

__all__ = ["LeasedRun", "acquire"]


class LeasedRun:
    """One run this process holds the lease of: its heartbeat, its journal and, once it
    executes, its executor. The engine and a worker (one per slot) build it."""

    def __init__(
        self,
        astore: AsyncStore,
        run: RunRecord,
        loaded: LoadedFlow,
        owner: Owner,
        extensions: Extensions,
        *,
        lease: LeaseSettings,
        approvals: ApprovalSettings,
        sessions: SessionSettings | None = None,
        evidence_dir: Path | None = None,
    ) -> None:
        self.run = run
        self.evidence_dir = evidence_dir
        self.approvals = approvals
        self.sessions = sessions if sessions is not None else SessionSettings()
        self.loaded = loaded
        self.extensions = extensions
        self.lease = Lease(astore, run.id, run.lease_epoch, lease, extensions)
        self.journal = RunJournal(astore, run, owner, self.lease, lease)
        self.executor: Executor | None = None
        self.stop_requested = False
        self._beating = False

    @property
    def throttled(self) -> bool:
        """The run went back to the queue because the site throttled an effect."""
        return self.executor is not None and self.executor.throttled

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

    async def execute(self, session: BrowserProcess) -> RunRecord:
        """Execute the run in ``session`` to its end (heartbeating from :meth:`start`, or from now)."""
        executor = Executor(
            self.loaded.flow,
            self.journal,
            session,
            self.extensions,
            approvals=self.approvals,
            sessions=self.sessions,
            evidence_dir=self.evidence_dir,
        )
        executor.stop_requested = self.stop_requested
        self.extensions.add(executor.closer)
        self.executor = executor
        if not self._beating:
            self.start()
        try:
            return await executor.execute()
        finally:
            await self.lease.stop()
            await self.extensions.drain()  # what hooks started in the background ends with the run


async def acquire(
    store: AsyncStore,
    run: RunRecord,
    settings: LeaseSettings,
    ext: Extensions,
    owner: Owner,
    *,
    stop: asyncio.Event | None = None,
) -> RunRecord | None:
    """Lease the run: at once if queued, expired, or its owner is provably gone; else wait
    (for its key's budget, or the live owner's lease). None if ``stop`` is set while waiting."""
    announced = False
    held: str | None = None
    while True:
        try:
            claimed = await store.call(store.store.claim_run, run.id, owner, settings.ttl, skew=settings.skew)
        except OverBudget as over:  # a queued run waits for its key's budget, as a worker's would
            if over.reason != held:
                await ext.notice(
                    run,
                    None,
                    f"waiting: {over}; the run starts when its budget allows (browserworker limits)",
                )
                held = over.reason
            if await _stopped(stop, min(over.retry_in, 1.0)):
                return None
            continue
        if claimed is not None:
            return claimed
        current = await store.call(store.store.get_run, run.id)
        assert current is not None
        if current.state not in (RunState.LEASED, RunState.RUNNING):
            raise UsageError(f"run {run.id} is {current.state} and cannot be resumed")
        if owner_is_gone(current):
            claimed = await store.call(
                store.store.claim_run,
                run.id,
                owner,
                settings.ttl,
                skew=settings.skew,
                takeover_epoch=current.lease_epoch,
            )
            if claimed is not None:
                await ext.notice(
                    claimed,
                    None,
                    f"previous owner {current.owner} (pid {current.owner_pid}) is gone: reclaimed at once",
                )
                return claimed
            continue
        wait = max(0.2, (current.lease_expires_at or 0) + settings.skew - time.time())
        if not announced:
            await ext.notice(
                current,
                None,
                f"waiting for the lease of {current.owner} (pid "
                f"{current.owner_pid} on {current.owner_host}, epoch {current.lease_epoch}) to expire, "
                f"in about {wait:.0f}s",
            )
            announced = True
        if await _stopped(stop, min(wait, 5.0)):
            return None


async def _stopped(stop: asyncio.Event | None, seconds: float) -> bool:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile; whether it is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):  # not wait_for, which may swallow a cancel (Python 3.11)
            await stop.wait()
    return stop.is_set()
