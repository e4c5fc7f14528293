"""The one store object: the shared managers over a dialect's connector, composed.

A store method is written in two places: its query (``sql/queries.sql``) and its manager
(:mod:`.runs`, :mod:`.journal`, :mod:`.fleet`, ...). If callers reach it as ``store.name``
(the *flat* methods the executor, the gate and the worker call: ``begin_attempt``,
``mark_dispatched``, ``claim_next``…), one line of the :class:`~browserworker.store.base.Store`
protocol says so, ``@flat(JournalManager.begin_attempt)``: that line is the only list of the
flat surface. It types the member with the manager's own signature (mypy), and
:class:`SQLStore` binds every such member, when it is made, to the bound method of the one
manager (or the connector) that is an instance of the class the line names. Nothing is bound
by hand and nothing dispatches per call: a flat call is a call of an instance attribute
holding a bound method, as cheap as a method of one class. ``tests/store/test_surface.py``
checks that the protocol and the store agree.

mypy sees :class:`SQLStore` as a subclass of the protocol, so every flat member is typed on
it as exactly as on :class:`Store`; at run time it is not one: its class holds nothing by a
flat member's name, so an attribute lookup finds the instance's bound method at once (a
descriptor of the same name on the class makes every ``store.name`` about three times
slower: 12 ns, against 30-40).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .approvals import ApprovalManager
from .base import Store, flat_members
from .connector import Connector
from .console_sessions import ConsoleSessionManager
from .fleet import FleetManager
from .journal import JournalManager
from .limits import LimitManager
from .login_sessions import LoginSessionManager
from .manager import Manager
from .ops import OpsManager
from .review import ReviewManager
from .runs import RunManager

__all__ = ["SQLStore", "bind_flat"]

if TYPE_CHECKING:
    _Flat = Store  # the members mypy sees: the protocol's, each typed like its manager's method
else:
    _Flat = object  # at run time, only what bind_flat sets: no class attribute in the way of the instance's


class SQLStore(_Flat):
    """:class:`~browserworker.store.base.Store` over ``connector`` (see the module docstring)."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector
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
        bind_flat(self, [connector, *(part for part in vars(self).values() if isinstance(part, Manager))])

    @property
    def location(self) -> str:
        return self.connector.location

    @property
    def schema_version(self) -> int:
        return self.connector.schema_version


def bind_flat(store: Store, parts: list[object]) -> None:
    """Set each flat member of :class:`Store` on ``store`` to the bound method of the one object
    of ``parts`` that is an instance of the class the member names (:class:`TypeError` if none
    or several are). Which part binds which name is worked out once per kind of parts."""
    kinds = tuple(type(part) for part in parts)
    plan = _PLANS.get(kinds)
    if plan is None:
        plan = _PLANS[kinds] = _plan(type(store).__name__, parts)
    for name, at in plan:
        setattr(store, name, getattr(parts[at], name))


_PLANS: dict[tuple[type, ...], list[tuple[str, int]]] = {}


def _plan(store: str, parts: list[object]) -> list[tuple[str, int]]:
    """Each flat member's name and the index of its part in ``parts``."""
    plan = []
    for name, member in flat_members(Store).items():
        found = [at for at, part in enumerate(parts) if isinstance(part, member.owner)]
        if len(found) != 1:
            raise TypeError(f"{store}.{name}: {len(found)} parts are a {member.owner.__name__}, not one")
        plan.append((name, found[0]))
    return plan
