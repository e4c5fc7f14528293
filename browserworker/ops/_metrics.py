"""Queue-health metrics, computed from the store so that they survive restarts.

:func:`snapshot` reads everything an operator needs in one pass of cheap, indexed queries (the typed
reads of :mod:`browserworker.store.ops`): queue depth and age, runs by state (awaiting approval too), lease
expiries, worker health, UNKNOWN attempts per effect step, reconciliation latency, duplicate-prevention decisions
and queue-age histograms. ``status``, ``health`` and ``metrics`` (``worker --metrics-port``) render that snapshot.

Counters (``*_total``) are counts of journaled events, so they never reset when a worker
restarts; Prometheus' ``rate()``/``increase()`` turn them into rates.
"""

from __future__ import annotations

import bisect
import socket
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import start_http_server

from ..journal import gone_here
from ..store.base import Store
from ..store.records import KeyLimits, StateCount
from ._counters import ProcessCounters

__all__ = [
    "QUEUE_AGE_BUCKETS",
    "RECONCILE_BUCKETS",
    "Histogram",
    "MetricsServer",
    "OpsSnapshot",
    "QueueAges",
    "QueueStatus",
    "StepUnknown",
    "StoreCollector",
    "WorkerStatus",
    "exposition",
    "reconcile_decision",
    "snapshot",
]

#: Seconds from a lost lease being detected to the decision on what was in doubt.
RECONCILE_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: Seconds a run spent from its queue to being started, or to confirmed completion.
QUEUE_AGE_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
DEFAULT_WINDOW = 600.0  # "recent": the last 10 minutes
DEFAULT_STALE_AFTER = 60.0  # a worker that has not heartbeated for this long is stale
GONE_AFTER = 3600.0  # ... and after an hour it is history, not an alert


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``buckets`` are ``(upper bound, count <= bound)``."""

    buckets: tuple[tuple[float, int], ...]
    count: int
    sum: float

    @classmethod
    def of(cls, values: list[float], bounds: tuple[float, ...]) -> Histogram:
        ordered = sorted(values)
        return cls(tuple((b, bisect.bisect_right(ordered, b)) for b in bounds), len(ordered), float(sum(ordered)))


class _Counts:
    """Non-cumulative bucket counts of one label's values, plus count and sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.n = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.n += 1
        self.total += value

    def plus(self, other: _Counts | None) -> Histogram:
        counts = list(self.counts)
        n, total = self.n, self.total
        if other is not None:
            counts = [a + b for a, b in zip(counts, other.counts, strict=True)]
            n, total = n + other.n, total + other.total
        cumulative, running = [], 0
        for bound, c in zip(self.bounds, counts, strict=False):
            running += c
            cumulative.append((bound, running))
        return Histogram(tuple(cumulative), n, total)


class QueueAges:
    """The queue-age histograms (at dispatch, at confirmed completion), read incrementally.

    The first read scans every run once; later reads fold in only the runs started or
    finished since a watermark that trails the store's clock by ``slack`` seconds (a commit
    is never that late), plus a fresh look at the last ``slack`` seconds. A long-lived
    collector (``worker --metrics-port``) keeps one, so a scrape costs O(recent runs).
    """

    KINDS: tuple[Literal["dispatch"], Literal["completion"]] = ("dispatch", "completion")

    def __init__(self, slack: float = 300.0) -> None:
        self.slack = slack
        self._mark: float | None = None
        self._base: dict[str, dict[str, _Counts]] = {k: {} for k in self.KINDS}

    def _fold(self, store: Store, lo: float, hi: float, into: dict[str, dict[str, _Counts]]) -> None:
        for kind in self.KINDS:
            for r in store.queue_waits(kind, lo, hi):
                into[kind].setdefault(r.queue, _Counts(QUEUE_AGE_BUCKETS)).add(max(0.0, float(r.waited or 0)))

    def read(self, store: Store, now: float) -> dict[str, dict[str, Histogram]]:
        horizon = now - self.slack
        if self._mark is None or horizon > self._mark:
            self._fold(store, -1.0 if self._mark is None else self._mark, horizon, self._base)
            self._mark = horizon
        recent: dict[str, dict[str, _Counts]] = {k: {} for k in self.KINDS}
        self._fold(store, self._mark, float("inf"), recent)
        out: dict[str, dict[str, Histogram]] = {}
        for kind in self.KINDS:
            labels = sorted(set(self._base[kind]) | set(recent[kind]))
            out[kind] = {
                q: self._base[kind].get(q, _Counts(QUEUE_AGE_BUCKETS)).plus(recent[kind].get(q)) for q in labels
            }
        return out


