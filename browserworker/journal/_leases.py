"""Leases: who owns a run (owner id, host, pid), heartbeats, and proving an owner is gone."""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import socket
import time
import uuid
from pathlib import Path

from ..errors import LeaseLost, StoreError
from ..flow import Extensions
from ..logs import get_logger
from ..store.aio import AsyncStore
from ..store.records import Owner, RunRecord

__all__ = [
    "Lease",
    "LeaseSettings",
    "gone_here",
    "next_beat",
    "own_start_time",
    "owner_is_gone",
    "parent_pid",
    "pid_space",
    "pid_start_time",
    "process_is_gone",
    "process_token",
    "this_owner",
]

log = get_logger("browserworker.leases")


class LeaseSettings:
    """Lease timing: TTL, dispatch margin (no intent or dispatch with less left), clock skew."""

    def __init__(self, ttl: float = 30.0, margin: float | None = None, skew: float = 0.5) -> None:
        if ttl <= 0:
            raise ValueError("lease TTL must be positive")
        self.ttl = ttl
        self.margin = ttl / 6 if margin is None else margin
        if not 0 <= self.margin < ttl * 2 / 3:
            raise ValueError("dispatch margin must be >= 0 and leave room for heartbeats (< 2/3 of the TTL)")
        self.skew = skew

    @property
    def heartbeat_every(self) -> float:
        return self.ttl / 3


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (Linux), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may contain spaces; fields after the closing paren are fixed
    return stat.rpartition(")")[2].split()


def pid_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux ``/proc``), to tell a reused pid apart."""
    fields = _stat(pid)
    return None if fields is None else fields[19]


#: heartbeats fall on ticks this fraction of their interval apart (see ``Lease._beat``)
_TICK = 0.25

_OWN_START: dict[int, str | None] = {}  # this process's start time, by pid (a fork has its own)


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (Linux ``/proc``), or None if it is gone or cannot be told."""
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def own_start_time() -> str | None:
    """:func:`pid_start_time` of this process, read once."""
    pid = os.getpid()
    if pid not in _OWN_START:
        _OWN_START[pid] = pid_start_time(pid)
    return _OWN_START[pid]


_PID_SPACE: list[str] = []


def pid_space() -> str:
    """Where this process's pids mean something: this boot of this kernel and this pid
    namespace (a container, or ``unshare --pid``, has its own). Two processes of one host name
    but another pid space (another machine that took the name, a container) never judge each
    other's pids."""
    if not _PID_SPACE:
        try:
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            boot = ""
        try:
            namespace = str(os.stat("/proc/self/ns/pid").st_ino)
        except OSError:
            namespace = ""
        _PID_SPACE.append(hashlib.sha256(f"{boot}/{namespace}".encode()).hexdigest()[:12])
    return _PID_SPACE[0]


def process_token() -> str | None:
    """This process's identity beside its pid: ``<kernel start time>@<pid space>`` (what
    :func:`gone_here` needs to prove it gone), None where there is no ``/proc``."""
    start = own_start_time()
    return None if start is None else f"{start}@{pid_space()}"


def this_owner(label: str = "run") -> Owner:
    """An owner identity for this process."""
    pid = os.getpid()
    host = socket.gethostname()
    return Owner(worker=f"{label}-{host}-{pid}-{uuid.uuid4().hex[:6]}", host=host, pid=pid, pid_start=process_token())


def gone_here(host: str | None, pid: int | None, token: str | None) -> bool:
    """True only when process ``pid`` ran here and provably stopped: the same host name, the
    same pid space (``token`` is its :func:`process_token`), and no such process now (or the
    pid reused by another). A process of another host, container or pid namespace, or one
    recorded without a token, is never judged by its pid: its lease expires instead."""
    if pid is None or host != socket.gethostname():
        return False
    start, _, space = (token or "").partition("@")
    if not space or space != pid_space():
        return False
    return process_is_gone(pid, start or None)


def process_is_gone(pid: int, start: str | None = None) -> bool:
    """True only when process ``pid`` of this host provably stopped: no such process, the pid
    reused by another (its start time is not ``start``, if known), or a zombie (killed, not
    yet reaped by its parent). False for one that cannot be checked (no permission)."""
    if pid == os.getpid() and start in (None, own_start_time()):
        return False  # this very process: alive, no need to ask the kernel
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    fields = _stat(pid)  # one read: start time and state
    if fields is None:  # it existed a moment ago: gone since, if there is a /proc to tell
        return Path("/proc/self/stat").exists()
    if start and fields[19] != start:
        return True  # the pid was reused by another process
    return fields[0] in ("Z", "X")


