"""Leases (journal/_leases.py): telling whether a lease's owner is gone."""

from __future__ import annotations

import pytest


def test_owner_is_gone_knows_this_process_without_asking_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reclaimer's check of a lease held by this very process needs no syscall; the same
    pid with another start time is a reused pid, whose owner is gone; a pid of another pid
    space (another namespace or boot), or recorded without one, is never judged."""
    import os
    import socket
    from types import SimpleNamespace

    from browserworker.journal import _leases as leases

    me = leases.this_owner("w")
    held = SimpleNamespace(owner_pid=me.pid, owner_host=socket.gethostname(), owner_pid_start=me.pid_start)
    reused = SimpleNamespace(
        owner_pid=me.pid, owner_host=socket.gethostname(), owner_pid_start=f"1@{leases.pid_space()}"
    )
    elsewhere = SimpleNamespace(owner_pid=me.pid, owner_host=socket.gethostname(), owner_pid_start="1@0123456789ab")
    untold = SimpleNamespace(owner_pid=me.pid, owner_host=socket.gethostname(), owner_pid_start="1")

    def no_kill(pid: int, sig: int) -> None:
        raise AssertionError("asked the kernel about this process")

    monkeypatch.setattr(os, "kill", no_kill)
    assert me.pid_start is not None and not leases.owner_is_gone(held)  # type: ignore[arg-type]
    monkeypatch.undo()
    assert leases.owner_is_gone(reused)  # type: ignore[arg-type]
    assert not leases.owner_is_gone(elsewhere) and not leases.owner_is_gone(untold)  # type: ignore[arg-type]
