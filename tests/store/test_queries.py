"""The shared queries are portable: what a second dialect would reject stays out of them."""

from __future__ import annotations

import re

import pytest

from browserworker.store.connector import FRAGMENTS, compile_queries, load_queries, shared_queries
from browserworker.store.postgres._queries import FRAGMENTS as PG_FRAGMENTS
from browserworker.store.postgres._queries import QUERIES as PG_QUERIES
from browserworker.store.postgres._queries import to_pyformat
from browserworker.store.sqlite._store import FRAGMENTS as SQLITE_FRAGMENTS
from browserworker.store.sqlite._store import QUERIES, positional

SHARED = shared_queries()


@pytest.mark.parametrize("name", sorted(SHARED))
def test_a_shared_query_uses_no_sqlite_only_syntax(name: str) -> None:
    """No positional ``?``, two-argument MIN/MAX, ``IS NOT :param``, unary ``+column`` or
    ``INSERT OR …``: SQLite-only forms go to sql/sqlite.sql."""
    sql = re.sub(r"'(?:[^']|'')*'", "''", SHARED[name])  # string literals cannot offend
    assert "?" not in sql
    assert not re.search(r"\b(MIN|MAX)\s*\(([^()]|\([^()]*\))*,", sql, re.I), "two-argument MIN/MAX: use CASE"
    assert not re.search(r"\bIS\s+NOT\s+:", sql, re.I)
    assert not re.search(r"(AND|OR|WHERE)\s+\+\w", sql, re.I)
    assert not re.search(r"\bINSERT\s+OR\b", sql, re.I)


def test_sqlite_overrides_replace_shared_queries_and_fill_every_fragment() -> None:
    """SQLite's file only replaces queries that exist, and its fragments (no row locks: BEGIN
    IMMEDIATE serialises writers; leases judged by the call's ``:now``) leave no ``{fragment}`` behind."""
    assert set(load_queries("browserworker.store.sql", "sqlite.sql")) <= set(SHARED)
    assert set(SQLITE_FRAGMENTS) == set(FRAGMENTS)
    assert SQLITE_FRAGMENTS == {"share_run": "", "lock_row": "", "skip_locked": "", "clock": ":now"}
    assert not [name for name, sql in QUERIES.items() if re.search(r"\{\w+\}", sql)]
    with pytest.raises(ValueError, match="fragments"):
        compile_queries(SHARED, {}, {})
    with pytest.raises(ValueError, match="overrides of no shared query"):
        compile_queries(SHARED, {"nonesuch": "SELECT 1"}, SQLITE_FRAGMENTS)


def test_postgres_fills_every_fragment_and_binds_every_parameter_by_name() -> None:
    """PostgreSQL's queries: its overrides replace only shared queries, no ``{fragment}`` and no
    ``:name`` is left (each is a ``%(name)s``), a literal ``%`` is doubled, and every lease
    decision reads the database's clock."""
    assert set(load_queries("browserworker.store.sql", "postgres.sql")) <= set(SHARED)
    assert set(PG_FRAGMENTS) == set(FRAGMENTS)
    assert not [name for name, sql in PG_QUERIES.items() if re.search(r"\{\w+\}|(?<![:\w]):[a-z_]", sql)]
    assert (
        to_pyformat("SELECT :a, ':b', '%', x LIKE 'a%' OR y % 2 = :a")
        == "SELECT %(a)s, ':b', '%', x LIKE 'a%' OR y %% 2 = %(a)s"
    )
    assert "clock_timestamp()" in PG_QUERIES["heartbeat"] and "clock_timestamp()" in PG_QUERIES["mark_dispatched"]
    assert "FOR UPDATE SKIP LOCKED" in PG_QUERIES["next_queued_ids"]


def test_every_lease_decision_is_judged_by_the_dialects_clock() -> None:
    """The fenced writes that ask whether a lease expired or has the margin left ask it of
    ``{clock}`` (the database's clock on PostgreSQL), never of the caller's ``:now``."""

    def where(sql: str) -> str:  # the conditions of a statement (a SET's CASE only computes a value)
        return re.split(r"\bWHERE\b", sql, maxsplit=1)[-1]

    judged = [name for name, sql in SHARED.items() if re.search(r"lease_expires_at\s*[<>]=?\s*:now", where(sql))]
    # reads of candidates and of ops views: the writes they lead to re-check by {clock}
    assert judged == ["expired_leases", "ops_live_leases"]
    for name in ("claim_run", "heartbeat", "insert_attempt", "mark_dispatched", "requeue_expired"):
        assert "{clock}" in SHARED[name], name


def test_every_fenced_write_on_another_table_locks_the_run_it_reads() -> None:
    """A write of attempts conditioned on its run reads the run through ``{share_run}``, the
    hook a dialect without serialised writers fills with a row lock (store/manager.py)."""
    fenced = [
        name for name, sql in SHARED.items() if re.match(r"(INSERT INTO|UPDATE) attempts\b", sql) and "FROM runs" in sql
    ]
    assert sorted(fenced) == ["finish_attempt", "insert_attempt", "mark_dispatched", "resolve_attempt"]
    assert all("{share_run}" in SHARED[name] for name in fenced)


def test_positional_numbers_names_by_first_use_and_leaves_literals_alone() -> None:
    assert positional("SELECT :a, ':b', :c, :a") == "SELECT ?1, ':b', ?2, ?1"
