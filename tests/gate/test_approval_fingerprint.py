"""The fingerprint of a request held for approval (gate/_approval.py): the same request rebuilt
has the same fingerprint, a changed one another."""

from __future__ import annotations

from browserworker.gate._approval import request_fingerprint


def test_fingerprint_ignores_anti_forgery_tokens_and_field_order() -> None:
    """The same form rebuilt after a restart (a new CSRF token, fields in another order) has the
    same fingerprint; another value or URL does not."""
    form = "application/x-www-form-urlencoded"
    a = request_fingerprint("POST", "https://s/orders", "csrf_token=1&item=tea&q=1", form)
    assert a == request_fingerprint("POST", "https://s/orders", "q=1&item=tea&csrf_token=2", form)
    assert a != request_fingerprint("POST", "https://s/orders", "q=2&item=tea&csrf_token=1", form)
    assert a != request_fingerprint("POST", "https://s/other", "csrf_token=1&item=tea&q=1", form)
