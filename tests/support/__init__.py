"""What the tests share and are not tests: helpers, harnesses and fixtures.

The fixtures of these modules reach the tests through ``pytest_plugins`` in ``tests/conftest.py``
(never by importing them into a test module); a test imports from here only plain helpers and
types, e.g. ``from tests.support.bw import BW``.
"""