@dataclass(frozen=True)
class QueueStatus:
    """One queue: its runs by state, its backlog and its unresolved ambiguity."""

    name: str
    states: dict[str, int]
    queued: int
    ready: int
    oldest_ready_age: float | None
    max_depth: int | None
    unknown: int  # effect attempts UNKNOWN now, in this queue's runs
    unknown_recent: int  # ... of which became UNKNOWN within the window


@dataclass(frozen=True)
class WorkerStatus:
    """A registered worker and how it looks from the store."""

    id: str
    host: str
    pid: int
    status: str  # healthy | unhealthy (lost a lease) | stale (no heartbeat) | dead (pid gone) | stopped
    heartbeat_age: float
    concurrency: int
    queues: list[str]
    leased: int


@dataclass(frozen=True)
class StepUnknown:
    """UNKNOWN attempts of one effect step (operation)."""

    flow: str
    step: str
    open: int  # UNKNOWN now
    classified_total: int  # ever classified UNKNOWN
    classified_recent: int


@dataclass
class OpsSnapshot:
    """Everything ``status``, ``health`` and ``metrics`` show, read together at ``at``."""

    at: float
    window: float
    stale_after: float
    host: str
    queues: list[QueueStatus]
    states: dict[str, int]
    workers: list[WorkerStatus]
    unknown: list[StepUnknown]
    lease_expiries_total: int
    lease_expiries_recent: int
    duplicates_prevented: dict[tuple[str, str, str], int]
    reconcile_latency: dict[str, Histogram]
    queue_age_at_dispatch: dict[str, Histogram]
    queue_age_at_completion: dict[str, Histogram]
    schema_version: int | None = None
    db: str | None = None
    worker_counts: dict[str, int] = field(default_factory=dict)
    limits: list[KeyLimits] = field(
        default_factory=list
    )  # keys with a budget or a pause (browserworker.store.limit_rules)
    limit_pauses: dict[str, int] = field(default_factory=dict)  # pauses from a site's Retry-After, by key

    @property
    def unknown_open(self) -> int:
        return sum(q.unknown for q in self.queues)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["duplicates_prevented"] = [
            {"flow": f, "step": s, "by": b, "count": n} for (f, s, b), n in sorted(self.duplicates_prevented.items())
        ]
        for key in ("reconcile_latency", "queue_age_at_dispatch", "queue_age_at_completion"):
            data[key] = {
                k: {"count": h.count, "sum": round(h.sum, 3), "buckets": {str(b): c for b, c in h.buckets}}
                for k, h in getattr(self, key).items()
            }
        data["unknown_open"] = self.unknown_open
        return data


def _by(by: str | None) -> str:
    """Who proved an UNKNOWN effect landed: outbox, verifier or human."""
    by = by or "unknown"
    return "human" if by.startswith("human:") else by


def reconcile_decision(kind: str, from_state: str | None, to_state: str | None, decision: str | None) -> str | None:
    """Name the event that settled a lost lease, or None when nothing was in doubt."""
    decision = decision or ""
    if kind == "decision":
        return decision  # needs_review | idempotent_replay
    if kind != "attempt_state":
        return "needs_review" if kind == "run_state" and to_state == "NEEDS_REVIEW" else None
    if decision.startswith("human:"):
        return "human"
    if decision == "recovery:no_dispatch":
        return "not_sent"  # nothing had left: replayed with the same key
    if decision in ("outbox", "verifier") and from_state == "UNKNOWN":
        return {"SUCCEEDED": "done", "NOT_DONE": "not_done", "FAILED": "failed"}.get(to_state or "")
    return None  # a fresh attempt: the lost lease left nothing in doubt


