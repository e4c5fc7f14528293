"""A bounded soak: two worker processes drain 60 runs while a seeded supervisor SIGKILLs and
restarts them at random moments and pauses one (SIGSTOP) past its lease.

The seed is printed (run with ``-s`` or ``-rA`` to see it, and the soak's figures) and
``BW_SOAK_SEED=N`` replays the same sequence of choices (the timing still depends on the
machine). Afterwards every run must have ended as its flow allows, with exactly one order
per reference where the flow has a verifier, and the journal must account for every
decision.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from browserworker.control import enqueue
from browserworker.flow import load_flow
from browserworker.store import open_store
from tests.support.fleet import start_worker
from tests.support.paths import FLOWS, TEST_FLOWS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VERIFIED_RUNS = 52  # tests/flows/short_order.py: verifier, so exactly once
UNVERIFIED_RUNS = 8  # flows/place_order_unverified.py: no verifier, so at most once (or NEEDS_REVIEW)
WORKERS = 2
TTL = 3.0
SKEW = 2.0  # the reclaimer's clock-skew tolerance (LeaseSettings default)
MAX_KILLS = 8
BUDGET = 480.0  # seconds for the whole drain: ~15 s on two idle fast cores, a minute or more on slow or busy ones
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "NEEDS_REVIEW")
ACTIVE = ("LEASED", "RUNNING")


def soak_seed() -> int:
    raw = os.environ.get("BW_SOAK_SEED")
    return int(raw) if raw else random.SystemRandom().randrange(1 << 32)


def write_locked(db: Path) -> bool:
    """Whether another process holds the database's write lock for over half a second."""
    conn = sqlite3.connect(db, timeout=0.5, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
    return False


class Supervisor:
    """Starts, kills, restarts, pauses and resumes the worker processes."""

    def __init__(self, db: Path, logs: Path, rng: random.Random) -> None:
        self.db = db
        self.logs = logs
        self.rng = rng
        self.procs: list[subprocess.Popen[str] | None] = [None] * WORKERS
        self.log_of: list[Path | None] = [None] * WORKERS
        self.restart_at: list[float | None] = [None] * WORKERS
        self.started = 0
        self.kills = 0
        self.pauses = 0
        self.paused: tuple[int, dict[str, int], float] | None = None  # slot, {run: epoch held}, since
        self.timeline: list[str] = []
        self.t0 = time.monotonic()

    def note(self, what: str) -> None:
        self.timeline.append(f"{time.monotonic() - self.t0:6.1f}s {what}")

    def start(self, slot: int) -> None:
        self.started += 1
        log = self.logs / f"worker{slot}-{self.started}.log"
        self.procs[slot] = start_worker(
            self.db, "-n", "3", "--lease-ttl", str(TTL), "--max-lease-losses", "100", "--grace", "10", log=log
        )
        self.log_of[slot] = log
        self.restart_at[slot] = None
        self.note(f"started worker {slot} (pid {self.procs[slot].pid}, log {log.name})")

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]

    def kill(self, now: float) -> bool:
        """SIGKILL a live worker (not the paused one); whether there was one to kill."""
        slots = [i for i in self.alive() if self.paused is None or i != self.paused[0]]
        if not slots:
            return False
        slot = self.rng.choice(slots)
        proc = self.procs[slot]
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        self.kills += 1
        self.procs[slot] = None
        self.restart_at[slot] = now + self.rng.uniform(0.2, 2.0)
        self.note(f"SIGKILL worker {slot} (pid {proc.pid})")
        return True

    def pause(self, runs: list[Any], now: float) -> bool:
        """SIGSTOP a worker that holds at least one run, while another worker is up or coming."""
        holders = {}
        for slot in self.alive():
            pid = self.procs[slot].pid  # type: ignore[union-attr]
            held = {r.id: r.lease_epoch for r in runs if r.state in ACTIVE and r.owner_pid == pid}
            if held:
                holders[slot] = held
        if not holders:
            return False
        slot = self.rng.choice(sorted(holders))
        self.procs[slot].send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        if write_locked(self.db):
            # stopped inside a write transaction: SQLite has one writer, so nobody could reclaim
            # anything until it resumes (a documented limit). Resume it and pause it later.
            self.procs[slot].send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            self.note(f"SIGSTOP worker {slot} landed inside a write transaction: resumed, will pause later")
            return False
        self.paused = (slot, holders[slot], now)
        self.note(f"SIGSTOP worker {slot} holding {len(holders[slot])} run(s)")
        return True

    def maybe_resume(self, runs: list[Any], now: float) -> None:
        """SIGCONT once every run the paused worker held was reclaimed (its lease is past)."""
        assert self.paused is not None
        slot, held, since = self.paused
        epochs = {r.id: (r.lease_epoch, r.state) for r in runs if r.id in held}
        moved_on = all(epochs[i][0] > e or epochs[i][1] in FINAL for i, e in held.items())
        assert now - since < 180, f"the paused worker's runs were never reclaimed: {epochs}"
        if moved_on and now - since > TTL + SKEW:
            self.procs[slot].send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            self.pauses += 1
            self.paused = None
            self.note(f"SIGCONT worker {slot} after {now - since:.1f}s (lease {TTL:g}s)")

    def stop_all(self) -> list[int | None]:
        """SIGTERM every worker (each must exit 0), once it is up: a worker restarted just before
        the drain ended may still be starting, and SIGTERM before its handler is in place is
        Python's default exit (-15), which says nothing about its shutdown."""
        codes = []
        for proc, log in zip(self.procs, self.log_of, strict=True):
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                wait_started(proc, log)
                proc.send_signal(signal.SIGTERM)
            try:
                codes.append(proc.wait(timeout=90))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait(timeout=30))
        return codes


