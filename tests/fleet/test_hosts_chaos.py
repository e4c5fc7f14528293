"""Many hosts on one machine: workers on hosts of their own drain the PostgreSQL store through links
the test can cut, while the test kills, freezes and cuts off hosts and crashes the database.

Four hosts (tests/support/hosts.py: each its own UTS and PID namespace, so each worker is pid 1 of a host
of its own name) each run a worker (``-n 3``, a 3 s lease) that reaches the test's own
PostgreSQL cluster through a :class:`~tcp_relay.TcpRelay` of its own. They drain 200 runs of
tests/flows/short_order.py (a POST with no idempotency key: a replay would be a second order)
while the test, one after the other:

- SIGKILLs host0's whole process tree while it holds runs (its Chromium goes with it);
- SIGSTOPs host1 while it holds runs, until every one of them has been reclaimed by another
  host, and wakes it (frozen for less than the effect's settle time);
- cuts host2's link (``reset``) while it holds runs, for more than twice the lease, and
  restores it;
- crashes and restarts PostgreSQL (``immediate``);
- starts a replacement host4.

Afterwards every run SUCCEEDED, the shop has exactly one order per request key, each run's
journal accounts for every decision (tests/support/journal_audit.py), each struck host lost leases
that another host reclaimed, and the frozen and the cut-off host worked on afterwards.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from browserworker.errors import StoreError
from browserworker.states import RunState
from browserworker.store import open_store
from browserworker.store.base import Store
from tests.support.fleet import enqueue_many
from tests.support.hosts import Host, PgCluster, TcpRelay, wait_for
from tests.support.journal_audit import audit, summary

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.hosts]

RUNS = 200
TTL = 3.0
WORKER = [
    sys.executable,
    "-m",
    "browserworker",
    "--log-level",
    "info",
    "worker",
    "-n",
    "3",
    "--lease-ttl",
    str(TTL),
    "--max-lease-losses",
    "10",
]
"""``--max-lease-losses`` above the default: a run struck by several faults in a row must stay a
run to finish, not become a poison run sent to review."""
LIVE = (RunState.LEASED, RunState.RUNNING)
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "NEEDS_REVIEW"}


@dataclass
class Fleet:
    """The hosts, each with its own relay to the cluster, and the test's own direct view of the store."""

    cluster: PgCluster
    db: str
    store: Store
    start: Callable[..., Host]
    hosts: dict[str, Host] = field(default_factory=dict)
    relays: dict[str, TcpRelay] = field(default_factory=dict)

    def add(self, name: str) -> Host:
        relay = self.relays[name] = TcpRelay(("127.0.0.1", self.cluster.port))
        host = self.hosts[name] = self.start(name, *WORKER, "--db", self.cluster.url(self.db, port=relay.port))
        return host

    def read(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the store, or None while the database restarts."""
        try:
            return fn()
        except StoreError:
            return None

    def held(self, name: str) -> dict[str, int]:
        """The runs host ``name`` holds the lease of now, with their epochs."""
        runs = self.read(lambda: self.store.list_runs(limit=100_000)) or []
        return {r.id: r.lease_epoch for r in runs if r.owner_host == name and r.state in LIVE}

    def where(self, held: dict[str, int]) -> str:
        """Each of ``held`` as the store has it now, and the database's sessions (for a failure)."""
        lines = []
        for run_id, epoch in held.items():
            try:
                r = self.store.get_run(run_id)
                lines.append(
                    f"{run_id} (held at epoch {epoch}): "
                    + (
                        "gone"
                        if r is None
                        else f"{r.state} epoch {r.lease_epoch} owner {r.owner} expires "
                        f"{(r.lease_expires_at or 0) - time.time():+.1f}s"
                    )
                )
            except StoreError as exc:
                lines.append(f"{run_id}: the store failed: {exc}")
        try:
            with self.store.connector.pool.connection() as conn:  # type: ignore[attr-defined]
                for row in conn.execute(
                    "SELECT application_name, state, wait_event_type, wait_event, "
                    "now() - state_change AS for, left(query, 80) AS query "
                    "FROM pg_stat_activity WHERE datname = current_database()"
                ).fetchall():
                    lines.append(f"  session {dict(row)}")
        except Exception as exc:  # noqa: BLE001 - diagnostics only
            lines.append(f"  (sessions not read: {exc})")
        return "\n".join(lines)

    def taken_from(self, held: dict[str, int]) -> bool:
        """Every one of ``held`` has moved on to a later lease (reclaimed) or ended."""
        runs = [self.read(lambda i=run_id: self.store.get_run(i)) for run_id in held]
        return all(r is not None and (r.lease_epoch > held[r.id] or r.state not in LIVE) for r in runs)

    def states(self) -> collections.Counter[str]:
        runs = self.read(lambda: self.store.list_runs(limit=100_000)) or []
        return collections.Counter(str(r.state) for r in runs)

    def busy(self, name: str) -> dict[str, int]:
        """Wait until host ``name`` holds a run; the runs it holds."""
        return wait_for(lambda: self.held(name), 60, f"{name} holds a run")  # type: ignore[return-value]

    def tails(self) -> str:
        """The runs not ended yet, and the last lines of each host's output (for a failure)."""
        runs = self.read(lambda: self.store.list_runs(limit=100_000)) or []
        open_runs = [
            f"{r.id} {r.state} owner {r.owner} epoch {r.lease_epoch} losses {r.lease_losses}"
            for r in runs
            if str(r.state) not in TERMINAL
        ]
        return "\n".join(
            ["--- runs not ended ---", *open_runs[:20]]
            + [f"--- {n} ---\n" + "\n".join(h.output().splitlines()[-15:]) for n, h in self.hosts.items()]
        )


@pytest.fixture
def fleet(own_postgres: PgCluster, own_database: str, make_host: Callable[..., Host]) -> Iterator[Fleet]:
    store = open_store(own_postgres.url(own_database))
    built = Fleet(own_postgres, own_database, store, make_host)
    yield built
    for host in built.hosts.values():
        host.kill()
    for relay in built.relays.values():
        relay.close()
    store.close()


def kill(fleet: Fleet, name: str) -> dict[str, int]:
    """A power cut while ``name`` holds runs: its leases must expire and move to other hosts.
    (Frozen first, so that it cannot finish the runs it holds between the look and the kill.)"""
    host = fleet.hosts[name]
    deadline = time.monotonic() + 60
    while True:
        fleet.busy(name)
        host.stop()
        held = fleet.held(name)
        if held:
            host.kill()
            return held
        host.cont()
        assert time.monotonic() < deadline, f"{name} never held a run when frozen"


def freeze(fleet: Fleet, name: str) -> tuple[dict[str, int], float]:
    """Stop ``name`` while it holds runs until other hosts have reclaimed them all, then wake it."""
    fleet.busy(name)
    host = fleet.hosts[name]
    host.stop()
    began, held = time.monotonic(), fleet.held(name)
    try:
        wait_for(lambda: fleet.taken_from(held), 30, f"{name}'s runs reclaimed while it is frozen")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{fleet.where(held)}") from None
    assert host.stopped
    host.cont()
    return held, time.monotonic() - began


def cut(fleet: Fleet, name: str) -> tuple[dict[str, int], float]:
    """Cut ``name``'s link while it holds runs, for more than twice the lease; restore it."""
    relay = fleet.relays[name]
    deadline = time.monotonic() + 60
    while True:
        fleet.busy(name)
        relay.cut("reset")
        began, held = time.monotonic(), fleet.held(name)
        if held:  # (it may have ended its runs between the look and the cut)
            break
        relay.restore()
        assert time.monotonic() < deadline, f"{name} never held a run when cut off"
    wait_for(lambda: fleet.taken_from(held), 30, f"{name}'s runs reclaimed while it is cut off")
    wait_for(lambda: time.monotonic() - began > 2 * TTL, 3 * TTL, "the cut has lasted twice the lease")
    relay.restore()
    return held, time.monotonic() - began


def claims_by_host(fleet: Fleet, run_ids: list[str]) -> collections.Counter[str]:
    """How many leases each host has claimed so far (by the registry's worker -> host)."""
    hosts = {w.id: w.host for w in fleet.store.workers()}
    return collections.Counter(
        hosts.get(e.worker or "", "?")
        for run_id in run_ids
        for e in fleet.store.events(run_id)
        if e.kind == "lease_claimed"
    )


def lost_by_host(fleet: Fleet, run_ids: list[str]) -> collections.Counter[str]:
    """How many leases of each host were reclaimed (lease_expired) by a worker of another host."""
    hosts = {w.id: w.host for w in fleet.store.workers()}
    lost: collections.Counter[str] = collections.Counter()
    for run_id in run_ids:
        for e in fleet.store.events(run_id):
            if e.kind == "lease_expired":
                owner = hosts.get(e.detail["previous_owner"], "?")
                if hosts.get(e.worker or "") != owner:
                    lost[owner] += 1
    return lost


def strike(fleet: Fleet, ids: list[str]) -> dict[str, Any]:
    """Every fault, one after the other, while the hosts drain; what each did."""
    wait_for(lambda: fleet.states()["SUCCEEDED"] >= 20, 180, "the hosts have warmed up")
    seen: dict[str, Any] = {"killed": kill(fleet, "host0")}
    seen["frozen"], seen["frozen_for"] = freeze(fleet, "host1")
    seen["claims_after_thaw"] = claims_by_host(fleet, ids)
    seen["cut"], seen["cut_for"] = cut(fleet, "host2")
    seen["claims_after_restore"] = claims_by_host(fleet, ids)
    seen["restart_took"] = fleet.cluster.restart("immediate")
    fleet.add("host4")
    return seen


def test_hosts_die_freeze_and_lose_the_database_yet_every_order_lands_once(
    fleet: Fleet, shop: Any, tmp_path: Path
) -> None:
    """Kill, freeze and cut off hosts and crash the database while four hosts drain 200 runs: every
    run SUCCEEDED with exactly one order and one SUCCEEDED attempt of its effect, each journal
    accounts for every decision, the struck hosts' leases were reclaimed by others, and the
    frozen and the cut-off hosts claimed runs again afterwards."""
    began = time.monotonic()
    ids = enqueue_many(
        fleet.cluster.url(fleet.db),
        "short_order.py",
        shop,
        RUNS,  # type: ignore[arg-type]
        prefix=f"hosts-{tmp_path.name[-6:]}",
    )
    for i in range(4):
        fleet.add(f"host{i}")
    try:
        seen = strike(fleet, ids)
        wait_for(lambda: sum(fleet.states()[s] for s in TERMINAL) >= RUNS, 300, "every run ended", interval=0.5)
    except BaseException:
        print(fleet.tails(), file=sys.stderr)
        raise
    drained = time.monotonic() - began
    counts = fleet.states()
    claims, lost = claims_by_host(fleet, ids), lost_by_host(fleet, ids)
    print(
        f"drained {RUNS} runs in {drained:.1f}s: {dict(counts)}; claims {dict(claims)}; lost {dict(lost)}; "
        f"journal {summary(fleet.store, ids)}; frozen {seen['frozen_for']:.1f}s, cut {seen['cut_for']:.1f}s, "
        f"restart {seen['restart_took']:.1f}s",
        file=sys.stderr,
    )
    assert counts == {"SUCCEEDED": RUNS}, fleet.tails()
    orders = collections.Counter(o["reference"] for o in shop.orders())
    assert {run_id: orders[f"{run_id}/submit"] for run_id in ids if orders[f"{run_id}/submit"] != 1} == {}
    assert [p for run_id in ids for p in audit(fleet.store, run_id, "submit")] == []
    assert sorted((w.host, w.pid) for w in fleet.store.workers()) == [(f"host{i}", 1) for i in range(5)]
    assert all(lost[h] >= 1 for h in ("host0", "host1", "host2")), lost
    assert claims["host1"] > seen["claims_after_thaw"]["host1"], "the thawed host claimed nothing more"
    assert claims["host2"] > seen["claims_after_restore"]["host2"], "the cut-off host claimed nothing more"
