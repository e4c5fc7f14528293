"""Where things are, from the repository's root (not from a test's own file, which may move)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository: ``browserworker/``, ``docs/``, ``flows/``, ``tests/`` ..."""

FLOWS = ROOT / "flows"
"""The example flows (``flows/place_order.py`` ...)."""

TEST_FLOWS = ROOT / "tests" / "flows"
"""The flow files only the tests run (``tests/flows/short_order.py`` ...)."""

RECORDINGS = ROOT / "recordings"
"""The committed recordings of the example flows."""