def wait_started(proc: subprocess.Popen[str], log: Path | None, timeout: float = 60) -> None:
    """Until the worker has logged "worker started" (its signal handlers are in), or has exited."""
    deadline = time.monotonic() + timeout
    while log is not None and proc.poll() is None and time.monotonic() < deadline:
        if log.exists() and '"worker started"' in log.read_text(errors="replace"):
            return
        time.sleep(0.05)


def enqueue_mix(db: Path, shop: Any, rng: random.Random, prefix: str) -> dict[str, str]:
    """Queue the runs, the unverified ones at random places in the line; ``{run_id: kind}``."""
    kinds = ["verified"] * VERIFIED_RUNS + ["unverified"] * UNVERIFIED_RUNS
    rng.shuffle(kinds)
    flows = {
        "verified": load_flow(TEST_FLOWS / "short_order.py"),
        "unverified": load_flow(FLOWS / "place_order_unverified.py"),
    }
    store = open_store(db)
    try:
        ids = {}
        for n, kind in enumerate(kinds):
            run = enqueue(store, flows[kind], {"base_url": shop.url, "item": f"soak-{n}"}, run_id=f"{prefix}-{n:03d}")
            ids[run.id] = kind
        return ids
    finally:
        store.close()


def test_soak_kills_and_a_pause_keep_every_effect_exactly_once(tmp_path: Path, shop: Any) -> None:
    """Two workers drain 60 runs through random SIGKILLs/restarts and a SIGSTOP past the lease:
    no run lost, verifier runs SUCCEEDED with exactly one order each, unverified ones at most
    one order (SUCCEEDED or NEEDS_REVIEW), integrity ok, and every verifier decision has its
    duplicate_prevented event."""
    seed = soak_seed()
    print(f"\nsoak seed {seed} (replay its choices with BW_SOAK_SEED={seed})")
    rng = random.Random(seed)
    db = tmp_path / "soak.db"
    prefix = f"soak{seed % 100000:05d}-{tmp_path.name[-6:]}"
    kinds = enqueue_mix(db, shop, rng, prefix)
    sup = Supervisor(db, tmp_path, rng)
    # The chaos follows the drain's progress, not the clock, so that it lands on a fast machine
    # (60 runs in ~15 s) as on a slow one: a kill once `kill_at` runs have ended (and a restarted
    # worker has had a moment), the pause after `pause_after` kills, early enough to fall mid-drain.
    pause_after = rng.randint(1, 2)
    kill_at, not_before = rng.randint(2, 6), time.monotonic() + rng.uniform(1.0, 3.0)
    reader = open_store(db)
    try:
        for slot in range(WORKERS):
            sup.start(slot)
        while True:
            now = time.monotonic()
            runs = [r for r in reader.list_runs(limit=10_000) if r.id in kinds]
            counts = collections.Counter(str(r.state) for r in runs)
            ended = sum(counts[s] for s in FINAL)
            if ended == len(kinds) and sup.paused is None:
                break
            assert now - sup.t0 < BUDGET, f"seed {seed}: not drained in {BUDGET:g}s: {dict(counts)}\n" + "\n".join(
                sup.timeline
            )
            for slot in range(WORKERS):
                due = sup.restart_at[slot]
                if sup.procs[slot] is None and due is not None and now >= due:
                    sup.start(slot)
            if sup.paused is not None:
                sup.maybe_resume(runs, now)
                if sup.paused is None:  # let the woken worker live a while: its stale gate must send nothing
                    kill_at, not_before = max(kill_at, ended + 1), max(not_before, now + rng.uniform(1.5, 4.0))
            elif sup.pauses == 0 and sup.kills >= pause_after and sup.pause(runs, now):
                pass
            elif ended >= kill_at and now >= not_before and sup.kills < MAX_KILLS and ended < len(kinds):
                if sup.kill(now):
                    kill_at, not_before = ended + rng.randint(3, 8), now + rng.uniform(1.0, 3.0)
            time.sleep(0.2)  # the polling interval, not a synchronisation
    finally:
        reader.close()
        exit_codes = sup.stop_all()
    elapsed = time.monotonic() - sup.t0
    context = f"seed {seed}\n" + "\n".join(sup.timeline)
    assert exit_codes and all(code == 0 for code in exit_codes), (exit_codes, context)

    store = open_store(db)
    try:
        runs = {r.id: r for r in store.list_runs(limit=10_000)}
        attempts = {i: [a for a in store.attempts(i) if a.step_id == "submit"] for i in runs}
        decisions = [e for i in runs for e in store.events(i) if e.kind == "decision"]
        expired = [e for i in runs for e in store.events(i) if e.kind == "lease_expired"]
        integrity = store.integrity_check()
    finally:
        store.close()
    placed = [o for o in shop.orders() if o["reference"].startswith(prefix)]
    orders = collections.Counter(o["reference"] for o in placed)

    # no run lost: every run enqueued is there, and nothing else
    assert sorted(runs) == sorted(kinds), context
    assert integrity == "ok", context
    # no duplicate; if there is one, say what the journal and the shop saw, and when
    duplicates = {ref: n for ref, n in orders.items() if n > 1}
    assert duplicates == {}, "\n".join(
        [f"duplicate orders {duplicates}"]
        + [
            f"  {o['reference']}: order {o['id']} created at {o['created_at']:.3f}"
            for o in placed
            if o["reference"] in duplicates
        ]
        + [
            f"  {a.run_id}/{a.step_id} #{a.attempt_no} {a.state} by {a.decided_by}, worker {a.worker}, epoch "
            f"{a.lease_epoch}, intent {a.intent_at:.3f}, dispatched {a.dispatched_at}, finished {a.finished_at}"
            for ref in duplicates
            for a in attempts[ref.rpartition("/")[0]]
        ]
        + [context]
    )
    for run_id, kind in kinds.items():
        run, ref = runs[run_id], f"{run_id}/submit"
        succeeded = [a for a in attempts[run_id] if a.state == "SUCCEEDED"]
        if kind == "verified":
            assert run.state == "SUCCEEDED", (run_id, run.state, run.error, context)
            assert orders[ref] == 1, (run_id, orders[ref], context)
            assert len(succeeded) == 1, (run_id, attempts[run_id], context)
        else:
            assert run.state in ("SUCCEEDED", "NEEDS_REVIEW"), (run_id, run.state, run.error, context)
            assert orders[ref] <= 1, (run_id, orders[ref], context)
            if run.state == "SUCCEEDED":
                assert orders[ref] == 1 and len(succeeded) == 1, (run_id, attempts[run_id], context)
    # every verifier "done" is a duplicate prevented, and the journal says so exactly once
    by_verifier = {
        (i, a.step_id, a.attempt_no)
        for i, atts in attempts.items()
        for a in atts
        if a.decided_by == "verifier" and a.state == "SUCCEEDED"
    }
    prevented = [(e.run_id, e.step_id, e.attempt_no) for e in decisions if e.decision == "duplicate_prevented"]
    assert len(prevented) == len(set(prevented)), context
    assert set(prevented) == by_verifier, context
    assert sup.pauses == 1 and sup.kills >= 2, context

    states = collections.Counter(str(r.state) for r in runs.values())
    not_done = sum(
        1 for atts in attempts.values() for a in atts if a.decided_by == "verifier" and a.state == "NOT_DONE"
    )
    replays = sum(1 for atts in attempts.values() for a in atts if a.state == "FAILED_BEFORE_SEND")
    print(
        f"soak figures (seed {seed}): {len(runs)} runs ({VERIFIED_RUNS} with a verifier, {UNVERIFIED_RUNS} without) "
        f"in {elapsed:.0f}s; kills {sup.kills}, pauses {sup.pauses}, worker starts {sup.started}; "
        f"leases expired {len(expired)}; verifier decisions {len(by_verifier) + not_done} "
        f"(done, duplicate prevented: {len(by_verifier)}; not done, replayed: {not_done}); "
        f"replays of unsent attempts {replays}; end states {dict(states)}; duplicates {len(duplicates)}"
    )
    print("\n".join(sup.timeline))
