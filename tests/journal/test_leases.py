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


def test_heartbeats_fall_on_shared_ticks_three_quarters_to_one_interval_apart() -> None:
    """A lease's next beat is a quarter-interval tick of the process's clock, between 3/4 of an
    interval and one interval after its last renewal (never later); leases renewed within the
    same quarter beat on the same tick, so a worker's heartbeats go to its store together."""
    import random

    from browserworker.journal._leases import next_beat

    every = 10.0
    rng = random.Random(7)
    for _ in range(1000):
        last = rng.uniform(0, 10_000)
        at = next_beat(last, every)
        assert last + 0.75 * every - 1e-9 <= at <= last + every + 1e-9
        assert abs(at / 2.5 - round(at / 2.5)) < 1e-9
    # twenty leases taken in the same quarter (a worker filling its slots) beat together
    base = 1_000.1
    assert len({next_beat(base + i * 0.1, every) for i in range(20)}) == 1
    # and they stay together: each renewal's next beat is on the same tick again
    first = next_beat(base, every)
    assert len({next_beat(first + rng.uniform(0.001, 0.2), every) for _ in range(20)}) == 1


def test_stopping_a_lease_as_its_heartbeat_is_answered_ends_its_heartbeats() -> None:
    """A lease stopped in the very turn of the loop its heartbeat is answered in (a run ending
    as its lease beats: at a fleet's scale, a few runs in every thousand) stops beating, and
    ``stop`` returns. Python 3.11's ``asyncio.wait_for`` swallowed that cancel: the heartbeat
    task went on beating the ended run's lease and ``stop`` waited for it forever."""
    import asyncio
    from types import SimpleNamespace
    from typing import Any

    from browserworker.journal import Lease, LeaseSettings

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future[None]] = []
        asked = asyncio.Event()

        class Store:
            store = SimpleNamespace(heartbeat=lambda *a: None)

            def call(self, fn: Any, *args: Any) -> asyncio.Future[None]:
                answers.append(loop.create_future())
                asked.set()
                return answers[-1]

        lease = Lease(Store(), "r1", 1, LeaseSettings(ttl=0.3, skew=0.0))  # type: ignore[arg-type]
        lease.start()
        await asyncio.wait_for(asked.wait(), 5)
        answers[-1].set_result(None)  # the heartbeat answered, and in the same turn:
        await asyncio.wait_for(lease.stop(), 2)
        asked.clear()
        with pytest.raises(TimeoutError):  # no beat comes past the next one it would have made
            await asyncio.wait_for(asked.wait(), 0.3)
        return len(answers)

    assert asyncio.run(scenario()) == 1
