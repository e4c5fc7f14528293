"""The store contract suite's fixtures: every store implementation the tests run against.

A test that takes ``any_store`` (or ``store_target``) runs once per implementation in
:data:`IMPLEMENTATIONS`; adding a store is one entry there. The fixtures reach the tests through
``pytest_plugins`` in tests/conftest.py. Tests of one dialect's own mechanics live in
``tests/store/test_sqlite.py`` (marked ``sqlite_dialect``) and ``tests/store/test_postgres.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from browserworker.store import SQLStore, open_store

#: implementation -> where a fresh, empty store of it is (a path or a URL), given the test's request
IMPLEMENTATIONS: dict[str, Callable[[pytest.FixtureRequest], str]] = {
    "sqlite": lambda request: str(request.getfixturevalue("tmp_path") / "bw.db"),
    "postgresql": lambda request: str(request.getfixturevalue("pg_url")),
}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def store_target(request: pytest.FixtureRequest) -> str:
    """Where a fresh store of each implementation is: ``open_store(store_target)`` opens it."""
    return IMPLEMENTATIONS[request.param](request)


@pytest.fixture
def any_store(store_target: str) -> Iterator[SQLStore]:
    """A fresh, empty store of each implementation, closed afterwards."""
    store = open_store(store_target)
    assert isinstance(store, SQLStore)
    yield store
    store.close()
