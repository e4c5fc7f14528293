"""The seam between the shared store and one database: the :class:`Connector` protocol.

A connector is everything about one dialect that the shared managers
(:mod:`~browserworker.store.runs`, :mod:`~browserworker.store.journal`,
:mod:`~browserworker.store.fleet`, :mod:`~browserworker.store.ops`) must not know:
connections, write transactions and their batching (group commit), parameter style, how an
insert reports its new id, the clock, migrations, backup and the integrity check. The
managers name queries (``sql/queries.sql``, with a dialect's overrides loaded over them) and
pass parameters as ``{name: value}``; the connector runs them.

Queries are loaded once per dialect by :func:`compile_queries`: the shared file, then the
dialect's override file (a query of the same name replaces the shared one), then each
``{fragment}`` in a query is replaced by the dialect's text for it. The fragments are the
per-dialect hooks of the fences (see :mod:`~browserworker.store.manager`):

``{share_run}``
    ends a sub-select of the ``runs`` row that a fenced write is conditioned on. A dialect
    whose writers are not serialised (PostgreSQL: ``FOR SHARE``) takes the row's lock there,
    so a claim that bumps the epoch waits for the fenced write's commit, or the write sees
    the new epoch; SQLite (every write transaction is ``BEGIN IMMEDIATE``): empty.
``{lock_row}``
    ends a read of a row that the same transaction then changes (PostgreSQL:
    ``FOR UPDATE``; SQLite: empty).
``{skip_locked}``
    ends the read of the next queued run of a claim (PostgreSQL: ``FOR UPDATE SKIP
    LOCKED``, so concurrent claimers take different runs; SQLite: empty).
``{clock}``
    the time a lease decision is judged at, in the ``WHERE`` of a fenced write (is the lease
    expired, does it have the margin left): PostgreSQL, the database's own clock at that
    moment (``clock_timestamp()``), so no host's clock and no pause between a call and its
    statement changes who owns what; SQLite (one host), the call's ``:now``. The values a
    write stores are always the call's ``:now``, so the records a call returns are the rows
    as stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from importlib import resources
from typing import Any, Protocol, runtime_checkable

from .wakeups import Wakeups

__all__ = [
    "FRAGMENTS",
    "Connector",
    "Row",
    "Tx",
    "compile_queries",
    "load_queries",
    "numbered_migrations",
    "shared_queries",
]

#: A row as the connector returns it: read by column name (``row["state"]``).
Row = Mapping[str, Any]

#: The fragments every dialect defines (see the module docstring).
FRAGMENTS = ("share_run", "lock_row", "skip_locked", "clock")


class Tx(Protocol):
    """One write transaction of a connector (a savepoint inside a group): named queries only."""

    def execute(self, query: str, params: Mapping[str, Any]) -> int:
        """Run a write; the number of rows it changed."""
        ...

    def insert(self, query: str, params: Mapping[str, Any]) -> int | None:
        """Run an ``INSERT`` of one row; its new id, or None if it inserted nothing (a fence
        let nothing through). A dialect that needs ``RETURNING id`` for this adds it itself."""
        ...

    def insert_values(self, query: str, values: Sequence[Any]) -> None:
        """Run an ``INSERT`` with its parameters given in the order they first appear in the
        query (for the hottest insert, the event row: binding by position is cheaper)."""
        ...

    def one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        """The first row of a read inside the transaction (sees its own writes)."""
        ...

    def rows(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        """Every row of a read inside the transaction."""
        ...

    # One named query run once per parameter set, for the calls of a batch that the store runs
    # together (:mod:`browserworker.store.coalesce`): each run's own result, in order, read back
    # before the method returns. A dialect whose statements are round trips sends them all at
    # once (PostgreSQL: a pipeline); one that runs in-process loops.

    def execute_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[int]:
        """:meth:`execute` once per parameter set: the rows each changed."""
        ...

    def insert_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[int | None]:
        """:meth:`insert` once per parameter set: each new id, or None."""
        ...

    def insert_numbered_each(
        self, query: str, params: Sequence[Mapping[str, Any]], number: str, column: str
    ) -> list[tuple[int, Any] | None]:
        """:meth:`insert` once per parameter set, its ``column`` parameter the ``n`` that the
        read ``number`` gives for the same parameters in this transaction just before (the next
        number of a sequence kept in the table it inserts into): each ``(new id, that number)``,
        or None where the insert's fence let nothing through. A dialect may read the number in
        the insert itself (one statement, not two) where no two parameter sets name one key
        (the statement does not read the rows it inserts)."""
        ...

    def one_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        """:meth:`one` once per parameter set: each first row, or None."""
        ...

    def changed_each(
        self, query: str, params: Sequence[Mapping[str, Any]], read: str, *, key: str = "id"
    ) -> list[Row | None]:
        """:meth:`execute` of the ``UPDATE`` ``query`` once per parameter set, each changing at
        most the one row whose id is its ``key`` parameter: that row as ``read`` (``SELECT
        <columns> FROM <the same table> WHERE id = :id``) reads it after the update, or None
        where the update changed nothing (a fence let nothing through). A dialect whose writes
        can return their row does it in the same statement."""
        ...


@runtime_checkable
class Connector(Protocol):
    """One database of one dialect, as the shared store uses it."""

    #: the dialect's name ("sqlite")
    dialect: str

    @property
    def location(self) -> str:
        """Where the database is, for messages (a path, or a URL without its password)."""
        ...

    def now(self) -> float:
        """The store's clock: seconds since the epoch. Every lease and fence compares against it."""
        ...

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Tx]:
        """One store call's writes, atomically: committed on exit, rolled back on an exception;
        inside :meth:`group`, a savepoint of the group's transaction. Failures of the database
        become :class:`~browserworker.errors.StoreError`."""
        ...

    def group(self, *, isolate: bool = True) -> AbstractContextManager[None]:
        """One transaction (one commit) around many store calls: group commit.

        With ``isolate`` (the default), each call's own transaction becomes a savepoint, so a
        call that fails rolls back only itself. Without it the calls share the transaction
        bare, and the first call whose transaction block fails spoils the group: later calls
        raise at once and the group rolls everything back and raises
        :class:`~browserworker.errors.GroupSpoiled` — the caller runs the batch again
        isolated. Nothing is durable, so nobody may act on a result, until the group commits:
        :class:`~browserworker.store.aio.AsyncStore` hands results out only then. If the
        database rolls the whole transaction back itself, the rest of the group's calls fail
        at once and the group raises :class:`~browserworker.errors.StoreError`.
        """
        ...

    def read(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        """The rows of a named read-only query, outside any write transaction."""
        ...

    def read_one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        """The first row of a named read-only query, or None."""
        ...

    def read_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        """:meth:`read_one` once per parameter set (see ``Tx.execute_each``)."""
        ...

    @property
    def schema_version(self) -> int:
        """The version of the schema the database is at (its migrations are applied on open)."""
        ...

    def integrity_check(self) -> str:
        """``"ok"``, or what the database's own check found wrong."""
        ...

    def backup(self, dest: str) -> None:
        """Write a consistent copy of the database, taken online while others write, to ``dest``."""
        ...

    def wakeups(self, queues: Sequence[str]) -> Wakeups:
        """Wake-ups when a run of ``queues`` becomes claimable (:class:`NoWakeups` if the
        dialect has none: its workers poll)."""
        ...


SQL_PACKAGE = "browserworker.store.sql"
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.M)
_FRAGMENT = re.compile(r"\{(\w+)\}")


