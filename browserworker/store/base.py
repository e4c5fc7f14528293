"""The durable control plane: the :class:`Store` protocol.

The executor, the gate, the worker and the CLI only ever talk to a :class:`Store`.
:class:`~browserworker.store.shared.SQLStore` implements it once, over a dialect's
:class:`~browserworker.store.connector.Connector` (SQLite or PostgreSQL);
:func:`~browserworker.store.url.open_store` opens one from a path or a URL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..states import AttemptState, RunState
from .records import AttemptRecord, EventRecord, NewRun, OutboxRecord, Owner, RunRecord, WorkerRecord
from .wakeups import Wakeups

if TYPE_CHECKING:
    from .approvals import ApprovalManager
    from .console_sessions import ConsoleSessionManager
    from .login_sessions import LoginSessionManager
    from .records import (
        DuplicatePrevented,
        KeyLimits,
        LiveLease,
        QueueBacklog,
        QueueWait,
        Reconciliation,
        RestoreFence,
        StateCount,
        StepUnknowns,
        UnknownOpen,
        WorkerLoad,
    )

__all__ = ["Store"]


@runtime_checkable
class Store(Protocol):
    """What the executor and the CLI need from a durable store.

    Every write that changes a run or its journal is *fenced*: it names the lease epoch
    the caller holds and raises :class:`LeaseLost` when that epoch is no longer current
    (or, with ``margin``, when the lease has less than ``margin`` seconds left).
    """

    #: saved login sessions (:mod:`browserworker.store.login_sessions`)
    login_sessions: LoginSessionManager
    #: requests held for a person's decision (:mod:`browserworker.store.approvals`)
    approvals: ApprovalManager
    #: who is signed in to the console (:mod:`browserworker.store.console_sessions`)
    console_sessions: ConsoleSessionManager

    def now(self) -> float:
        """The store's clock (seconds since the epoch): leases and fences are measured by it."""
        ...

    def close(self) -> None: ...

    def group(self, *, isolate: bool = True) -> AbstractContextManager[None]:
        """One transaction (one commit) around many store calls: group commit.

        With ``isolate`` (the default), each call's own transaction becomes a savepoint, so a
        call that fails rolls back only itself. Without it the calls share the transaction
        bare, and the first call whose transaction block fails spoils the group: later calls
        raise at once and the group rolls everything back and raises :class:`GroupSpoiled` —
        the caller runs the batch again isolated. Nothing is durable, so nobody may act on a
        result, until the group commits: :class:`~browserworker.store.aio.AsyncStore` hands
        results out only then. If the database rolls the whole transaction back itself, the
        rest of the group's calls fail at once and the group raises :class:`StoreError`.
        """
        ...

    @property
    def location(self) -> str:
        """Where the database is, for messages (a path, or a URL without its password)."""
        ...

    @property
    def schema_version(self) -> int: ...
    def integrity_check(self) -> str: ...
    def wakeups(self, queues: Sequence[str]) -> Wakeups: ...

    # runs
    def create_run(self, run: NewRun) -> RunRecord: ...
    def get_run(self, run_id: str) -> RunRecord | None: ...
    def list_runs(self, state: RunState | None = None, limit: int = 100) -> list[RunRecord]: ...
    def search_runs(
        self,
        *,
        state: RunState | None = None,
        flow: str | None = None,
        queue: str | None = None,
        text: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[RunRecord], int]:
        """A page of runs, newest first, that pass the filters (None: any), and how many pass in all."""
        ...

    def run_flows(self) -> dict[str, int]: ...
    def claim_run(
        self, run_id: str, owner: Owner, ttl: float, *, skew: float = 0.0, takeover_epoch: int | None = None
    ) -> RunRecord | None: ...
    def heartbeat(self, run_id: str, epoch: int, ttl: float) -> None: ...
    def cancel_requested(self, run_id: str) -> bool: ...
    def set_run_state(
        self,
        run_id: str,
        epoch: int,
        state: RunState,
        *,
        worker: str | None = None,
        error: str | None = None,
        decision: str | None = None,
    ) -> RunRecord: ...
    def advance_run(
        self,
        run_id: str,
        epoch: int,
        state: RunState,
        *,
        worker: str | None = None,
        error: str | None = None,
        decision: str | None = None,
    ) -> None: ...
    def clear_reconcile(self, run_id: str, epoch: int) -> None: ...

    # journal
    def begin_attempt(
        self,
        run_id: str,
        epoch: int,
        step_id: str,
        kind: str,
        request_key: str,
        fingerprint: str,
        *,
        worker: str | None = None,
        margin: float = 0.0,
    ) -> AttemptRecord: ...
    def mark_dispatched(
        self, attempt: AttemptRecord, epoch: int, method: str, url: str, *, margin: float = 0.0, channel: str = "held"
    ) -> int: ...
    def record_response(self, outbox_id: int, status: int, url: str, headers: Mapping[str, str]) -> None: ...
    def record_final(self, outbox_id: int, status: int, url: str) -> None: ...
    def record_request_failed(self, outbox_id: int, failure: str) -> None: ...
    def finish_attempt(
        self,
        attempt: AttemptRecord,
        epoch: int,
        state: AttemptState,
        *,
        decided_by: str,
        result: Any = None,
        evidence: Any = None,
        error: str | None = None,
        worker: str | None = None,
        dispatched: bool = False,
    ) -> AttemptRecord: ...
    def get_attempt(self, attempt_id: int) -> AttemptRecord: ...
    def attempts(self, run_id: str) -> list[AttemptRecord]: ...
    def latest_attempt(self, run_id: str, step_id: str) -> AttemptRecord | None: ...
    def outbox(self, attempt_id: int) -> list[OutboxRecord]: ...
    def events(self, run_id: str) -> list[EventRecord]: ...
    def restored_at(self, run_id: str) -> float | None: ...
    def history(self, run_id: str) -> tuple[list[AttemptRecord], float | None, float | None]: ...
    def effect_boundary(self, run_id: str, step_id: str) -> tuple[bool, AttemptRecord | None]: ...
    def record_event(
        self,
        run_id: str,
        kind: str,
        *,
        step_id: str | None = None,
        attempt_no: int | None = None,
        worker: str | None = None,
        epoch: int | None = None,
        decision: str | None = None,
        detail: Any = None,
    ) -> None: ...

    # the fleet
    def enqueue(self, run: NewRun) -> RunRecord: ...
    def set_queue_limit(self, queue: str, max_depth: int | None) -> None: ...
    def queue_limits(self) -> dict[str, int | None]: ...
    def claim_next(self, owner: Owner, queues: Sequence[str], ttl: float) -> RunRecord | None:
        """Atomically lease the next run of ``queues``: highest priority, then oldest."""
        ...

    def reclaim_expired(
        self, *, skew: float, max_lease_losses: int, worker: str | None = None, limit: int = 100
    ) -> list[RunRecord]: ...
    def reclaim_dead_owners(
        self, host: str, is_gone: Callable[[RunRecord], bool], *, max_lease_losses: int, worker: str | None = None
    ) -> list[RunRecord]: ...
    def next_expiry_in(self) -> float | None: ...
    def release_run(
        self, run_id: str, epoch: int, *, worker: str | None = None, decision: str = "released"
    ) -> None: ...
    def cancel(self, run_id: str, *, who: str | None = None) -> str: ...
    def requeue(self, run_id: str, *, who: str) -> RunRecord: ...
    def resolve(self, run_id: str, step_id: str, decision: str, *, result: Any = None, who: str) -> RunRecord: ...
    def register_worker(self, owner: Owner, queues: Sequence[str], concurrency: int) -> None: ...
    def worker_heartbeat(self, worker_id: str) -> None: ...
    def mark_worker(self, worker_id: str, health: str) -> None: ...
    def workers(self) -> list[WorkerRecord]: ...
    def runs_needing_review(self, limit: int = 100) -> list[RunRecord]: ...

    # budgets of limit keys: see browserworker.store.limit_rules
    def set_limit(self, key: str, *, concurrency: int | None = None, rate: float | None = None) -> KeyLimits: ...
    def clear_limit(self, key: str | None) -> int: ...
    def pause_limit(
        self,
        key: str,
        seconds: float,
        reason: str,
        *,
        run_id: str | None = None,
        detail: dict[str, object] | None = None,
        worker: str | None = None,
    ) -> float: ...
    def limits(self) -> list[KeyLimits]: ...
    def limit_pauses(self) -> dict[str, int]: ...

    # operations (metrics, status, health, restore): see browserworker.store.ops
    def runs_by_state(self) -> list[StateCount]: ...
    def queue_backlog(self, now: float) -> list[QueueBacklog]: ...
    def unknown_open(self, since: float) -> list[UnknownOpen]: ...
    def unknown_classified(self, since: float) -> list[StepUnknowns]: ...
    def duplicates_prevented(self) -> list[DuplicatePrevented]: ...
    def lease_expiries(self, since: float) -> tuple[int, int]: ...
    def reconciliations(self) -> list[Reconciliation]: ...
    def event_times(self, since: float) -> list[tuple[str, float]]: ...
    def queue_waits(self, kind: Literal["dispatch", "completion"], lo: float, hi: float) -> list[QueueWait]: ...
    def worker_loads(self, since: float, gone_since: float) -> list[WorkerLoad]: ...
    def live_workers(self, since: float) -> list[WorkerRecord]: ...
    def live_leases(self, now: float) -> list[LiveLease]: ...
    def fence_restored(self, *, stop_workers: bool = True) -> RestoreFence: ...
