"""The durable control plane: the :class:`Store` protocol.

The executor, the gate, the worker and the CLI only ever talk to a :class:`Store`.
:class:`~browserworker.store.shared.SQLStore` implements it once, over a dialect's
:class:`~browserworker.store.connector.Connector` (SQLite or PostgreSQL);
:func:`~browserworker.store.url.open_store` opens one from a path or a URL.

The protocol is the one list of the store's *flat* methods, the names callers use
(``store.begin_attempt(...)``): each is a line ``@flat(Manager.method)`` naming the method of
the manager (or the connector) that implements it, whose signature and docstring it takes.
The store binds each to that manager's bound method (:mod:`~browserworker.store.shared`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar, cast, runtime_checkable

from .connector import Connector
from .fleet import FleetManager
from .journal import JournalManager
from .limits import LimitManager
from .ops import OpsManager
from .review import ReviewManager
from .runs import RunManager

if TYPE_CHECKING:
    from .approvals import ApprovalManager
    from .console_sessions import ConsoleSessionManager
    from .login_sessions import LoginSessionManager

__all__ = ["Flat", "Store", "flat", "flat_members"]

P = ParamSpec("P")
R = TypeVar("R")


class Flat:
    """A flat member of :class:`Store` as it is at run time: the method that implements it.

    An implementation binds the name on each instance (an instance attribute, found before
    this non-data descriptor), so a call costs what a bound method's call costs; reaching
    this descriptor on an instance means the implementation did not bind it.
    """

    __slots__ = ("method", "name", "owner")

    def __init__(self, method: Callable[..., Any]) -> None:
        self.method = method
        self.name: str = method.__name__
        #: the class that defines the method (a manager, or :class:`Connector`)
        self.owner: type = getattr(sys.modules[method.__module__], method.__qualname__.rpartition(".")[0])

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        raise AttributeError(f"{type(obj).__name__}.{self.name} is not bound to {self.method.__qualname__}")


def flat(method: Callable[Concatenate[Any, P], R]) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, P], R]]:
    """Declare a flat member of :class:`Store`: ``@flat(JournalManager.begin_attempt)`` over a
    stub of the same name (``def begin_attempt(self) -> None: return None``). The member's type
    is the method's, without its ``self``; the stub only names it (and, returning, is not an
    abstract method that every subclass would have to define)."""

    def member(stub: Callable[..., None]) -> Callable[Concatenate[Any, P], R]:
        if stub.__name__ != method.__name__:
            raise TypeError(f"@flat({method.__qualname__}) over {stub.__name__!r}: the names must be the same")
        return cast(Callable[Concatenate[Any, P], R], Flat(method))

    return member


def flat_members(protocol: type) -> dict[str, Flat]:
    """The flat members of ``protocol`` (and of the protocols it extends), by name."""
    members: dict[str, Flat] = {}
    for cls in reversed(protocol.__mro__):
        members.update((k, v) for k, v in vars(cls).items() if isinstance(v, Flat))
    return members


@runtime_checkable
class Store(Protocol):
    """What the executor and the CLI need from a durable store.

    Every write that changes a run or its journal is *fenced*: it names the lease epoch
    the caller holds and raises :class:`LeaseLost` when that epoch is no longer current
    (or, with ``margin``, when the lease has less than ``margin`` seconds left).

    A method is added in two places, its query and its manager, plus one ``@flat`` line here
    if callers reach it as ``store.name`` (see the module docstring); the managers without
    flat methods are attributes (``store.approvals.decide(...)``).
    """

    #: saved login sessions (:mod:`browserworker.store.login_sessions`)
    login_sessions: LoginSessionManager
    #: requests held for a person's decision (:mod:`browserworker.store.approvals`)
    approvals: ApprovalManager
    #: who is signed in to the console (:mod:`browserworker.store.console_sessions`)
    console_sessions: ConsoleSessionManager

    @property
    def location(self) -> str:
        """Where the database is, for messages (a path, or a URL without its password)."""
        ...

    @property
    def schema_version(self) -> int:
        """The version of the schema the database is at."""
        ...

    # the connector's
    @flat(Connector.now)
    def now(self) -> None:
        return None

    @flat(Connector.close)
    def close(self) -> None:
        return None

    @flat(Connector.group)
    def group(self) -> None:
        return None

    @flat(Connector.integrity_check)
    def integrity_check(self) -> None:
        return None

    @flat(Connector.wakeups)
    def wakeups(self) -> None:
        return None

    # runs
    @flat(RunManager.create_run)
    def create_run(self) -> None:
        return None

    @flat(RunManager.get_run)
    def get_run(self) -> None:
        return None

    @flat(RunManager.list_runs)
    def list_runs(self) -> None:
        return None

    @flat(RunManager.search_runs)
    def search_runs(self) -> None:
        return None

    @flat(RunManager.run_flows)
    def run_flows(self) -> None:
        return None

    @flat(RunManager.claim_run)
    def claim_run(self) -> None:
        return None

    @flat(RunManager.heartbeat)
    def heartbeat(self) -> None:
        return None

    @flat(RunManager.cancel_requested)
    def cancel_requested(self) -> None:
        return None

    @flat(RunManager.set_run_state)
    def set_run_state(self) -> None:
        return None

    @flat(RunManager.advance_run)
    def advance_run(self) -> None:
        return None

    @flat(RunManager.clear_reconcile)
    def clear_reconcile(self) -> None:
        return None

    # the journal
    @flat(JournalManager.begin_attempt)
    def begin_attempt(self) -> None:
        return None

    @flat(JournalManager.mark_dispatched)
    def mark_dispatched(self) -> None:
        return None

    @flat(JournalManager.record_response)
    def record_response(self) -> None:
        return None

    @flat(JournalManager.record_final)
    def record_final(self) -> None:
        return None

    @flat(JournalManager.record_request_failed)
    def record_request_failed(self) -> None:
        return None

    @flat(JournalManager.finish_attempt)
    def finish_attempt(self) -> None:
        return None

    @flat(JournalManager.get_attempt)
    def get_attempt(self) -> None:
        return None

    @flat(JournalManager.attempts)
    def attempts(self) -> None:
        return None

    @flat(JournalManager.latest_attempt)
    def latest_attempt(self) -> None:
        return None

    @flat(JournalManager.outbox)
    def outbox(self) -> None:
        return None

    @flat(JournalManager.events)
    def events(self) -> None:
        return None

    @flat(JournalManager.restored_at)
    def restored_at(self) -> None:
        return None

    @flat(JournalManager.history)
    def history(self) -> None:
        return None

    @flat(JournalManager.effect_boundary)
    def effect_boundary(self) -> None:
        return None

    @flat(JournalManager.record_event)
    def record_event(self) -> None:
        return None

    # the fleet: queues, claims, workers
    @flat(FleetManager.enqueue)
    def enqueue(self) -> None:
        return None

    @flat(FleetManager.set_queue_limit)
    def set_queue_limit(self) -> None:
        return None

    @flat(FleetManager.queue_limits)
    def queue_limits(self) -> None:
        return None

    @flat(FleetManager.claim_next)
    def claim_next(self) -> None:
        return None

    @flat(FleetManager.reclaim_expired)
    def reclaim_expired(self) -> None:
        return None

    @flat(FleetManager.reclaim_dead_owners)
    def reclaim_dead_owners(self) -> None:
        return None

    @flat(FleetManager.next_expiry_in)
    def next_expiry_in(self) -> None:
        return None

    @flat(FleetManager.release_run)
    def release_run(self) -> None:
        return None

    @flat(FleetManager.register_worker)
    def register_worker(self) -> None:
        return None

    @flat(FleetManager.worker_heartbeat)
    def worker_heartbeat(self) -> None:
        return None

    @flat(FleetManager.mark_worker)
    def mark_worker(self) -> None:
        return None

    @flat(FleetManager.workers)
    def workers(self) -> None:
        return None

    # a person's decisions
    @flat(ReviewManager.cancel)
    def cancel(self) -> None:
        return None

    @flat(ReviewManager.requeue)
    def requeue(self) -> None:
        return None

    @flat(ReviewManager.resolve)
    def resolve(self) -> None:
        return None

    @flat(ReviewManager.runs_needing_review)
    def runs_needing_review(self) -> None:
        return None

    # budgets of limit keys: see browserworker.store.limit_rules
    @flat(LimitManager.set_limit)
    def set_limit(self) -> None:
        return None

    @flat(LimitManager.clear_limit)
    def clear_limit(self) -> None:
        return None

    @flat(LimitManager.pause_limit)
    def pause_limit(self) -> None:
        return None

    @flat(LimitManager.limits)
    def limits(self) -> None:
        return None

    @flat(LimitManager.limit_pauses)
    def limit_pauses(self) -> None:
        return None

    # operations (metrics, status, health, restore)
    @flat(OpsManager.runs_by_state)
    def runs_by_state(self) -> None:
        return None

    @flat(OpsManager.queue_backlog)
    def queue_backlog(self) -> None:
        return None

    @flat(OpsManager.unknown_open)
    def unknown_open(self) -> None:
        return None

    @flat(OpsManager.unknown_classified)
    def unknown_classified(self) -> None:
        return None

    @flat(OpsManager.duplicates_prevented)
    def duplicates_prevented(self) -> None:
        return None

    @flat(OpsManager.lease_expiries)
    def lease_expiries(self) -> None:
        return None

    @flat(OpsManager.reconciliations)
    def reconciliations(self) -> None:
        return None

    @flat(OpsManager.event_times)
    def event_times(self) -> None:
        return None

    @flat(OpsManager.queue_waits)
    def queue_waits(self) -> None:
        return None

    @flat(OpsManager.worker_loads)
    def worker_loads(self) -> None:
        return None

    @flat(OpsManager.live_workers)
    def live_workers(self) -> None:
        return None

    @flat(OpsManager.live_leases)
    def live_leases(self) -> None:
        return None

    @flat(OpsManager.fence_restored)
    def fence_restored(self) -> None:
        return None
