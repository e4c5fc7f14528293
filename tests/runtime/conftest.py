"""The fixture of the step-loop tests (test_loop_*.py): ``loop``, the real executor, gate,
recovery and journal on fakes of Playwright's objects (tests/support/loop_fakes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.loop_fakes import Loop


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    """A :class:`Loop` over a fresh SQLite store in ``tmp_path``."""
    opened = Loop.open(tmp_path / "db")
    try:
        yield opened
    finally:
        opened.close()
