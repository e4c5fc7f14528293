"""Canonical JSON and fingerprints, shared by the flow API and the store."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "fingerprint_of"]


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the input of every fingerprint."""
    return _ENCODER.encode(value)


def fingerprint_of(value: Any) -> str:
    """sha256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
