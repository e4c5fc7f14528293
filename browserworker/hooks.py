"""Step lifecycle hooks the executor publishes; progress output, recording, metrics and
logging subscribe to them, so the executor imports none of those."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .store.records import AttemptRecord, RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from playwright.async_api import BrowserContext

    from .flow import Step, StepContext

__all__ = ["ExecutorHooks", "HookBus", "NoHooks", "StepObserver"]


class StepObserver(Protocol):
    """An async subscriber that may use the page: called around every step of a pass.

    ``before_step`` runs after an effect's intent is committed and before the step function
    (so before anything is dispatched); ``after_step`` runs once the step's attempt has its
    outcome (``attempt`` is the finished journal row; None if the step raised past it).
    Recording uses this to capture the network per step and to self-test verifiers.
    """

    async def before_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext) -> None: ...

    async def after_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext,
                         attempt: AttemptRecord | None) -> None: ...


class ExecutorHooks(Protocol):
    """Everything a subscriber may hear about; implement the ones you need (see NoHooks)."""

    def run_started(self, run: RunRecord) -> None: ...
    def step_started(self, run: RunRecord, step_id: str, kind: str) -> None: ...
    def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> None: ...
    def intent_committed(self, attempt: AttemptRecord) -> None: ...
    def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> None: ...
    def response(self, attempt: AttemptRecord, status: int, url: str) -> None: ...
    def outcome(self, attempt: AttemptRecord) -> None: ...
    def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None: ...
    def run_finished(self, run: RunRecord) -> None: ...


class NoHooks:
    """A subscriber that ignores everything; subclass it and override what you need."""

    def run_started(self, run: RunRecord) -> None:
        pass

    def step_started(self, run: RunRecord, step_id: str, kind: str) -> None:
        pass

    def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> None:
        pass

    def intent_committed(self, attempt: AttemptRecord) -> None:
        pass

    def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> None:
        pass

    def response(self, attempt: AttemptRecord, status: int, url: str) -> None:
        pass

    def outcome(self, attempt: AttemptRecord) -> None:
        pass

    def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None:
        pass

    def run_finished(self, run: RunRecord) -> None:
        pass


class HookBus(NoHooks):
    """Fans every hook out to its subscribers; a failing subscriber never breaks a run."""

    def __init__(self, subscribers: Sequence[ExecutorHooks] = ()) -> None:
        self.subscribers = list(subscribers)

    def _fan(self, name: str, *args: Any, **kwargs: Any) -> None:
        for sub in self.subscribers:
            try:
                getattr(sub, name)(*args, **kwargs)
            except Exception:  # pragma: no cover - subscribers must not break execution
                pass

    def run_started(self, run: RunRecord) -> None:
        self._fan("run_started", run)

    def step_started(self, run: RunRecord, step_id: str, kind: str) -> None:
        self._fan("step_started", run, step_id, kind)

    def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> None:
        self._fan("step_skipped", run, attempt)

    def intent_committed(self, attempt: AttemptRecord) -> None:
        self._fan("intent_committed", attempt)

    def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> None:
        self._fan("dispatched", attempt, method, url)

    def response(self, attempt: AttemptRecord, status: int, url: str) -> None:
        self._fan("response", attempt, status, url)

    def outcome(self, attempt: AttemptRecord) -> None:
        self._fan("outcome", attempt)

    def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None:
        self._fan("notice", run, step_id, message, **fields)

    def run_finished(self, run: RunRecord) -> None:
        self._fan("run_finished", run)
