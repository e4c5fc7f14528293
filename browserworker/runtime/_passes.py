"""What the executor's parts share: the run they work on (:class:`RunScope`), one pass's
browser state (:class:`Pass`), and how a step ends a pass early (:class:`Again`, :class:`Stop`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from playwright.async_api import BrowserContext, Page
from pydantic import BaseModel

from .._redact import SECRET_MARK
from ..flow import Extensions, Flow, Step, StepContext
from ..gate import ContextRoute, StepGap, safe_url
from ..journal import RunJournal
from ..store.records import AttemptRecord, OutboxRecord, RunRecord
from ._settings import ApprovalSettings, SessionSettings

__all__ = [
    "REPLAY_NOW",
    "Again",
    "Pass",
    "PassOutcome",
    "RunScope",
    "Stop",
    "backoff",
    "in_own_task",
    "jsonable",
    "response_evidence",
    "safe_url",
]

T = TypeVar("T")

MAX_BACKOFF = 10.0


@dataclass(frozen=True)
class PassOutcome:
    """How one pass over the steps ended."""

    kind: Literal["done", "again", "review", "failed", "cancelled", "released", "throttled", "approval"]
    reason: str | None = None
    backoff: float = 0.0


class Again(Exception):
    """End this pass; take a new one (a replay needs fresh page state), after ``backoff`` seconds."""

    def __init__(self, reason: str, backoff: float = 0.0) -> None:
        super().__init__(reason)
        self.backoff = backoff


class Stop(Exception):
    """End the run's passes: for review, failed, cancelled, or handed back (released, or
    throttled: back to the queue until its limit key's pause ends)."""

    def __init__(
        self, kind: Literal["review", "failed", "cancelled", "released", "throttled", "approval"], reason: str
    ) -> None:
        super().__init__(reason)
        self.kind = kind


def backoff(failures: int) -> float:
    """Seconds to wait before the next try after ``failures`` failures of a step."""
    return min(MAX_BACKOFF, 0.5 * 2.0 ** max(0, failures - 1))


class _ReplayNow:
    """Sentinel: recovery decided the effect is to be attempted again in this pass."""


REPLAY_NOW: Any = _ReplayNow()


@dataclass
class RunScope:
    """One leased run as every part of the executor sees it."""

    flow: Flow[Any]
    run: RunRecord
    journal: RunJournal
    extensions: Extensions
    inputs: BaseModel
    log: Any
    evidence_dir: Path | None = None
    approvals: ApprovalSettings = ApprovalSettings()  # the hold and default expiry of approve= effects
    sessions: SessionSettings = SessionSettings()  # the sealing key and maximum age of saved logins
    shared_workers_allowed: bool = False
    restored_at: float | None = None  # the run was restored from a backup (see reconcile.restore_gap)
    budget_since: float | None = None  # a person requeued the run: failures before count no more
    parked_approval: int | None = None  # the approval the run waits for (a pass ended "approval")
    # the wall clock the settle rule reads and how recovery waits out the settle time
    # (docs/guarantees.md, "Recovery"); a test passes its own
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    @classmethod
    def of(
        cls,
        flow: Flow[Any],
        journal: RunJournal,
        extensions: Extensions,
        *,
        approvals: ApprovalSettings,
        sessions: SessionSettings | None,
        evidence_dir: Path | None,
        shared_workers_allowed: bool,
        log: Any,
    ) -> RunScope:
        """The scope of the run ``journal`` holds, its inputs validated by ``flow``, its log bound
        to the run, the flow, the worker and the lease epoch."""
        run = journal.run
        return cls(
            flow=flow,
            run=run,
            journal=journal,
            extensions=extensions,
            inputs=flow.validate_inputs(run.inputs),
            evidence_dir=evidence_dir,
            approvals=approvals,
            sessions=sessions if sessions is not None else SessionSettings(),
            shared_workers_allowed=shared_workers_allowed,
            log=log.bind(run_id=run.id, flow=flow.name, worker_id=journal.worker, lease_epoch=journal.epoch),
        )

    def step_context(
        self, page: Page, step_id: str, attempt: AttemptRecord | None, fingerprint: str, results: Mapping[str, Any]
    ) -> StepContext[Any]:
        """What a step, verifier or extension is handed for one step."""
        key = self.journal.request_key(step_id)
        attempt_no = attempt.attempt_no if attempt else 0
        return StepContext(
            page=page,
            inputs=self.inputs,
            run_id=self.run.id,
            step_id=step_id,
            attempt_no=attempt_no,
            request_key=key,
            fingerprint=fingerprint,
            results=dict(results),
            log=self.log.bind(
                step_id=step_id,
                attempt_no=attempt_no,
                request_key=key,
                fingerprint=fingerprint,
                state=str(attempt.state) if attempt else None,
            ),
        )

    def attempt_log(self, attempt: AttemptRecord) -> Any:
        return self.log.bind(
            step_id=attempt.step_id,
            attempt_no=attempt.attempt_no,
            request_key=attempt.request_key,
            fingerprint=attempt.request_fingerprint,
            state=str(attempt.state),
        )

    async def screenshot(self, page: Page, name: str) -> str | None:
        """Keep what the page showed when a step was parked for review (best effort; the
        elements a secret was typed into masked)."""
        if self.evidence_dir is None:
            return None
        path = self.evidence_dir / self.run.id.replace(":", "_") / f"{name}.png"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(path), full_page=True, timeout=5000, mask=[page.locator(f"[{SECRET_MARK}]")])
        except Exception:  # evidence is best effort: the page may be gone
            return None
        return str(path)


@dataclass
class Pass:
    """One pass: a fresh browser context walking the steps from the top."""

    context: BrowserContext
    route: ContextRoute
    page: Page | None = None
    results: dict[str, Any] = field(default_factory=dict)
    gap: StepGap | None = None  # the window between steps (set by the executor)

    def gap_opened(self, after: Step) -> None:
        """``after`` has stopped watching its page (its gate removed, its guard off): the gap
        after it starts, before its outcome is journaled."""
        if self.gap is not None:
            self.gap.open(after)

    def gap_closed(self) -> None:
        """The next step is in place (its guard, its armed gate): the gap before it ends."""
        if self.gap is not None:
            self.gap.close()


async def in_own_task(step: Awaitable[T]) -> T:
    """Await a flow's step function in a task of its own.

    Playwright captures the caller's stack on every API call and reads the locals of each
    frame outside its own package; in a task of its own, a step's stack is its own frames,
    not the executor's and the worker's as well. Cancelling the caller cancels the step.
    """
    return await asyncio.ensure_future(step)


def response_evidence(row: OutboxRecord) -> dict[str, Any]:
    """An outbox row as review evidence."""
    evidence = {
        "method": row.method,
        "url": row.url,
        "status": row.status,
        "location": (row.headers or {}).get("location"),
        "answered": row.answered,
        "failure": row.failure,
    }
    if row.channel != "held":
        evidence["channel"] = row.channel
    if row.final_status is not None:
        evidence["final_status"], evidence["final_url"] = row.final_status, row.final_url
    return evidence


def jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value