def owner_is_gone(run: RunRecord, host: str | None = None) -> bool:
    """True only when the run's owner provably stopped (:func:`gone_here`); with ``host``,
    only an owner of that host."""
    if host is not None and run.owner_host != host:
        return False
    return gone_here(run.owner_host, run.owner_pid, run.owner_pid_start)


def next_beat(last: float, every: float) -> float:
    """When a lease last renewed at ``last`` (this process's monotonic clock) beats next: on the
    first tick (a quarter of ``every`` apart, the same ticks for every lease of the process) at
    least 3/4 of ``every`` after ``last``, so never more than ``every`` after it. The leases of
    a worker thus beat on a few shared ticks and their heartbeats reach the store together
    (one batch: one round trip)."""
    tick = every * _TICK
    return math.ceil((last + every * (1 - _TICK)) / tick) * tick


class Lease:
    """A held lease on one run; a background task heartbeats it every TTL/3 (on the process's
    shared ticks: 3/4 to 1 interval apart).

    The task does not depend on the page. When a heartbeat is refused (the epoch moved on),
    or none got through before the lease ran out by the local clock (the database unreachable,
    a call hanging on a partition, this process paused), the lease is marked lost and the
    extensions hear ``lease_lost`` (the executor shuts and closes the run's context).
    """

    def __init__(
        self, store: AsyncStore, run_id: str, epoch: int, settings: LeaseSettings, extensions: Extensions | None = None
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.epoch = epoch
        self.settings = settings
        self.extensions = extensions
        self.lost: BaseException | None = None
        self.ending = False
        """Set as the run's end (or hand-back) is being committed: a heartbeat refused from then
        on says the run has ended, not that the lease was lost."""
        self._task: asyncio.Task[None] | None = None
        # a local, conservative view of the expiry on this process's monotonic clock: the
        # lease was valid for ``ttl`` from the moment the last successful claim/heartbeat began
        # (a SIGSTOPped process sees this clock jump when it wakes up)
        self.valid_until = time.monotonic() + settings.ttl - settings.skew

    def holds(self, margin: float) -> bool:
        """Not known lost, and (by the local clock) at least ``margin`` seconds left."""
        return self.lost is None and time.monotonic() + margin <= self.valid_until

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease is known to be lost."""
        if self.lost is not None:
            raise LeaseLost(str(self.lost))

    def mark_lost(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
            log.warning("lease lost", run_id=self.run_id, lease_epoch=self.epoch, error=str(exc))
            if self.extensions is not None:
                self.extensions.later.lease_lost(self.run_id, exc)

    async def _beat(self) -> None:
        every = self.settings.heartbeat_every
        last = self.valid_until - self.settings.ttl + self.settings.skew  # when the lease was taken
        while True:
            await asyncio.sleep(max(0.0, next_beat(last, every) - time.monotonic()))
            started = last = time.monotonic()
            try:
                # a heartbeat still unanswered when the lease runs out (by the local clock) is
                # too late: the database unreachable (a partition holds a call for seconds), or
                # this process paused past its lease. Not asyncio.wait_for: on Python 3.11 it
                # swallows a cancel that comes as the heartbeat is answered, and :meth:`stop`
                # then waited forever on a lease that went on beating
                async with asyncio.timeout(max(0.0, self.valid_until - started)):
                    await self.store.call(self.store.store.heartbeat, self.run_id, self.epoch, self.settings.ttl)
                self.valid_until = started + self.settings.ttl - self.settings.skew
            except LeaseLost as exc:
                if not self.ending:
                    self.mark_lost(exc)
                return
            except (TimeoutError, StoreError) as exc:  # keep trying until the lease runs out
                if time.monotonic() >= self.valid_until:
                    self.mark_lost(
                        LeaseLost(
                            f"run {self.run_id}: no heartbeat got through before the lease ran "
                            f"out (by this host's clock): {str(exc) or 'no answer'}"
                        )
                    )
                    return
                log.warning("heartbeat failed", run_id=self.run_id, error=str(exc))

    def start(self) -> None:
        self._task = asyncio.create_task(self._beat(), name=f"heartbeat-{self.run_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
