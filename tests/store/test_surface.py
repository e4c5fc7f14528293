"""The store's flat surface: the :class:`Store` protocol is its one list, and the store agrees.

Each flat member of the protocol (``@flat(Manager.method)``) names the manager method that
implements it; :class:`SQLStore` binds it on every instance. These tests hold the two together:
every protocol member is on every store with the protocol's signature, bound to the manager the
protocol names, and every store call of a manager that has flat members is in the protocol.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from browserworker.store import PostgresStore, SQLiteStore, SQLStore, Store
from browserworker.store.base import Flat, flat, flat_members
from browserworker.store.connector import Connector
from browserworker.store.journal import JournalManager
from browserworker.store.manager import Manager
from browserworker.store.shared import bind_flat

FLAT = flat_members(Store)


def _parameters(fn: Any) -> list[inspect.Parameter]:
    return list(inspect.signature(fn).parameters.values())


def _declared(member: Flat) -> list[inspect.Parameter]:
    """The parameters the protocol declares for ``member``: its method's, without ``self``."""
    return _parameters(member.method)[1:]


def _members() -> set[str]:
    """Every member the protocol declares: its methods, properties and attributes."""
    names = {n for n in vars(Store) if not n.startswith("_")}
    return names | set(Store.__annotations__)


def test_the_protocol_lists_the_flat_surface_once() -> None:
    """The flat members are the protocol's, each named like the method it takes; the ones the
    executor, the gate and the worker call are among them."""
    assert all(name == member.method.__name__ for name, member in FLAT.items())
    for name in ("begin_attempt", "mark_dispatched", "finish_attempt", "claim_next", "heartbeat", "now", "group"):
        assert name in FLAT
    assert _members() - set(FLAT) == {"location", "schema_version", "login_sessions", "approvals", "console_sessions"}


def test_every_member_is_on_every_store_with_the_protocol_signature(any_store: SQLStore) -> None:
    """On SQLite and PostgreSQL: each flat member is an instance attribute holding the bound
    method of the part the protocol names, with the protocol's parameters; the properties and
    the managers reached as attributes are there too."""
    assert isinstance(any_store, SQLiteStore | PostgresStore) and isinstance(any_store, Store)
    wrong = []
    for name, member in FLAT.items():
        bound = vars(any_store).get(name)
        if bound is None or not inspect.ismethod(bound):
            wrong.append(f"{name}: not bound on the instance")
            continue
        if not isinstance(bound.__self__, member.owner):
            wrong.append(f"{name}: bound to a {type(bound.__self__).__name__}, not a {member.owner.__name__}")
        if _parameters(bound) != _declared(member):
            wrong.append(f"{name}: {inspect.signature(bound)} is not {inspect.signature(member.method)}")
    assert not wrong, "\n".join(wrong)
    for prop in ("location", "schema_version"):
        assert isinstance(inspect.getattr_static(type(any_store), prop), property)
    for attribute, kind in Store.__annotations__.items():
        assert type(getattr(any_store, attribute)).__name__ == kind


def test_nothing_on_the_class_stands_before_a_bound_member() -> None:
    """A flat call is a bound method found in the instance's dict: no class attribute of the
    same name (a descriptor would cost every call a lookup more)."""
    for cls in (SQLStore, SQLiteStore, PostgresStore):
        in_the_way = [name for name in FLAT if any(name in vars(c) for c in cls.__mro__)]
        assert not in_the_way, f"{cls.__name__}: {in_the_way}"


def test_every_store_call_of_a_flat_manager_is_in_the_protocol() -> None:
    """A public method of a manager with flat members is a store call, so flat, unless it joins
    a caller's transaction (its first parameter is ``tx``: one manager helping another) or is
    the many form of a flat call (``@coalesced``: a batch of AsyncStore reaches it, not a caller)."""
    owners = {member.owner for member in FLAT.values()} - {Connector}
    assert all(issubclass(owner, Manager) for owner in owners)
    missing = []
    for owner in sorted(owners, key=lambda c: c.__name__):
        many = {fn.coalesce.many for fn in vars(owner).values() if hasattr(fn, "coalesce")}
        for name, fn in vars(owner).items():
            if name.startswith("_") or not inspect.isfunction(fn) or name in many:
                continue
            if [p.name for p in _parameters(fn)[1:2]] == ["tx"]:
                continue
            if name not in FLAT or FLAT[name].owner is not owner:
                missing.append(f"{owner.__name__}.{name}")
    assert not missing, f"public store calls missing from the Store protocol: {missing}"


def test_a_member_whose_owner_is_missing_or_twice_among_the_parts_is_refused(tmp_path: Any) -> None:
    """Binding needs exactly one part of each class the protocol names."""
    store = SQLiteStore(tmp_path / "bw.db")
    try:
        empty = object.__new__(SQLStore)
        with pytest.raises(TypeError, match="0 parts are a"):
            bind_flat(empty, [store.connector])
        parts: list[object] = [store.connector, *(p for p in vars(store).values() if isinstance(p, Manager))]
        with pytest.raises(TypeError, match="2 parts are a JournalManager"):
            bind_flat(empty, [*parts, JournalManager(store.connector)])
    finally:
        store.close()


def test_a_flat_line_names_its_method() -> None:
    """``@flat(M.name)`` over a stub of another name is refused where the protocol is written;
    a class that extends the protocol and binds nothing says so on first use."""
    with pytest.raises(TypeError, match="the names must be the same"):

        class Misnamed:
            @flat(JournalManager.begin_attempt)
            def begin(self) -> None:
                return None

    class Unbound(Store):
        pass

    with pytest.raises(AttributeError, match="not bound to JournalManager.begin_attempt"):
        Unbound().begin_attempt  # noqa: B018
    assert isinstance(Store.__dict__["begin_attempt"], Flat)
