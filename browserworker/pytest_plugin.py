"""pytest plugin (entry point ``pytest11``): fixtures for testing flows against the sandbox.

Fixtures: ``bw_store`` (a fresh SQLite store per test) and ``sandbox`` (the sandbox shop
on a free loopback port, one per session, in its own process).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .store.sqlite import SQLiteStore


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("browserworker", "browserworker")
    group.addoption("--bw-sandbox-dedupe", action="store_true", default=False,
                    help="Start the session sandbox with dedupe-on-reference switched on.")


@pytest.fixture
def bw_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A fresh journal database for one test."""
    store = SQLiteStore(tmp_path / "browserworker.db")
    yield store
    store.close()


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The sandbox shop on a free loopback port, in its own process, for the whole session."""
    from .sandbox.testing import start_sandbox

    proc = start_sandbox(tmp_path_factory.mktemp("sandbox") / "sandbox.db",
                         dedupe=request.config.getoption("--bw-sandbox-dedupe"))
    yield proc
    proc.stop()
