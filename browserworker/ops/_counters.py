"""One worker's own counters, heard as an extension and served beside the store's metrics."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from ..flow import Extension
from ..store.records import AttemptRecord

__all__ = ["ProcessCounters"]


class ProcessCounters(Extension):
    """What this process's engine did, heard as an extension: attempts journaled by kind and
    end state, requests the gate let go, leases lost. The store's families above are the
    fleet's truth; these are one worker's, served beside them on its ``--metrics-port``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attempts: dict[tuple[str, str], int] = {}
        self.dispatches = 0
        self.leases_lost = 0

    def outcome(self, attempt: AttemptRecord) -> None:
        with self._lock:
            key = (attempt.kind, str(attempt.state))
            self.attempts[key] = self.attempts.get(key, 0) + 1

    def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> None:
        with self._lock:
            self.dispatches += 1

    def lease_lost(self, run_id: str, error: BaseException) -> None:
        with self._lock:
            self.leases_lost += 1

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            attempts, dispatches, lost = dict(self.attempts), self.dispatches, self.leases_lost
        family = CounterMetricFamily(
            "browserworker_process_attempts",
            "Attempts this process journaled an end (or a recovery decision) for, by step kind and state.",
            labels=["kind", "state"],
        )
        for (kind, state), n in sorted(attempts.items()):
            family.add_metric([kind, state], n)
        yield family
        yield CounterMetricFamily(
            "browserworker_process_dispatches", "Requests this process's gates journaled and let go.", value=dispatches
        )
        yield CounterMetricFamily(
            "browserworker_process_leases_lost", "Leases this process lost while it held them.", value=lost
        )
