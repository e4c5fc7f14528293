"""Helpers for fleet tests: enqueue in bulk, start worker processes, wait for outcomes."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from browserworker.control import enqueue
from browserworker.flow import load_flow
from browserworker.states import RunState
from browserworker.store import open_store
from tests.support.paths import TEST_FLOWS


def enqueue_many(db: Path, flow: str, shop: Any, n: int, prefix: str, **kw: Any) -> list[str]:
    loaded = load_flow(TEST_FLOWS / flow)
    store = open_store(db)
    try:
        return [
            enqueue(store, loaded, {"base_url": shop.url, "item": f"item-{i}"}, run_id=f"{prefix}-{i:04d}", **kw).id
            for i in range(n)
        ]
    finally:
        store.close()


STARTED: list[subprocess.Popen[str]] = []
"""Every worker a test started; the `_reap_workers` fixture kills what a failing test left behind."""


def start_worker(
    db: Path, *args: str, env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[str]:
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "browserworker", "--log-level", "info", "worker", "--db", str(db), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    STARTED.append(proc)
    return proc


def states(db: Path) -> collections.Counter[str]:
    store = open_store(db)
    try:
        return collections.Counter(str(r.state) for r in store.list_runs(limit=100_000))
    finally:
        store.close()


def wait_until_done(
    db: Path, n: int, timeout: float, final: tuple[str, ...] = ("SUCCEEDED",)
) -> collections.Counter[str]:
    """Poll the store until ``n`` runs are in a final state (deadline, not a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        counts = states(db)
        if sum(counts[s] for s in final) >= n or any(counts[s] for s in ("FAILED",) if s not in final):
            return counts
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs not finished in {timeout}s: {dict(counts)}")
        time.sleep(0.25)


def duplicate_references(shop: Any) -> dict[str, int]:
    counts = collections.Counter(o["reference"] for o in shop.orders())
    return {ref: c for ref, c in counts.items() if c > 1}


def events(db: Path, kind: str) -> list[Any]:
    store = open_store(db)
    try:
        return [e for r in store.list_runs(limit=100_000) for e in store.events(r.id) if e.kind == kind]
    finally:
        store.close()


def run_states(db: Path, ids: list[str]) -> dict[str, RunState]:
    store = open_store(db)
    try:
        return {i: store.get_run(i).state for i in ids}
    finally:
        store.close()
