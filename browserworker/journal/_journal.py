"""One leased run's journal: every write the executor and the gate make, typed and fenced.

A :class:`RunJournal` is bound to one run, the lease epoch it holds, its owner and its
lease. Each method is one store call on the store's thread. Writes that decide something
(a transition, an intent, an outcome, a decision) first check that the lease is not known
lost and mark it lost when the store says the epoch moved on (:class:`LeaseLost`); the
dispatch commit also demands the dispatch margin. Evidence (responses, redirect ends,
failures) is written unfenced: it is what happened, whoever holds the run now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..errors import LeaseLost
from ..states import AttemptState, RunState
from ..store.aio import AsyncStore
from ..store.records import ApprovalRecord, AttemptRecord, OutboxRecord, Owner, RunRecord
from ._leases import Lease, LeaseSettings

__all__ = ["RunJournal"]

T = TypeVar("T")


class RunJournal:
    """The journal of ``run`` as its current lease holder (``owner``, at ``run.lease_epoch``) writes it."""

    def __init__(self, store: AsyncStore, run: RunRecord, owner: Owner, lease: Lease, settings: LeaseSettings) -> None:
        self.astore = store
        self.store = store.store
        self.run = run
        self.run_id = run.id
        self.owner = owner
        self.worker = owner.worker
        self.lease = lease
        self.settings = settings
        self.epoch = run.lease_epoch

    # -- the lease ------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """The lease is not known to be lost."""
        return self.lease.lost is None

    def holds(self, margin: float) -> bool:
        """The lease is not known lost and has at least ``margin`` seconds left (local clock)."""
        return self.lease.holds(margin)

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease is known to be lost."""
        self.lease.check()

    def request_key(self, step_id: str) -> str:
        """The key an effect's attempts share across passes and workers."""
        return f"{self.run_id}/{step_id}"

    async def _fenced(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self.lease.check()
        try:
            return await self.astore.call(fn, *args, **kwargs)
        except LeaseLost as exc:
            self.lease.mark_lost(exc)
            raise

    # -- the run ---------------------------------------------------------------------------

    async def history(self) -> tuple[list[AttemptRecord], float | None, float | None]:
        """The run's attempts so far, and when it was last restored from a backup (or None)."""
        return await self._fenced(self.store.history, self.run_id)

    async def start(self) -> None:
        """The run is RUNNING."""
        await self._fenced(
            self.store.advance_run, self.run_id, self.epoch, RunState.RUNNING, worker=self.worker, decision="started"
        )

    async def end(self, state: RunState, error: str | None, decision: str) -> RunRecord:
        """Move the run to its end state (or NEEDS_REVIEW); returns it as it now is."""
        self.lease.ending = True
        return await self._fenced(
            self.store.set_run_state, self.run_id, self.epoch, state, worker=self.worker, error=error, decision=decision
        )

    async def release(self, decision: str = "released") -> RunRecord:
        """Hand the run back (QUEUED) at a step boundary; returns it as it now is."""
        self.lease.ending = True
        await self._fenced(self.store.release_run, self.run_id, self.epoch, worker=self.worker, decision=decision)
        run = await self.astore.call(self.store.get_run, self.run_id)
        assert run is not None
        return run

    async def cancel_requested(self) -> bool:
        return await self._fenced(self.store.cancel_requested, self.run_id)

    async def effect_boundary(self, step_id: str) -> tuple[bool, AttemptRecord | None]:
        """Before an effect: whether a cancel was asked, and the step's latest attempt (one call)."""
        return await self._fenced(self.store.effect_boundary, self.run_id, step_id)

    async def attempts(self) -> list[AttemptRecord]:
        return await self._fenced(self.store.attempts, self.run_id)

    async def outbox(self, attempt: AttemptRecord) -> list[OutboxRecord]:
        return await self._fenced(self.store.outbox, attempt.id)

    # -- attempts ----------------------------------------------------------------------------

    async def begin(self, step_id: str, kind: str, fingerprint: str) -> AttemptRecord:
        """Journal a new attempt: INTENT for an effect (demanding the dispatch margin), RUNNING for an action."""
        margin = self.settings.margin if kind == "effect" else 0.0
        return await self._fenced(
            self.store.begin_attempt,
            self.run_id,
            self.epoch,
            step_id,
            kind,
            self.request_key(step_id),
            fingerprint,
            worker=self.worker,
            margin=margin,
        )

    async def finish(
        self,
        attempt: AttemptRecord,
        state: AttemptState,
        *,
        decided_by: str,
        result: Any = None,
        evidence: Any = None,
        error: str | None = None,
        dispatched: bool = False,
    ) -> AttemptRecord:
        """Journal an attempt's outcome (or a recovery's decision on it); returns the row as it now reads."""
        return await self._fenced(
            self.store.finish_attempt,
            attempt,
            self.epoch,
            state,
            decided_by=decided_by,
            result=result,
            evidence=evidence,
            error=error,
            worker=self.worker,
            dispatched=dispatched,
        )

    async def decide(self, attempt: AttemptRecord, decision: str, detail: Any = None) -> None:
        """Journal a decision about ``attempt`` that does not change its state (an event)."""
        await self.decide_step(attempt.step_id, attempt.attempt_no, decision, detail)

    async def decide_step(self, step_id: str, attempt_no: int, decision: str, detail: Any = None) -> None:
        """Journal a decision made during attempt ``attempt_no`` of ``step_id`` (an event)."""
        await self._fenced(
            self.store.record_event,
            self.run_id,
            "decision",
            step_id=step_id,
            attempt_no=attempt_no,
            worker=self.worker,
            epoch=self.epoch,
            decision=decision,
            detail=detail,
        )

    async def record(self, kind: str, *, step_id: str | None = None, detail: Any = None) -> None:
        """Journal an event of ``kind`` for this run (an agent's tool call, say), fenced by the epoch."""
        await self._fenced(
            self.store.record_event,
            self.run_id,
            kind,
            step_id=step_id,
            worker=self.worker,
            epoch=self.epoch,
            detail=detail,
        )

    # -- approvals -------------------------------------------------------------------------

    async def request_approval(
        self, attempt: AttemptRecord, fingerprint: str, summary: dict[str, Any], screenshot: str | None, ttl: float
    ) -> ApprovalRecord:
        """Ask a person to approve the request with ``fingerprint`` (the step's live approval of
        the same fingerprint is returned as it is; one of another is superseded)."""
        return await self._fenced(
            self.store.approvals.request,
            self.run_id,
            self.epoch,
            attempt.step_id,
            attempt.attempt_no,
            attempt.request_key,
            fingerprint,
            summary,
            screenshot=screenshot,
            ttl=ttl,
            worker=self.worker,
        )

    async def park(self, approval_id: int) -> RunRecord:
        """Hand the run over to the decision on ``approval_id`` (AWAITING_APPROVAL, or QUEUED /
        FAILED if decided meanwhile); returns it as it now is."""
        self.lease.ending = True
        return await self._fenced(self.store.approvals.park, self.run_id, self.epoch, approval_id, worker=self.worker)

    # -- the gate: what left, and what came back ----------------------------------------------

    async def dispatch(
        self, attempt: AttemptRecord, method: str, url: str, *, channel: str, margin: float | None = None
    ) -> int:
        """The gate's commit before a request leaves: ``dispatched_at`` and an outbox row, fenced by
        the epoch and (unless ``margin=0``, for what has left already) the dispatch margin.
        Returns the outbox id. Never marks the lease lost: the gate refuses and the executor decides."""
        return await self.astore.call(
            self.store.mark_dispatched,
            attempt,
            self.epoch,
            method,
            url,
            margin=self.settings.margin if margin is None else margin,
            channel=channel,
        )

    async def answered(self, outbox_id: int, status: int, url: str, headers: Mapping[str, str]) -> None:
        await self.astore.call(self.store.record_response, outbox_id, status, url, headers)

    async def throttled(self, status: int, url: str, seconds: float) -> None:
        """The site answered ``status`` with a Retry-After of ``seconds``: pause the run's limit key
        fleet-wide (journaled as ``limit_paused`` on this run). Unfenced: it is what the site said."""
        key = self.run.limit_key or self.run.flow_name
        await self.astore.call(
            self.store.pause_limit,
            key,
            seconds,
            f"HTTP {status} from {url}",
            run_id=self.run_id,
            detail={"status": status, "url": url},
            worker=self.worker,
        )

    async def final(self, outbox_id: int, status: int, url: str) -> None:
        await self.astore.call(self.store.record_final, outbox_id, status, url)

    async def failed(self, outbox_id: int, failure: str) -> None:
        await self.astore.call(self.store.record_request_failed, outbox_id, failure)
