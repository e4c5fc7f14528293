"""The store contract suite's fixtures: every store implementation the tests run against.

A test that takes ``store`` (or ``store_target``) runs once per implementation in
:data:`IMPLEMENTATIONS`; adding a store is one line there. Tests of one dialect's own
mechanics (PRAGMAs, SQLite's locks, its query plans) live in ``test_store_sqlite.py``,
marked ``sqlite_dialect``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from browserworker.store import SQLStore, open_store

#: implementation -> where a fresh, empty store of it is, given a scratch directory (a path or a URL)
IMPLEMENTATIONS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: str(tmp / "bw.db"),
}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a fresh store of each implementation is: ``open_store(store_target)`` opens it."""
    return IMPLEMENTATIONS[request.param](tmp_path)


@pytest.fixture
def any_store(store_target: str) -> Iterator[SQLStore]:
    """A fresh, empty store of each implementation, closed afterwards."""
    store = open_store(store_target)
    assert isinstance(store, SQLStore)
    yield store
    store.close()
