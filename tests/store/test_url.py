"""open_store: one place that turns a path or a URL into a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from browserworker.errors import StoreError, UsageError
from browserworker.store import ENV_DB, PostgresStore, SQLiteStore, open_store
from browserworker.store.postgres import SCHEMA_VERSION
from browserworker.store.url import sqlite_path


def test_a_path_or_a_sqlite_url_names_a_file(tmp_path: Path) -> None:
    """A plain path, ``sqlite:///relative`` and ``sqlite:////absolute`` (as SQLAlchemy writes
    them) and ``file:///absolute`` all name the same kind of SQLite file."""
    assert sqlite_path("bw.db") == Path("bw.db")
    assert sqlite_path("sqlite:///data/bw.db") == Path("data/bw.db")
    assert sqlite_path(f"sqlite:///{tmp_path}/bw.db") == tmp_path / "bw.db"
    assert sqlite_path("file:///var/lib/bw.db") == Path("/var/lib/bw.db")
    store = open_store(f"sqlite:///{tmp_path / 'bw.db'}")
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "bw.db"
    store.close()


def test_the_environment_names_the_default_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_DB, str(tmp_path / "env.db"))
    store = open_store()
    assert store.location == str(tmp_path / "env.db")
    store.close()
    with pytest.raises(StoreError, match="no database"):
        open_store(tmp_path / "missing.db", create=False)


@pytest.mark.parametrize(
    "url, message",
    [
        ("mysql://bw@db/bw", "no store for mysql:// URLs"),
        ("sqlite://bw.db", "three slashes"),
        ("sqlite:///", "names no file"),
    ],
)
def test_a_url_this_version_does_not_serve_is_a_usage_error(url: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        open_store(url)


def test_a_postgresql_url_opens_the_postgresql_store_and_says_why_it_cannot(pg_url: str) -> None:
    """``postgresql://`` and ``postgres://`` URLs name the PostgreSQL store: it opens in the
    schema given (or ``browserworker``); a server that refuses is a StoreError naming the URL
    without its password; a schema name that is not a plain identifier is a usage error."""
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore) and store.location.endswith("(schema browserworker)")
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    other = open_store(pg_url.replace("postgresql://", "postgres://", 1), schema="elsewhere")
    assert isinstance(other, PostgresStore) and other.location.endswith("(schema elsewhere)")
    assert other.schema_version == SCHEMA_VERSION  # a new schema, migrated on open
    other.close()
    with pytest.raises(StoreError, match=r"cannot connect to postgresql://bw:\*\*\*@127\.0\.0\.1:1/bw"):
        open_store("postgresql://bw:hunter2@127.0.0.1:1/bw")
    with pytest.raises(UsageError, match="schema name"):
        open_store(pg_url, schema="Robert'); DROP TABLE runs;--")
    with pytest.raises(StoreError, match="no browserworker store"):
        open_store(pg_url, schema="never_made", create=False)
