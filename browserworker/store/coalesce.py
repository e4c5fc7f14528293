"""Calls of one store method that a batch runs together, as one call of its *many* form.

A worker's runs in flight make the same store calls at about the same time: 64 runs that each
journal an intent send 64 ``begin_attempt`` calls into one batch of
:class:`~browserworker.store.aio.AsyncStore`. Run one by one, each is a round trip or more to a
database server. A hot method is therefore written once, for many calls
(``JournalManager.begin_attempts``), runs each of its queries for all its calls in one go
(``Tx.execute_each``: on PostgreSQL one statement for the batch, ``sql/postgres_batch.sql``,
or one pipeline) and reads every result back before it returns; the method of one call is that
form with one item. Each call's fence is still decided by the database, and its outcome (the
row it changed, or none) read before anything is decided.

``@coalesced(Intent, "begin_attempts", key=...)`` on the method of one call says how: ``Intent``
is a ``NamedTuple`` whose fields are the method's parameters in order, with its defaults (so
``Intent(*args, **kwargs)`` reads a call; ``tests/store/test_coalesce.py`` checks each), the
name of the many form on the same manager, and the call's *key*: the run it acts on.

:func:`plan` orders a batch's calls into entries: one call alone, or several of one method. A
call joins the latest entry of its method only past calls that are coalesced and act on other
runs, and never beside a call of its own run: calls of one run keep the order they were made
in, and a call of any other method (a read, a call of no key) is never overtaken. The rest may
run in any order: they were all made before any of them returned, so no order among them was
observed.

The many form raises if any call of it fails (a fence let one through no write, a transition is
illegal): the batch is then run again with each call alone (see ``AsyncStore``), which gives each
caller its own answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Coalesce", "Entry", "coalesced", "plan"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Coalesce:
    """How the calls of one store method run together (see the module docstring)."""

    #: builds one call's item from its arguments: a NamedTuple of the method's parameters
    spec: Callable[..., Any]
    #: the name of the many form: a method of the same object taking a list of items
    many: str
    #: the run a call acts on (calls of one run are never reordered, nor run in one many call)
    key: Callable[[Any], Hashable]


def coalesced(spec: Callable[..., Any], many: str, *, key: Callable[[Any], Hashable]) -> Callable[[F], F]:
    """Mark a store method whose calls in one batch run as one call of ``many``."""

    def mark(method: F) -> F:
        method.coalesce = Coalesce(spec, many, key)  # type: ignore[attr-defined]
        return method

    return mark


@dataclass(slots=True)
class Entry:
    """Calls of a batch that run as one: one call (``many`` None), or several of one method."""

    #: indexes of the calls in the batch
    calls: list[int]
    #: the many form (a bound method) and each call's item, for an entry of a coalesced method
    many: Callable[[list[Any]], list[Any]] | None = None
    items: list[Any] | None = None
    #: the keys of its calls (None: a call that is not coalesced, which nothing overtakes)
    keys: set[Hashable] | None = None


def plan(calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]) -> list[Entry]:
    """The calls ``(function, args, kwargs)`` of a batch as the entries to run, in order.

    A call joins the latest entry of its method, at index ``at``, when every entry from ``at``
    on is coalesced and none holds a call of its run: kept as the index of the last entry that
    is not coalesced, and for each run the index of the last entry that holds a call of it."""
    entries: list[Entry] = []
    latest: dict[tuple[int, str], int] = {}  # (the manager's id, its many form) -> its latest entry
    barrier = -1  # the index of the last entry that is not coalesced (nothing passes it)
    last_of: dict[Hashable, int] = {}  # a run's key -> the index of the last entry holding a call of it
    for index, (fn, args, kwargs) in enumerate(calls):
        how: Coalesce | None = getattr(fn, "coalesce", None)
        owner = getattr(fn, "__self__", None)
        if how is None or owner is None:
            barrier = len(entries)
            entries.append(Entry([index]))
            continue
        try:
            item = how.spec(*args, **kwargs)
        except TypeError:  # not a call the method takes: it runs alone and raises there
            barrier = len(entries)
            entries.append(Entry([index]))
            continue
        key = how.key(item)
        slot = (id(owner), how.many)
        at = latest.get(slot)
        if at is not None and at > barrier and last_of.get(key, -1) < at:
            entry = entries[at]
            entry.calls.append(index)
            assert entry.items is not None and entry.keys is not None
            entry.items.append(item)
            entry.keys.add(key)
            last_of[key] = at
            continue
        latest[slot] = last_of[key] = len(entries)
        entries.append(Entry([index], getattr(owner, how.many), [item], {key}))
    return entries
