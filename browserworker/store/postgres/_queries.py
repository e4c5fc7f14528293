"""PostgreSQL's queries and the write side of its transactions.

The shared named queries with this dialect's fragments (row locks, the database's clock),
bound by name (``%(name)s``); :class:`Tx`, a transaction's named-query calls; and
:class:`Deferred`, the event rows a bare group writes in one round trip before its commit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from ..connector import SQL_PACKAGE, Row, compile_queries, load_queries, shared_queries

__all__ = [
    "BATCHES",
    "DB_NOW",
    "FRAGMENTS",
    "QUERIES",
    "Batch",
    "Deferred",
    "Tx",
    "batched_rows",
    "each",
    "flush_before",
    "to_pyformat",
]

#: the database's clock, in seconds since the epoch (``extract`` gives numeric: cast it)
DB_NOW = "CAST(extract(epoch FROM clock_timestamp()) AS double precision)"

FRAGMENTS = {
    "share_run": "FOR SHARE OF runs",
    "lock_row": "FOR UPDATE",
    "skip_locked": "FOR UPDATE SKIP LOCKED",
    "clock": DB_NOW,
}

_TOKEN = re.compile(r"'(?:[^']|'')*'|:(\w+)|%")


def to_pyformat(sql: str) -> str:
    """``sql`` with each ``:name`` as ``%(name)s`` (a literal ``%`` doubled, string literals left alone)."""

    def convert(match: re.Match[str]) -> str:
        name = match.group(1)
        if match.group(0) == "%":
            return "%%"
        if name is None:
            return match.group(0)
        return f"%({name})s"

    return _TOKEN.sub(convert, sql)


def _compile() -> dict[str, str]:
    raw = compile_queries(shared_queries(), load_queries(SQL_PACKAGE, "postgres.sql"), FRAGMENTS)
    return {name: to_pyformat(sql) for name, sql in raw.items()}


QUERIES = _compile()


class Batch(NamedTuple):
    """A shared query's one statement for a batch's calls (``postgres_batch.sql``)."""

    sql: str
    #: the single query's parameters it reads from each call (the columns of its
    #: ``json_to_recordset``), in order: the first is the key of a call's row
    params: list[str]
    returns: frozenset[str]  # what its RETURNING gives, e.g. ``runs.*`` or ``attempts.id``
    #: the column of a returned row that holds its call's key (the first parameter): ``id`` for
    #: an update (of the row of that id), the key's own column for an insert, and for a read
    #: ``batch_key``, which is not one of the read's columns (it is taken out of the row)
    key: str
    #: the single query's parameters that the batch form computes itself (``insert_attempt``:
    #: the attempt's number); a batch form that computes none stands in for its query anywhere
    computes: frozenset[str]
    #: the statement returning only its rows' keys, for a caller that counts them
    #: (``Tx.execute_each``: an update returning ``runs.*`` sends and builds 25 columns a row)
    keys_sql: str


_NAMES = re.compile(r"%\((\w+)\)s")
_CALLS = re.compile(r"json_to_recordset\(CAST\(%\(calls\)s AS json\)\)\s+AS t\(([^)]*)\)")


def _compile_batches() -> dict[str, Batch]:
    raw = compile_queries(load_queries(SQL_PACKAGE, "postgres_batch.sql"), {}, FRAGMENTS)
    unknown = set(raw) - set(QUERIES)
    if unknown:
        raise ValueError(f"batch forms of no shared query: {sorted(unknown)}")
    batches = {}
    for name, sql in raw.items():
        compiled = to_pyformat(sql)
        calls = _CALLS.search(compiled)
        if calls is None or set(_NAMES.findall(compiled)) != {"calls"}:
            raise ValueError(f"the batch form of {name} does not read its calls from :calls alone")
        params = [column.split()[0] for column in calls[1].split(",")]
        single = set(_NAMES.findall(QUERIES[name]))
        if not set(params) <= single:
            raise ValueError(f"the batch form of {name} takes parameters its query does not: {set(params) - single}")
        computes = frozenset(single - set(params))
        verb = compiled.split(None, 1)[0].upper()
        if verb == "SELECT":
            if f"t.{params[0]} AS batch_key" not in compiled:
                raise ValueError(f"the batch form of {name} does not read its calls' keys (AS batch_key)")
            batches[name] = Batch(compiled, params, frozenset(), "batch_key", computes, compiled)
            continue
        returning = re.search(r"RETURNING (.+)$", compiled, re.S)
        if returning is None:
            raise ValueError(f"the batch form of {name} returns nothing")
        returns = frozenset(column.strip() for column in returning[1].split(","))
        key = "id" if verb == "UPDATE" else params[0]
        if not any(column.endswith((f".{key}", ".*")) for column in returns):
            raise ValueError(f"the batch form of {name} does not return its rows' keys ({key})")
        table = re.match(r"(?:UPDATE|INSERT INTO) (\w+)", compiled)
        assert table is not None
        keys_sql = compiled[: returning.start()] + f"RETURNING {table[1]}.{key}"
        batches[name] = Batch(compiled, params, returns, key, computes, keys_sql)
    return batches


BATCHES = _compile_batches()


def _positional(sql: str) -> tuple[str, list[int]]:
    """A pyformat query as ``%s`` placeholders, and for each the index of its name in the
    order names first appear (a value given by position may be used twice)."""
    order: dict[str, int] = {}
    picks: list[int] = []

    def number(match: re.Match[str]) -> str:
        picks.append(order.setdefault(match.group(1), len(order)))
        return "%s"

    return re.sub(r"%\((\w+)\)s", number, sql), picks


_POSITIONAL: dict[str, tuple[str, list[int]]] = {}


class Deferred:
    """The event rows of a bare group, written in one round trip just before its commit.

    Nothing in a group reads an event row another call of it wrote, but a query that reads
    ``events`` flushes them first (:data:`_READS_EVENTS`); a group that fails is rolled back
    whole, its deferred rows with it. (A bare group is the common case of a worker's batch:
    this saves one round trip per event, several per run.)
    """

    __slots__ = ("_conn", "rows")

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.rows: list[list[Any]] = []

    def flush(self) -> None:
        if self.rows:
            rows, self.rows = self.rows, []
            with self._conn.cursor().copy(_copy_events()) as copy:
                for row in rows:
                    copy.write_row(row)


def _copy_events() -> str:
    """``insert_event``'s rows as a ``COPY`` (one statement for all, not one per row): its
    columns in the order its values are given in (:meth:`Tx.insert_values`)."""
    global _COPY_EVENTS
    if _COPY_EVENTS is None:
        match = re.match(r"INSERT INTO events \(([^)]*)\)", QUERIES["insert_event"])
        assert match is not None
        columns = ", ".join(column.strip() for column in match.group(1).split(","))
        _COPY_EVENTS = f"COPY events ({columns}) FROM STDIN"
    return _COPY_EVENTS


_COPY_EVENTS: str | None = None


#: the queries that read the events table (a group's deferred event rows are written first)
_READS_EVENTS = frozenset(
    name
    for name, sql in QUERIES.items()
    if re.search(r"\bevents\b", sql) and not sql.lstrip().upper().startswith("INSERT INTO EVENTS")
)


def flush_before(deferred: Deferred | None, query: str) -> None:
    if deferred is not None and deferred.rows and query in _READS_EVENTS:
        deferred.flush()


_READ_BY_ID = re.compile(r"SELECT (?P<columns>.+?) FROM (?P<table>\w+) WHERE id = %\(id\)s", re.S)
_UPDATE = re.compile(r"UPDATE (?P<table>\w+)\s")


def returning_clause(write: str, read: str) -> str:
    """``RETURNING <columns>`` that makes the ``UPDATE`` ``write`` return what the read by id
    ``read`` would read after it (:meth:`~browserworker.store.connector.Tx.changed_each`);
    ValueError for a pair that is not an update and a read of the same table by id."""
    table, columns = _read_by_id(read)
    updating = _UPDATE.match(_statement(write))
    if updating is None or updating["table"] != table:
        raise ValueError(f"not an update and a read by id of the same table: {write[:60]!r}, {read[:60]!r}")
    return f" RETURNING {', '.join(columns)}"


def _read_by_id(read: str) -> tuple[str, list[str]]:
    """The table and the columns of a read by id (``SELECT <columns> FROM <table> WHERE id = ...``)."""
    reading = _READ_BY_ID.fullmatch(_statement(read))
    if reading is None:
        raise ValueError(f"not a read by id: {read[:60]!r}")
    return reading["table"], [column.strip() for column in reading["columns"].split(",")]


class _Changed(NamedTuple):
    """How :meth:`Tx.changed_each` runs an update whose row a read by id reads back."""

    single: str  # the update with the read's columns as RETURNING
    batched: bool  # whether its batch form (BATCHES) returns those columns too


_CHANGED: dict[tuple[str, str], _Changed] = {}  # (update, read) -> its plan, made on first use


def _changed(query: str, read: str) -> _Changed:
    plan = _CHANGED.get((query, read))
    if plan is None:
        table, columns = _read_by_id(QUERIES[read])
        batch = BATCHES.get(query)
        returned = batch.returns if batch is not None else frozenset()
        batched = batch is not None and (f"{table}.*" in returned or {f"{table}.{c}" for c in columns} <= returned)
        single = QUERIES[query] + returning_clause(QUERIES[query], QUERIES[read])
        plan = _CHANGED[(query, read)] = _Changed(single, batched)
    return plan


def _statement(sql: str) -> str:
    """``sql`` without its comment lines."""
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).strip()


def _positional_query(query: str) -> tuple[str, list[int]]:
    compiled = _POSITIONAL.get(query)
    if compiled is None:
        compiled = _POSITIONAL[query] = _positional(QUERIES[query])
    return compiled


class Tx:
    """The write side of a transaction: named queries on one connection (in a bare group,
    event rows are deferred to its commit: :class:`Deferred`)."""

    __slots__ = ("_conn", "_deferred")

    def __init__(self, conn: Any, deferred: Deferred | None = None) -> None:
        self._conn = conn
        self._deferred = deferred

    def execute(self, query: str, params: Mapping[str, Any]) -> int:
        flush_before(self._deferred, query)
        return int(self._conn.execute(QUERIES[query], params).rowcount)

    def insert(self, query: str, params: Mapping[str, Any]) -> int | None:
        flush_before(self._deferred, query)
        row = self._conn.execute(QUERIES[query] + " RETURNING id", params).fetchone()
        return None if row is None else int(row["id"])

    def insert_values(self, query: str, values: Sequence[Any]) -> None:
        sql, picks = _positional_query(query)
        ordered = [values[i] for i in picks]
        if self._deferred is not None and query == "insert_event":
            self._deferred.rows.append(ordered)
        else:
            self._conn.execute(sql, ordered)

    def one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        flush_before(self._deferred, query)
        row: Row | None = self._conn.execute(QUERIES[query], params).fetchone()
        return row

    def rows(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        flush_before(self._deferred, query)
        return list(self._conn.execute(QUERIES[query], params).fetchall())

    # a batch's runs of one query: one pipeline, every result read back before returning

    def execute_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[int]:
        if len(params) == 1:
            return [self.execute(query, params[0])]
        flush_before(self._deferred, query)
        batched = batched_rows(self._conn, query, params, keys_only=True)
        if batched is not None:
            return [0 if row is None else 1 for row in batched]
        return [result.rowcount for result in each(self._conn, QUERIES[query] + " RETURNING 1", params, tuples=True)]

    def insert_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[int | None]:
        if len(params) == 1:
            return [self.insert(query, params[0])]
        flush_before(self._deferred, query)
        batched = batched_rows(self._conn, query, params)
        if batched is not None:
            return [None if row is None else int(row["id"]) for row in batched]
        ids = (result.fetchone() for result in each(self._conn, QUERIES[query] + " RETURNING id", params, tuples=True))
        return [None if row is None else int(row[0]) for row in ids]

    def insert_numbered_each(
        self, query: str, params: Sequence[Mapping[str, Any]], number: str, column: str
    ) -> list[tuple[int, Any] | None]:
        # the batch form reads the number in the insert itself: one statement, even for one call
        flush_before(self._deferred, query)
        batched = batched_rows(self._conn, query, params, computing=column)
        if batched is not None:
            return [None if row is None else (int(row["id"]), row[column]) for row in batched]
        out: list[tuple[int, Any] | None] = []
        for p in params:  # in order: a set's number counts the rows inserted before it
            n = self.one(number, p)["n"]  # type: ignore[index]
            new_id = self.insert(query, {**p, column: n})
            out.append(None if new_id is None else (new_id, n))
        return out

    def one_each(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        if len(params) == 1:
            return [self.one(query, params[0])]
        flush_before(self._deferred, query)
        batched = batched_rows(self._conn, query, params)
        if batched is not None:
            return batched
        return [result.fetchone() for result in each(self._conn, QUERIES[query], params)]

    def changed_each(
        self, query: str, params: Sequence[Mapping[str, Any]], read: str, *, key: str = "id"
    ) -> list[Row | None]:
        # the update returns the row: one statement each, not an update and a read
        flush_before(self._deferred, query)
        plan = _changed(query, read)
        if len(params) > 1 and plan.batched:
            batched = batched_rows(self._conn, query, params)
            if batched is not None:
                return batched
        if len(params) == 1:
            row: Row | None = self._conn.execute(plan.single, params[0]).fetchone()
            return [row]
        return [result.fetchone() for result in each(self._conn, plan.single, params)]


def batched_rows(
    conn: Any,
    query: str,
    params: Sequence[Mapping[str, Any]],
    *,
    computing: str | None = None,
    keys_only: bool = False,
) -> list[Row | None] | None:
    """``query`` for every parameter set in one statement (its form in ``postgres_batch.sql``):
    each set's row (the row it changed or inserted, or read), or None where it has none (a fence
    let nothing through); None if ``query`` has no such form, or its form computes a parameter
    other than ``computing`` (it does not stand in for the query then), or two sets name one row
    (one statement cannot change a row twice). ``keys_only``: rows of the key alone."""
    batch = BATCHES.get(query)
    if batch is None or batch.computes != (frozenset() if computing is None else {computing}):
        return None
    if not params:
        return []
    first = batch.params[0]
    keys = [p[first] for p in params]
    if len(set(keys)) != len(keys):
        return None
    if not set(batch.params) <= params[0].keys():
        raise KeyError(f"{query}: no parameters {sorted(set(batch.params) - params[0].keys())}")
    try:
        # the calls' parameters as one JSON text (encoded in C), not an array per parameter
        calls = json.dumps(params, allow_nan=False)
    except (TypeError, ValueError):  # a value JSON has no form for: the calls run one by one
        return None
    rows = conn.execute(batch.keys_sql if keys_only else batch.sql, {"calls": calls}).fetchall()
    column = batch.key
    if column == "batch_key":
        found = {row.pop(column): row for row in rows}
    else:
        found = {row[column]: row for row in rows}
    return [found.get(key) for key in keys]


def each(conn: Any, sql: str, params: Sequence[Mapping[str, Any]], *, tuples: bool = False) -> Iterator[Any]:
    """``sql`` run once per parameter set in one pipeline (one round trip, not one each): the
    cursor at each run's result in turn (its ``rowcount``, its rows), in order. psycopg has
    read every result, up to the pipeline's sync, before the first is given: no row count is
    taken from a result not yet received. ``tuples``: rows as tuples, not the connection's
    dicts (cheaper where only a count or an id is read)."""
    if not params:
        return
    if tuples:
        from psycopg.rows import tuple_row

        cursor = conn.cursor(row_factory=tuple_row)
    else:
        cursor = conn.cursor()
    cursor.executemany(sql, params, returning=True)
    while True:
        yield cursor
        if not cursor.nextset():
            return