def snapshot(
    store: Store,
    *,
    window: float = DEFAULT_WINDOW,
    stale_after: float = DEFAULT_STALE_AFTER,
    now: float | None = None,
    ages: QueueAges | None = None,
    histograms: bool = True,
) -> OpsSnapshot:
    """Read the queue-health picture from ``store`` (a handful of indexed queries).

    ``histograms=False`` skips the queue-age histograms (``status`` and ``health`` do not
    show them); ``ages`` keeps them incrementally across calls.
    """
    now = store.now() if now is None else now
    since = now - window
    counts = store.runs_by_state()
    states: dict[str, int] = {}
    for c in counts:
        states[c.state] = states.get(c.state, 0) + c.n
    queues, step_open = _queues(store, counts, now, since)
    workers = _workers(store, now, since, stale_after)
    worker_counts = {s: 0 for s in ("healthy", "unhealthy", "stale", "dead", "stopped")}
    for worker in workers:
        worker_counts[worker.status] += 1
    classified = {(c.flow_name, c.step_id): c for c in store.unknown_classified(since)}
    unknown = [
        StepUnknown(
            flow=f,
            step=s,
            open=step_open.get((f, s), 0),
            classified_total=classified[(f, s)].n if (f, s) in classified else 0,
            classified_recent=(classified[(f, s)].recent or 0) if (f, s) in classified else 0,
        )
        for f, s in sorted(set(classified) | set(step_open))
    ]
    expiries_total, expiries_recent = store.lease_expiries(since)
    duplicates: dict[tuple[str, str, str], int] = {}
    for d in store.duplicates_prevented():
        dup = (d.flow_name, d.step_id, _by(d.decision))
        duplicates[dup] = duplicates.get(dup, 0) + d.n
    queue_ages = (ages or QueueAges()).read(store, now) if histograms else {}
    return OpsSnapshot(
        at=now,
        window=window,
        stale_after=stale_after,
        host=socket.gethostname(),
        queues=queues,
        states=dict(sorted(states.items())),
        workers=workers,
        unknown=unknown,
        lease_expiries_total=expiries_total,
        lease_expiries_recent=expiries_recent,
        duplicates_prevented=duplicates,
        reconcile_latency=_reconcile_latency(store),
        queue_age_at_dispatch=queue_ages.get("dispatch", {}),
        queue_age_at_completion=queue_ages.get("completion", {}),
        schema_version=store.schema_version,
        db=store.location or None,
        worker_counts=worker_counts,
        limits=store.limits(),
        limit_pauses=store.limit_pauses(),
    )


def _queues(
    store: Store, counts: list[StateCount], now: float, since: float
) -> tuple[list[QueueStatus], dict[tuple[str, str], int]]:
    """Each queue's status, and how many attempts of each (flow, step) are UNKNOWN now."""
    per_queue: dict[str, dict[str, int]] = {}
    for c in counts:
        per_queue.setdefault(c.queue, {})[c.state] = c.n
    queued = {b.queue: b for b in store.queue_backlog(now)}
    limits = store.queue_limits()
    q_unknown: dict[str, tuple[int, int]] = {}
    step_open: dict[tuple[str, str], int] = {}
    for u in store.unknown_open(since):
        n, recent = q_unknown.get(u.queue, (0, 0))
        q_unknown[u.queue] = (n + u.n, recent + (u.recent or 0))
        key = (u.flow_name, u.step_id)
        step_open[key] = step_open.get(key, 0) + u.n
    queues = []
    for name in sorted(set(per_queue) | set(limits)):
        q = queued.get(name)
        oldest = q.oldest_ready_at if q is not None else None
        n_unknown, n_recent = q_unknown.get(name, (0, 0))
        queues.append(
            QueueStatus(
                name=name,
                states=dict(sorted(per_queue.get(name, {}).items())),
                queued=q.queued if q else 0,
                ready=(q.ready or 0) if q else 0,
                oldest_ready_age=None if oldest is None else max(0.0, now - oldest),
                max_depth=limits.get(name),
                unknown=n_unknown,
                unknown_recent=n_recent,
            )
        )
    return queues, step_open


