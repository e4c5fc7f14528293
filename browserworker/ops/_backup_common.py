"""What backup, restore, check and migrate report, and what both dialects' maintenance shares:
whether a store is in use (:func:`in_use_reasons`) and writing a new file whole (:func:`write_new`)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..journal import gone_here
from ..store.base import Store
from ._metrics import DEFAULT_STALE_AFTER

__all__ = ["BackupReport", "DbCheck", "MigrateReport", "RestoreReport", "in_use_reasons", "write_new"]


@dataclass(frozen=True)
class BackupReport:
    source: str
    dest: str
    bytes: int
    seconds: float
    schema_version: int
    runs: dict[str, int]
    integrity: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RestoreReport:
    source: str
    db: str
    previous: str | None  # where the replaced store was kept (a file; a schema)
    schema_version: int
    runs: dict[str, int]
    requeued: list[str]  # leased runs handed back to the queue
    flagged: int  # unfinished runs that will be reconciled before any dispatch
    backup_last_event_at: float | None
    dialect: str = "sqlite"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DbCheck:
    path: str
    integrity: str
    schema_version: int
    supported_version: int
    journal_mode: str
    foreign_key_errors: int
    runs: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dialect: str = "sqlite"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class MigrateReport:
    store: str
    dialect: str
    before: int  # the schema version found (0: there was no store)
    after: int
    supported: int  # this browserworker's version for the dialect
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def in_use_reasons(
    store: Store,
    *,
    now: float | None = None,
    stale_after: float = DEFAULT_STALE_AFTER,
    host: str | None = None,
    workers: bool = True,
    leases: bool = True,
) -> list[str]:
    """Why the database behind ``store`` may be in use, per its worker registry (``workers``)
    and its leases (``leases``: False for a store too old to have the table)."""
    now = time.time() if now is None else now
    host = host or socket.gethostname()
    reasons = []
    for w in store.live_workers(now - stale_after) if workers else []:
        if w.host == host and gone_here(w.host, w.pid, w.pid_start):
            continue
        reasons.append(f"worker {w.id} (pid {w.pid} on {w.host}) heartbeated {now - w.last_heartbeat:.0f}s ago")
    for r in store.live_leases(now) if leases else []:
        if r.owner_host == host and gone_here(r.owner_host, r.owner_pid, r.owner_pid_start):
            continue
        reasons.append(
            f"run {r.id} is leased by {r.owner} (pid {r.owner_pid} on {r.owner_host}) "
            f"for {r.lease_expires_at - now:.0f}s more"
        )
    return reasons


def write_new(dest: Path, write: Callable[[Path], None]) -> None:
    """Write a new file ``dest`` (refused if it exists) by ``write(partial)`` into a partial
    file beside it, fsynced and renamed into place: ``dest`` is whole or absent."""
    if dest.exists():
        raise UsageError(f"{dest} exists; choose a new file (a backup never overwrites)")
    if not dest.parent.is_dir():
        raise UsageError(f"{dest.parent} is not a directory")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
        _fsync_dir(dest.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
