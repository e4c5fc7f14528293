"""The engine: one object that assembles a store, a browser, leases and extensions.

Everything that executes runs goes through it: ``browserworker run`` and ``worker``,
recording and replay, chaos and the pytest plugin. None of them wires a store, a lease,
a browser session and an executor together itself.

    engine = Engine(open_store("browserworker.db"), browser=BrowserSettings.discover())
    run, created = engine.prepare(load_flow("flow.py"), {"sku": "A-1"})
    final = await engine.run(loaded, run)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .browser import BrowserSettings
from .leases import LeaseSettings
from .loader import LoadedFlow
from .store.base import Store
from .store.records import RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from .worker import Worker, WorkerSettings, WorkerStats

__all__ = ["Engine"]


class Engine:
    """Runs runs. ``extensions`` hear about every run this engine executes."""

    def __init__(self, store: Store, *, browser: BrowserSettings | None = None, lease: LeaseSettings | None = None,
                 extensions: Sequence[Any] = (), evidence_dir: Path | None = None) -> None:
        self.store = store
        self.browser = browser if browser is not None else BrowserSettings.discover()
        self.lease = lease if lease is not None else LeaseSettings()
        self.extensions = list(extensions)
        self.evidence_dir = evidence_dir

    def prepare(self, loaded: LoadedFlow, inputs: Mapping[str, Any] | None = None, *, run_id: str | None = None,
                inputs_given: bool = False) -> tuple[RunRecord, bool]:
        """Create the run, or find the one to resume: ``(run, created)``. Raises
        :class:`~browserworker.errors.UsageError` (nothing written) for bad inputs or a bad run id."""
        from .runner import RunRequest, prepare_run

        return prepare_run(self.store, RunRequest(loaded=loaded, inputs=dict(inputs or {}), run_id=run_id,
                                                  inputs_given=inputs_given))

    async def run(self, loaded: LoadedFlow, run: RunRecord, *, stop: asyncio.Event | None = None,
                  extensions: Sequence[Any] = ()) -> RunRecord:
        """Lease ``run`` and execute it to its end in this process; returns the final run.

        Setting ``stop`` hands the run back (QUEUED) at its next step boundary."""
        from .runner import run_flow

        return await run_flow(self.store, loaded, run, browser=self.browser, lease=self.lease,
                              hooks=_bus([*self.extensions, *extensions]), evidence_dir=self.evidence_dir, stop=stop)

    def worker(self, settings: WorkerSettings, *, label: str = "worker") -> Worker:
        """A worker that serves ``settings.queues`` with this engine (``await worker.run()``)."""
        from .worker import Worker

        return Worker(self.store, settings, self.browser, hooks=_bus(self.extensions), label=label)

    async def serve(self, settings: WorkerSettings) -> WorkerStats:
        """Serve queues as a worker until stopped (or, with ``settings.once``, until they are empty)."""
        return await self.worker(settings).run()

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bus(extensions: Sequence[Any]) -> Any:
    from .hooks import HookBus

    return HookBus(extensions)