def load_queries(package: str, filename: str) -> dict[str, str]:
    """Parse a ``.sql`` file of ``-- name: X`` sections into ``{name: sql}`` (comments dropped)."""
    text = resources.files(package).joinpath(filename).read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).strip()
    return queries


def numbered_migrations(folder: str) -> list[tuple[int, str]]:
    """``[(version, sql)]`` from a dialect's numbered ``NNNN_*.sql`` files under ``sql/<folder>/``, in order."""
    found = []
    for entry in resources.files(SQL_PACKAGE).joinpath(folder).iterdir():
        if entry.name.endswith(".sql") and entry.name[:4].isdigit():
            found.append((int(entry.name[:4]), entry.read_text()))
    return sorted(found)


def shared_queries() -> dict[str, str]:
    """The queries every dialect shares: ``sql/queries.sql`` and ``sql/testing.sql`` (the
    helpers of :mod:`browserworker.store.testing`)."""
    return {**load_queries(SQL_PACKAGE, "queries.sql"), **load_queries(SQL_PACKAGE, "testing.sql")}


def compile_queries(
    shared: Mapping[str, str], overrides: Mapping[str, str], fragments: Mapping[str, str]
) -> dict[str, str]:
    """The queries of one dialect: ``shared``, replaced by name by ``overrides``, with each
    ``{fragment}`` replaced by the dialect's text. Raises ValueError for an override of no
    shared query, or a fragment the dialect does not define."""
    unknown = set(overrides) - set(shared)
    if unknown:
        raise ValueError(f"overrides of no shared query: {sorted(unknown)}")
    missing = set(FRAGMENTS) - set(fragments)
    if missing:
        raise ValueError(f"the dialect does not define the fragments {sorted(missing)}")

    merged = {**shared, **overrides}
    # a section whose name starts with "_" is a piece of the others (`{_name}`), not a query
    pieces = {name: merged.pop(name) for name in [n for n in merged if n.startswith("_")]}

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        return _FRAGMENT.sub(fill, pieces[name]) if name in pieces else fragments[name]

    return {name: _FRAGMENT.sub(fill, sql) for name, sql in merged.items()}
