"""The worker: claims runs from the durable queue and executes up to N at once on one Chromium.

- claims are atomic (the store's claim query, see browserworker/store/fleet.py), by priority then age;
- every run has its own lease, heartbeated every TTL/3 by a task independent of the page;
  a lost lease shuts and closes that run's context at once;
- the reclaimer sends others' expired leases (plus a clock-skew tolerance) back to the
  queue, flagged for reconciliation, and marks their worker unhealthy;
- :meth:`Worker.request_stop` (SIGTERM/SIGINT) stops claiming, lets in-flight steps finish
  within a grace period and releases runs at their next step boundary, so another worker
  takes them without waiting for expiry.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BrowserworkerError, LeaseLost, StoreError, UsageError
from ..flow import Extension, Extensions, LoadedFlow, file_hash, load_flow
from ..journal import LeaseSettings, owner_is_gone, this_owner
from ..logs import get_logger
from ..states import RunState
from ..store.aio import AsyncStore
from ..store.records import RunRecord
from ..store.wakeups import Wakeups
from ._browser import BrowserProcess, BrowserSettings
from ._leased_run import LeasedRun
from ._settings import ApprovalSettings, SessionSettings

if TYPE_CHECKING:  # pragma: no cover
    from ..store.base import Store

__all__ = ["FlowResolver", "Worker", "WorkerSettings", "WorkerStats", "leftovers"]

log = get_logger("browserworker.worker")

_PAST_EDGE = 0.01  # seconds past a lease's expiry (plus skew) at which the reclaimer wakes for it
_EXPIRE_EVERY = 5.0  # seconds between two looks for approvals past their expiry
_MIN_GAP = 0.05  # the least time between two reclaims woken by an expiry


@dataclass
class WorkerSettings:
    """How a worker behaves."""

    queues: list[str] = field(default_factory=lambda: ["default"])
    concurrency: int = 1
    poll_interval: float = 0.5
    reclaim_every: float = 0.5  # the reclaimer's poll; it also wakes when a live lease expires
    grace: float = 30.0
    max_lease_losses: int = 3
    once: bool = False
    flow_dirs: list[Path] = field(default_factory=list)


@dataclass
class WorkerStats:
    """What a worker did, for its closing line and for tests."""

    claimed: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    released: int = 0
    lease_lost: int = 0
    reclaimed: int = 0
    errors: int = 0
    left: dict[str, int] = field(default_factory=dict)
    """``--once``: the QUEUED runs of its queues it left when it stopped (:func:`leftovers`)."""


def leftovers(store: Store, queues: Sequence[str]) -> dict[str, int]:
    """The QUEUED runs of ``queues`` that a worker with nothing left to claim leaves behind:
    ``delayed`` (their ``--delay`` has not ended) and ``held`` (claimable by time, but a site
    budget or a pause keeps them back). Empty when there are none."""
    left = {"delayed": 0, "held": 0}
    for q in store.queue_backlog(store.now()):
        if q.queue in queues:
            ready = q.ready or 0
            left["delayed"] += q.queued - ready
            left["held"] += ready
    return {k: v for k, v in left.items() if v}


class FlowResolver:
    """Finds the flow of a run: by name in ``--flows`` directories, else the run's own file."""

    def __init__(self, dirs: list[Path]) -> None:
        self.by_name: dict[str, LoadedFlow] = {}
        self._by_path: dict[tuple[str, str], LoadedFlow] = {}
        for d in dirs:
            if not d.is_dir():
                raise UsageError(f"--flows {d}: not a directory")
            for path in sorted(d.glob("*.py")):
                if path.name.startswith("_"):
                    continue
                loaded = load_flow(path)
                if loaded.flow.name in self.by_name:
                    raise UsageError(
                        f"flow {loaded.flow.name!r} is defined twice: {self.by_name[loaded.flow.name].path} and {path}"
                    )
                self.by_name[loaded.flow.name] = loaded

    def resolve(self, run: RunRecord) -> LoadedFlow:
        if run.flow_name in self.by_name:
            return self.by_name[run.flow_name]
        if not run.flow_path:
            raise UsageError(f"run {run.id}: flow {run.flow_name!r} is not in --flows and the run names no file")
        path = Path(run.flow_path)
        if not path.is_file():
            raise UsageError(f"run {run.id}: flow file {path} no longer exists")
        key = (str(path), file_hash(path))
        if key not in self._by_path:
            self._by_path[key] = load_flow(path, run.flow_name)
        return self._by_path[key]