def _workers(store: Store, now: float, since: float, stale_after: float) -> list[WorkerStatus]:
    """The registered workers (not gone for an hour), each with how it looks now."""
    workers = []
    for load in store.worker_loads(since, now - GONE_AFTER):
        w = load.worker
        age = max(0.0, now - w.last_heartbeat)
        if w.health == "stopped":
            status = "stopped"
        elif gone_here(w.host, w.pid, w.pid_start):
            status = "dead"  # on this host, and its process is gone: it did not stop cleanly
        elif age > stale_after:
            status = "stale"
        else:
            status = "unhealthy" if w.health == "unhealthy" else "healthy"
        workers.append(
            WorkerStatus(
                id=w.id,
                host=w.host,
                pid=w.pid,
                status=status,
                heartbeat_age=age,
                concurrency=w.concurrency,
                queues=[str(q) for q in w.queues],
                leased=load.leased,
            )
        )
    return workers


def _reconcile_latency(store: Store) -> dict[str, Histogram]:
    """From each lost lease to the decision on what was in doubt, by decision."""
    latencies: dict[str, list[float]] = {}
    for r in store.reconciliations():
        decision = reconcile_decision(r.kind, r.from_state, r.to_state, r.decision)
        if decision is not None:
            latencies.setdefault(decision, []).append(max(0.0, r.decided_at - r.detected_at))
    return {d: Histogram.of(v, RECONCILE_BUCKETS) for d, v in sorted(latencies.items())}


# -- Prometheus -------------------------------------------------------------------------


def _histogram(name: str, doc: str, label: str, data: dict[str, Histogram]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=[label])
    for key, h in data.items():
        family.add_metric([key], [(_le(b), c) for b, c in h.buckets] + [("+Inf", h.count)], h.sum)
    return family


