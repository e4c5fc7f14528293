"""The one store object: the shared managers over a dialect's connector, composed.

``SQLStore(connector)`` implements :class:`~browserworker.store.base.Store` with the flat
method names the executor, the gate and the worker call (``begin_attempt``,
``mark_dispatched``, ``claim_next``…): each is the bound method of the manager that owns
its concern, so a call costs no more than a method of one class would.
"""

from __future__ import annotations

from .approvals import ApprovalManager
from .connector import Connector
from .console_sessions import ConsoleSessionManager
from .fleet import FleetManager
from .journal import JournalManager
from .limits import LimitManager
from .login_sessions import LoginSessionManager
from .ops import OpsManager
from .review import ReviewManager
from .runs import RunManager

__all__ = ["SQLStore"]


class SQLStore:
    """:class:`~browserworker.store.base.Store` over ``connector`` (see the module docstring)."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self.now = connector.now
        self.group = connector.group
        self.integrity_check = connector.integrity_check
        self.wakeups = connector.wakeups
        self.runs = RunManager(connector)
        self.journal = JournalManager(connector)
        self.fleet = FleetManager(connector, self.runs)
        self.review = ReviewManager(connector, self.runs)
        self.ops = OpsManager(connector)
        #: saved login sessions (:mod:`browserworker.runtime._login_sessions` seals what they hold)
        self.login_sessions = LoginSessionManager(connector)
        self.limit_keys = LimitManager(connector)
        #: requests held for a person's decision (:mod:`browserworker.control._approvals`)
        self.approvals = ApprovalManager(connector, self.runs)
        #: who is signed in to the console (:mod:`browserworker.console.auth`)
        self.console_sessions = ConsoleSessionManager(connector)
        self._bind_runs(self.runs)
        self._bind_journal(self.journal)
        self._bind_fleet(self.fleet, self.review)
        self._bind_ops(self.ops)
        self._bind_limits(self.limit_keys)

    def _bind_runs(self, runs: RunManager) -> None:
        self.create_run = runs.create_run
        self.get_run = runs.get_run
        self.list_runs = runs.list_runs
        self.search_runs = runs.search_runs
        self.run_flows = runs.run_flows
        self.claim_run = runs.claim_run
        self.heartbeat = runs.heartbeat
        self.cancel_requested = runs.cancel_requested
        self.set_run_state = runs.set_run_state
        self.advance_run = runs.advance_run
        self.clear_reconcile = runs.clear_reconcile

    def _bind_journal(self, journal: JournalManager) -> None:
        self.begin_attempt = journal.begin_attempt
        self.mark_dispatched = journal.mark_dispatched
        self.record_response = journal.record_response
        self.record_final = journal.record_final
        self.record_request_failed = journal.record_request_failed
        self.finish_attempt = journal.finish_attempt
        self.get_attempt = journal.get_attempt
        self.attempts = journal.attempts
        self.latest_attempt = journal.latest_attempt
        self.outbox = journal.outbox
        self.events = journal.events
        self.restored_at = journal.restored_at
        self.history = journal.history
        self.effect_boundary = journal.effect_boundary
        self.record_event = journal.record_event

    def _bind_fleet(self, fleet: FleetManager, review: ReviewManager) -> None:
        self.enqueue = fleet.enqueue
        self.set_queue_limit = fleet.set_queue_limit
        self.queue_limits = fleet.queue_limits
        self.claim_next = fleet.claim_next
        self.reclaim_expired = fleet.reclaim_expired
        self.reclaim_dead_owners = fleet.reclaim_dead_owners
        self.next_expiry_in = fleet.next_expiry_in
        self.release_run = fleet.release_run
        self.register_worker = fleet.register_worker
        self.worker_heartbeat = fleet.worker_heartbeat
        self.mark_worker = fleet.mark_worker
        self.workers = fleet.workers
        self.cancel = review.cancel
        self.requeue = review.requeue
        self.resolve = review.resolve
        self.runs_needing_review = review.runs_needing_review

    def _bind_ops(self, ops: OpsManager) -> None:
        self.runs_by_state = ops.runs_by_state
        self.queue_backlog = ops.queue_backlog
        self.unknown_open = ops.unknown_open
        self.unknown_classified = ops.unknown_classified
        self.duplicates_prevented = ops.duplicates_prevented
        self.lease_expiries = ops.lease_expiries
        self.reconciliations = ops.reconciliations
        self.event_times = ops.event_times
        self.queue_waits = ops.queue_waits
        self.worker_loads = ops.worker_loads
        self.live_workers = ops.live_workers
        self.live_leases = ops.live_leases
        self.fence_restored = ops.fence_restored

    def _bind_limits(self, limits: LimitManager) -> None:
        self.set_limit = limits.set_limit
        self.clear_limit = limits.clear_limit
        self.pause_limit = limits.pause_limit
        self.limits = limits.limits
        self.limit_pauses = limits.limit_pauses

    @property
    def location(self) -> str:
        return self.connector.location

    @property
    def schema_version(self) -> int:
        return self.connector.schema_version

    def close(self) -> None:
        self.connector.close()