class EngineParts(Protocol):
    """What a worker uses of the :class:`~browserworker.runtime.Engine` it serves."""

    store: Store
    browser: BrowserSettings
    lease: LeaseSettings
    approvals: ApprovalSettings
    sessions: SessionSettings
    evidence_dir: Path | None

    def extensions_for(self, more: Sequence[object] = ()) -> Extensions: ...


class Worker:
    """One worker process's loop over an :class:`~browserworker.runtime._engine.Engine`:
    ``await engine.worker(settings).run()`` (or ``engine.serve(settings)``)."""

    def __init__(self, engine: EngineParts, settings: WorkerSettings, *, label: str = "worker") -> None:
        self.engine = engine
        self.store = engine.store
        self.settings = settings
        self.owner = this_owner(label)
        self.resolver = FlowResolver(settings.flow_dirs)
        self.stats = WorkerStats()
        self._stop = asyncio.Event()
        self._active: dict[asyncio.Task[None], LeasedRun | None] = {}
        self._settled = asyncio.Event()  # a run's end was committed: its slot is free
        self._expire_at = 0.0  # when (monotonic) to look for expired approvals next
        self.log = log.bind(worker_id=self.owner.worker)

    @property
    def id(self) -> str:
        return self.owner.worker

    def request_stop(self) -> None:
        """Stop claiming; in-flight runs are released at their next step boundary."""
        if not self._stop.is_set():
            self.log.info("stopping: no more claims; releasing runs at their next step boundary")
        self._stop.set()
        for leased in self._active.values():
            if leased is not None:
                leased.request_stop()

    async def run(self) -> WorkerStats:
        astore = AsyncStore(self.store)
        s = self.settings
        await astore.call(self.store.register_worker, self.owner, s.queues, s.concurrency)
        self.log.info("worker started", queues=s.queues, concurrency=s.concurrency, ttl=self.engine.lease.ttl)
        beat = asyncio.create_task(self._heartbeat(astore), name="worker-heartbeat")
        wakeups = self.store.wakeups(s.queues)
        try:
            async with BrowserProcess(self.engine.browser) as session:
                await self._loop(astore, session, wakeups)
                await self._drain()
        finally:
            wakeups.close()
            beat.cancel()
            try:
                await astore.call(self.store.mark_worker, self.id, "stopped")
            except StoreError:  # pragma: no cover - the store is gone; nothing more to record
                pass
            astore.close()
        self.log.info("worker stopped", **self.stats.__dict__)
        return self.stats

    async def _heartbeat(self, astore: AsyncStore) -> None:
        while True:
            await asyncio.sleep(self.engine.lease.heartbeat_every)
            try:
                await astore.call(self.store.worker_heartbeat, self.id)
            except StoreError as exc:
                self.log.warning("worker heartbeat failed", error=str(exc))

    async def _loop(self, astore: AsyncStore, session: BrowserProcess, wakeups: Wakeups) -> None:
        s = self.settings
        every = min(s.reclaim_every, self.engine.lease.heartbeat_every)
        # the next reclaim: at the poll cadence, or sooner when a live lease expires (plus skew)
        # before that; each reclaim reads the earliest expiry for the next one
        next_reclaim = min(time.monotonic() + every, await self._reclaim(astore))  # lost runs first
        reclaiming: asyncio.Task[float] | None = None
        while not self._stop.is_set():
            if reclaiming is not None and reclaiming.done():
                next_reclaim = min(next_reclaim, reclaiming.result())
                reclaiming = None
            now = time.monotonic()
            if now >= next_reclaim and reclaiming is None:
                # beside the claims, not in front of them: the runs it requeues are claimed
                # when it ends (it wakes this loop)
                next_reclaim = now + every
                reclaiming = asyncio.create_task(self._reclaim(astore), name="worker-reclaim")
            reclaimed = reclaiming is None  # every run it requeued is claimable from here on
            self._settled.clear()
            claimed_any = await self._fill_slots(astore, session)
            if s.once and not self._active and not claimed_any and reclaimed:
                self.stats.left = await astore.call(leftovers, self.store, s.queues)
                return
            waiters: set[asyncio.Future[Any]] = set(self._active)
            if reclaiming is not None:
                waiters.add(reclaiming)
            # a run became claimable (PostgreSQL's notifications), a slot freed, a stop asked;
            # else the poll: a wake-up that was missed costs at most poll_interval
            wakers: list[asyncio.Future[Any]] = [
                asyncio.ensure_future(self._stop.wait()),
                asyncio.ensure_future(self._settled.wait()),
                wakeups.next(),
            ]
            waiters.update(wakers)
            timeout = min(s.poll_interval, max(0.0, next_reclaim - time.monotonic()))
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for waker in wakers:
                waker.cancel()
        if reclaiming is not None:
            await reclaiming

    async def _fill_slots(self, astore: AsyncStore, session: BrowserProcess) -> bool:
        """Claim runs while a slot is free; whether any was claimed. A browser that died is
        started again first: until it is back, runs would only crash (and lose their leases).
        The free slots claim together: their claims are one statement (the store's batch)."""
        s = self.settings
        if session.gone:
            await self._relaunch(session)
        claimed_any = False
        while (free := s.concurrency - self._busy()) > 0 and not self._stop.is_set() and not session.gone:
            claims = await asyncio.gather(
                *(
                    # started in the claim: the executor starts a fresh run at once anyway
                    astore.call(self.store.claim_next, self.owner, s.queues, self.engine.lease.ttl, start=True)
                    for _ in range(free)
                ),
                return_exceptions=True,
            )
            runs = [run for run in claims if isinstance(run, RunRecord)]
            for run in runs:
                claimed_any = True
                self.stats.claimed += 1
                task = asyncio.create_task(self._execute(astore, session, run), name=f"run-{run.id}")
                self._active[task] = None
                task.add_done_callback(self._active.pop)
            failed = [exc for exc in claims if isinstance(exc, BaseException)]
            for exc in failed:
                if not isinstance(exc, StoreError):
                    raise exc
                self.log.warning("claim failed", error=str(exc))
            if failed or len(runs) < free:  # a claim failed, or the queue has no more for now
                break
        return claimed_any

    async def _relaunch(self, session: BrowserProcess) -> None:
        """The browser died (its driver crashed, or it was killed): start a new one; if that
        fails, stop (this worker would take runs only to crash them)."""
        self.log.error("the browser is gone: starting a new one before claiming again")
        try:
            await session.restart()
        except Exception as exc:  # noqa: BLE001 - any failure to start it: stop, others take the runs
            self.stats.errors += 1
            self.log.error("cannot start a new browser: stopping", error=str(exc))
            self.request_stop()

    def _busy(self) -> int:
        """Runs holding one of the N slots. A run whose end is committed holds none: all it has
        left is closing its context, and the next run starts beside that close."""
        return sum(1 for leased in self._active.values() if leased is None or not leased.settled)

    async def _drain(self) -> None:
        if not self._active:
            return
        self.request_stop()
        tasks = list(self._active)
        done, pending = await asyncio.wait(tasks, timeout=self.settings.grace)
        for task in pending:  # still inside an effect after the grace period: its lease will expire
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)

    async def _reclaim(self, astore: AsyncStore) -> float:
        """Requeue lost runs; returns when (monotonic clock) the earliest live lease left will
        have expired past the skew (infinity if none is held or that is unknown)."""
        s = self.settings
        try:
            runs = await astore.call(
                self.store.reclaim_expired,
                skew=self.engine.lease.skew,
                max_lease_losses=s.max_lease_losses,
                worker=self.id,
            )
        except StoreError as exc:
            self.log.warning("reclaim failed", error=str(exc))
            return math.inf
        try:  # same host: an owner whose process is gone is proven dead now, not at expiry
            runs += await astore.call(
                self.store.reclaim_dead_owners,
                self.owner.host,
                owner_is_gone,
                max_lease_losses=s.max_lease_losses,
                worker=self.id,
            )
        except StoreError as exc:
            self.log.warning("reclaim failed", error=str(exc))
        for run in runs:
            self.stats.reclaimed += 1
            self.log.warning("reclaimed a lost lease", run_id=run.id, state=str(run.state))
        if time.monotonic() >= self._expire_at:  # approvals past their time end like a rejection
            self._expire_at = time.monotonic() + _EXPIRE_EVERY
            try:
                await astore.call(self.store.approvals.expire_due)
            except StoreError as exc:
                self.log.warning("expiring approvals failed", error=str(exc))
        try:
            expires_in = await astore.call(self.store.next_expiry_in)
        except StoreError:
            return math.inf
        if expires_in is None:
            return math.inf
        # a hair past the edge, so the lease reads as expired (``<``) when the reclaim comes;
        # never sooner than _MIN_GAP (leases already past it, more than one reclaim takes,
        # are taken by the next)
        return time.monotonic() + max(_MIN_GAP, expires_in + self.engine.lease.skew + _PAST_EDGE)

    async def _flow_of(self, astore: AsyncStore, run: RunRecord, rlog: Any) -> LoadedFlow | None:
        """The flow of a claimed run; None if it cannot be loaded (the run goes to NEEDS_REVIEW) or
        the lease was lost meanwhile. A flow file changed since the enqueue is journaled."""
        try:
            loaded = self.resolver.resolve(run)
        except BrowserworkerError as exc:
            rlog.error("cannot load the run's flow", error=str(exc))
            await astore.call(
                self.store.set_run_state,
                run.id,
                run.lease_epoch,
                RunState.NEEDS_REVIEW,
                worker=self.id,
                error=str(exc),
                decision="flow_unavailable",
            )
            self.stats.finished["NEEDS_REVIEW"] = self.stats.finished.get("NEEDS_REVIEW", 0) + 1
            return None
        if run.flow_hash and loaded.file_hash != run.flow_hash:
            rlog.warning("the flow file changed since this run was enqueued", flow=str(loaded.path))
            try:
                await astore.call(
                    self.store.record_event,
                    run.id,
                    "flow_changed",
                    worker=self.id,
                    epoch=run.lease_epoch,
                    decision="warning",
                    detail={"enqueued_hash": run.flow_hash, "current_hash": loaded.file_hash},
                )
            except LeaseLost as exc:  # taken over already: the run is another worker's
                self.stats.lease_lost += 1
                rlog.warning("lease lost before the run started", error=str(exc))
                return None
        return loaded

    async def _execute(self, astore: AsyncStore, session: BrowserProcess, run: RunRecord) -> None:
        rlog = self.log.bind(run_id=run.id, lease_epoch=run.lease_epoch)
        started = time.monotonic()
        loaded = await self._flow_of(astore, run, rlog)
        if loaded is None:
            return
        leased = LeasedRun(
            astore,
            run,
            loaded,
            self.owner,
            self.engine.extensions_for([_SlotFreed(self._settled)]),
            lease=self.engine.lease,
            approvals=self.engine.approvals,
            sessions=self.engine.sessions,
            evidence_dir=self.engine.evidence_dir,
        )
        if self._stop.is_set():
            leased.request_stop()
        current = asyncio.current_task()
        if current is not None:
            self._active[current] = leased
        try:
            final = await leased.execute(session)
            state = str(final.state)
            if final.state == RunState.QUEUED:
                self.stats.released += 1
                state = "released"
            else:
                self.stats.finished[state] = self.stats.finished.get(state, 0) + 1
            rlog.info("run ended", state=state, seconds=round(time.monotonic() - started, 2))
        except LeaseLost as exc:
            self.stats.lease_lost += 1
            rlog.warning("lease lost: stopped this run, dispatching nothing more", error=str(exc))
        except asyncio.CancelledError:
            rlog.warning("run cancelled at shutdown; its lease will expire")
            raise
        except StoreError as exc:  # locked, full, read-only: nothing uncommitted was dispatched
            self.stats.errors += 1
            rlog.error(
                "store unavailable: stopped this run; its lease will expire and it will be reconciled", error=str(exc)
            )
        except Exception as exc:  # a bug or a dead browser: stop heartbeating, let the lease expire
            self.stats.errors += 1
            rlog.exception("run crashed; its lease will expire and it will be reconciled", error=str(exc))
        finally:
            await leased.lease.stop()


class _SlotFreed(Extension):
    """A run's end is committed: its slot is free (the next run starts beside its context's close)."""

    def __init__(self, event: asyncio.Event) -> None:
        self.event = event

    def run_settled(self, run_id: str) -> None:
        self.event.set()
