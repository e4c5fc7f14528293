"""A real PostgreSQL for the tests: a fresh database per test, copied from a migrated template.

The server is ``$BROWSERWORKER_TEST_PG`` (a URL of any database on it, used to create and drop
the tests' own), else the local cluster at 127.0.0.1:5432 as user postgres. `.ci/run` starts
it when it is down; if it cannot be reached, every PostgreSQL test **fails** (it is part of
the contract suite, not an optional extra).

The template is created once per session (``bw_tpl_<pid>``: the store's schema migrated
into it); each test's database is ``CREATE DATABASE ... TEMPLATE`` of it (tens of ms) and is
dropped afterwards, so no test sees another's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

ENV_SERVER = "BROWSERWORKER_TEST_PG"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def server_url() -> str:
    return os.environ.get(ENV_SERVER) or DEFAULT_SERVER


def database_url(name: str) -> str:
    """The URL of database ``name`` on the tests' server."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(server_url())
    params["dbname"] = name
    host, port, user = params.get("host", "127.0.0.1"), params.get("port", "5432"), params.get("user", "postgres")
    if set(params) <= {"host", "port", "user", "dbname"}:
        return f"postgresql://{user}@{host}:{port}/{name}"
    return make_conninfo(**params)


class PgServer:
    """The tests' connection to the server, for creating and dropping databases."""

    def __init__(self) -> None:
        import psycopg

        try:
            self.admin = psycopg.connect(server_url(), autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            pytest.fail(
                f"PostgreSQL is not reachable at {server_url()} (${ENV_SERVER}): {exc}. Start it "
                "(pg_ctlcluster --skip-systemctl-redirect 15 main start) or point the variable at one.",
                pytrace=False,
            )
        self.template = f"bw_tpl_{os.getpid()}"
        self._created: list[str] = []

    def create(self, *, template: str | None = None, prefix: str = "bw_t") -> str:
        """A new database (a copy of ``template``, or empty); its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        source = f" TEMPLATE {template} STRATEGY FILE_COPY" if template else ""
        self.admin.execute(f"CREATE DATABASE {name}{source}")
        self._created.append(name)
        return name

    def drop(self, name: str) -> None:
        self.admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if name in self._created:
            self._created.remove(name)

    def close(self) -> None:
        for name in list(self._created):
            self.drop(name)
        self.admin.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The PostgreSQL server of the tests, with a migrated template database (fails if unreachable)."""
    from browserworker.store import open_store

    server = PgServer()
    server.admin.execute(f"DROP DATABASE IF EXISTS {server.template} WITH (FORCE)")
    server.admin.execute(f"CREATE DATABASE {server.template}")
    server._created.append(server.template)
    open_store(database_url(server.template)).close()  # the store's schema, migrated once
    yield server
    server.close()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """The URL of a fresh database of this test's own, its store's schema already migrated."""
    name = pg_server.create(template=pg_server.template)
    yield database_url(name)
    pg_server.drop(name)