def _le(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else str(bound)


def _queue_families(snap: OpsSnapshot) -> Iterator[Metric]:
    """Runs by queue and state, depth, readiness, age and limits."""
    runs = GaugeMetricFamily("browserworker_runs", "Runs by queue and state.", labels=["queue", "state"])
    depth = GaugeMetricFamily("browserworker_queue_depth", "QUEUED runs (including delayed ones).", labels=["queue"])
    ready = GaugeMetricFamily("browserworker_queue_ready", "QUEUED runs a worker may claim now.", labels=["queue"])
    age = GaugeMetricFamily(
        "browserworker_queue_oldest_age_seconds",
        "Age of the oldest claimable QUEUED run (0 when none).",
        labels=["queue"],
    )
    limit = GaugeMetricFamily(
        "browserworker_queue_max_depth", "The queue's backpressure limit, where one is set.", labels=["queue"]
    )
    awaiting = GaugeMetricFamily("browserworker_runs_awaiting_approval", "Runs waiting for approval.", labels=["queue"])
    for q in snap.queues:
        awaiting.add_metric([q.name], q.states.get("AWAITING_APPROVAL", 0))
        for state, n in q.states.items():
            runs.add_metric([q.name, state], n)
        depth.add_metric([q.name], q.queued)
        ready.add_metric([q.name], q.ready)
        age.add_metric([q.name], q.oldest_ready_age or 0.0)
        if q.max_depth is not None:
            limit.add_metric([q.name], q.max_depth)
    yield from (runs, depth, ready, age, limit, awaiting)


def _unknown_families(snap: OpsSnapshot) -> Iterator[Metric]:
    """Effect attempts in doubt, now and ever, by queue and by step."""
    unknown = GaugeMetricFamily(
        "browserworker_unknown_attempts",
        "Effect attempts UNKNOWN now (dispatched, outcome unproven, not yet reconciled).",
        labels=["queue"],
    )
    for q in snap.queues:
        unknown.add_metric([q.name], q.unknown)
    yield unknown
    step_unknown = GaugeMetricFamily(
        "browserworker_step_unknown_attempts", "UNKNOWN attempts now, by effect step.", labels=["flow", "step"]
    )
    classified = CounterMetricFamily(
        "browserworker_unknown_classified",
        "Effect attempts ever classified UNKNOWN, by effect step.",
        labels=["flow", "step"],
    )
    for s in snap.unknown:
        step_unknown.add_metric([s.flow, s.step], s.open)
        classified.add_metric([s.flow, s.step], s.classified_total)
    yield from (step_unknown, classified)


def _limit_families(snap: OpsSnapshot) -> Iterator[Metric]:
    """Budgets of limit keys: pauses now and ever, live runs against each budget."""
    yield GaugeMetricFamily(
        "browserworker_limit_paused_keys",
        "Limit keys paused now (a site's Retry-After).",
        value=sum(1 for b in snap.limits if b.paused),
    )
    pauses = CounterMetricFamily(
        "browserworker_limit_pauses", "Pauses of a limit key from a 429/503 Retry-After.", labels=["key"]
    )
    for key, n in sorted(snap.limit_pauses.items()):
        pauses.add_metric([key], n)
    live = GaugeMetricFamily(
        "browserworker_limit_live_runs", "Runs of each limit key with a budget LEASED or RUNNING now.", labels=["key"]
    )
    concurrency = GaugeMetricFamily(
        "browserworker_limit_concurrency", "Each limit key's concurrency budget.", labels=["key"]
    )
    for b in snap.limits:
        live.add_metric([b.key], b.live)
        if b.concurrency is not None:
            concurrency.add_metric([b.key], b.concurrency)
    yield from (pauses, live, concurrency)


def families(snap: OpsSnapshot) -> Iterator[Metric]:
    """The snapshot as Prometheus metric families (all names start ``browserworker_``)."""
    yield from _queue_families(snap)
    yield from _limit_families(snap)
    yield from _unknown_families(snap)
    yield CounterMetricFamily(
        "browserworker_lease_expiries", "Leases found expired and reclaimed.", value=snap.lease_expiries_total
    )
    workers = GaugeMetricFamily("browserworker_workers", "Registered workers by status.", labels=["status"])
    for status, n in snap.worker_counts.items():
        workers.add_metric([status], n)
    yield workers
    beat = GaugeMetricFamily(
        "browserworker_worker_heartbeat_age_seconds",
        "Seconds since each running worker's last heartbeat.",
        labels=["worker", "host"],
    )
    for w in snap.workers:
        if w.status != "stopped":
            beat.add_metric([w.id, w.host], w.heartbeat_age)
    yield beat

    dup = CounterMetricFamily(
        "browserworker_duplicates_prevented",
        "Recoveries that proved an effect had landed (so it was not replayed), by who proved it.",
        labels=["flow", "step", "by"],
    )
    for (flow, step, by), n in sorted(snap.duplicates_prevented.items()):
        dup.add_metric([flow, step, by], n)
    yield dup
    yield _histogram(
        "browserworker_reconcile_latency_seconds",
        "From a lost lease being detected to the decision on the effect in doubt, by decision.",
        "decision",
        snap.reconcile_latency,
    )
    yield _histogram(
        "browserworker_queue_age_at_dispatch_seconds",
        "How long runs waited in their queue before a worker started them.",
        "queue",
        snap.queue_age_at_dispatch,
    )
    yield _histogram(
        "browserworker_queue_age_at_completion_seconds",
        "From queue to confirmed completion (SUCCEEDED), per queue.",
        "queue",
        snap.queue_age_at_completion,
    )


class StoreCollector:
    """A prometheus_client collector that reads a fresh :func:`snapshot` on every scrape."""

    def __init__(
        self, store: Store, *, window: float = DEFAULT_WINDOW, stale_after: float = DEFAULT_STALE_AFTER
    ) -> None:
        self.store = store
        self.window = window
        self.stale_after = stale_after
        self.ages = QueueAges()
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap = snapshot(self.store, window=self.window, stale_after=self.stale_after, ages=self.ages)
        yield from families(snap)


def exposition(store: Store) -> bytes:
    """The Prometheus text exposition of ``store``'s metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    return generate_latest(registry)


class MetricsServer:
    """``/metrics`` over HTTP, from its own connection to the database (never the worker's).

    ``MetricsServer(db, port)`` starts serving at once (port 0 picks a free one: see
    :attr:`port`); :meth:`close` stops it. Binds 127.0.0.1 unless told otherwise. ``schema``:
    the schema of a PostgreSQL ``db``. With ``counters`` (a :class:`ProcessCounters`
    subscribed to the worker's engine) it also serves what this process did.
    """

    def __init__(
        self,
        db: str | Path,
        port: int,
        host: str = "127.0.0.1",
        *,
        schema: str | None = None,
        counters: ProcessCounters | None = None,
    ) -> None:
        from ..store.url import open_store

        self.store = open_store(db, schema=schema)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(StoreCollector(self.store))
        if counters is not None:
            registry.register(counters)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError:
            self.store.close()
            raise
        self.host = host
        self.port: int = self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self.store.close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
