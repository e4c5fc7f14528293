"""Fault points (browserworker/_faults.py, ``BROWSERWORKER_FAULTS``): what chaos and the crash
tests switch on to crash or fail a run on purpose; the rules parse and fire as written."""

from __future__ import annotations

import pytest

from browserworker import _faults as faults


def test_fault_specs_parse_and_fire_on_the_nth_hit() -> None:
    """`POINT[:STEP]=ACTION[@N]` rules fire only for their step and on the Nth hit; bad specs are refused."""
    faults.configure("after_response:submit=raise@2")
    try:
        faults.hit("after_response", "submit")
        faults.hit("after_response", "other")
        with pytest.raises(faults.InjectedFault):
            faults.hit("after_response", "submit")
        faults.hit("after_response", "submit")  # only the 2nd
    finally:
        faults.configure(None)
    for bad in ("nowhere=kill", "after_response=explode", "after_response=kill@0", "after_response"):
        with pytest.raises(ValueError):
            faults.parse(bad)
