"""Canonical JSON and fingerprints, shared by the flow API and the store."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "fingerprint_of"]


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)

# JSONEncoder.encode builds a new C encoder on every call (a third of the time of encoding a
# small dict, and the store encodes several per run); this one is built once, with the same
# settings, so it writes the same bytes. Without circular-reference bookkeeping (a marker
# dict shared by calls would keep stale entries after a failed encode), so a value that
# contains itself raises RecursionError instead of ValueError.
_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # private to the json module
_C_ENCODE = (
    None
    if _MAKE_ENCODER is None
    else _MAKE_ENCODER(None, str, json.encoder.encode_basestring, None, ":", ",", True, False, True)
)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the input of every fingerprint."""
    if _C_ENCODE is None:  # pragma: no cover - a Python without the json accelerator
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


def fingerprint_of(value: Any) -> str:
    """sha256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
