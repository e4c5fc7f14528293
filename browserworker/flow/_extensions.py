"""The one way to extend a run: an :class:`Extension` hears what happens and may use the page.

Progress output, recording, replay routing, verifier self-tests and a worker's slot
accounting are all extensions; the executor imports none of them. Subclass
:class:`Extension` and override the hooks you need (as ``async def`` or plain ``def``);
the others cost nothing: :class:`Extensions` calls only what a subscriber overrides.

The hooks that run *in the step's path* (``context_created``, ``before_step``,
``after_step``) are awaited in order and may prepare the page (a replay's router, a
recording's capture); their failure is the run's failure, as a step's would be. Any other
hook's failure never breaks a run: it is logged and the run goes on.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import structlog

from ..store.records import AttemptRecord, RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from playwright.async_api import BrowserContext

    from ._flow import Step, StepContext

__all__ = ["HOOKS", "IN_PATH", "Extension", "Extensions"]

log = structlog.get_logger("browserworker.extensions")


class Extension:
    """Every hook of a run, each a no-op here; override what you need.

    Order within a run: ``run_started``; per browser context ``context_created`` (before any
    step runs in it: put routes or init scripts in here); per step ``step_started`` (or
    ``step_skipped``), for an effect ``intent_committed``, ``before_step`` (the step function
    is next; nothing has been dispatched), ``dispatched`` / ``response`` for each request the
    gate lets go, ``outcome`` (the attempt's journaled end), ``after_step``; ``notice`` for
    anything worth telling a person; ``run_settled`` once the run's end is committed (its
    context may still be closing); ``run_finished``. ``lease_lost`` may come at any time.
    """

    async def run_started(self, run: RunRecord) -> None:
        """The run is leased and about to take its first pass."""

    async def context_created(self, context: BrowserContext) -> None:
        """A pass opened a fresh browser context; no page and no step exists in it yet."""

    async def step_started(self, run: RunRecord, step_id: str, kind: str) -> None:
        """A step begins (``kind`` is "action" or "effect")."""

    async def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> None:
        """An effect already SUCCEEDED in an earlier pass: its journaled result is handed on."""

    async def intent_committed(self, attempt: AttemptRecord) -> None:
        """An effect's intent is durable; it may now dispatch."""

    async def before_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext) -> None:
        """The step function runs next (for an effect: after its intent, before any dispatch)."""

    async def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> None:
        """The gate journaled a request of ``attempt`` and let it go."""

    async def response(self, attempt: AttemptRecord, status: int, url: str) -> None:
        """The answer to a request of ``attempt`` is journaled."""

    async def outcome(self, attempt: AttemptRecord) -> None:
        """An attempt's end (or a recovery's decision) is journaled."""

    async def after_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext,
                         attempt: AttemptRecord | None) -> None:
        """The step's attempt has its outcome (``attempt``: the finished row; None if it raised past it)."""

    async def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None:
        """Something a person watching should be told (recovery decisions, waits, warnings)."""

    async def lease_lost(self, run_id: str, error: BaseException) -> None:
        """The run's lease is lost: nothing more may be dispatched for it."""

    async def run_settled(self, run_id: str) -> None:
        """The run's end is committed; all that is left is closing its browser context."""

    async def run_finished(self, run: RunRecord) -> None:
        """The run reached its end (SUCCEEDED, FAILED, NEEDS_REVIEW, CANCELLED)."""


HOOKS: tuple[str, ...] = tuple(name for name, value in vars(Extension).items()
                               if not name.startswith("_") and callable(value))

IN_PATH = frozenset({"context_created", "before_step", "after_step"})


def _overrides(subscriber: object, name: str) -> Callable[..., Any] | None:
    """``subscriber``'s own ``name`` hook, or None where it keeps the no-op (or has none)."""
    method = getattr(subscriber, name, None)
    if method is None or getattr(type(subscriber), name, None) is getattr(Extension, name):
        return None
    return method  # type: ignore[no-any-return]


class Extensions:
    """The subscribers of a run, hook by hook. ``await ext.emit("outcome", attempt)`` calls
    every subscriber that overrides ``outcome``, in order; :meth:`notify` does the same from
    code that cannot wait (its async hooks run in the background)."""

    def __init__(self, subscribers: Iterable[object] = ()) -> None:
        self.subscribers: list[object] = []
        self._by_hook: dict[str, list[Callable[..., Any]]] = {name: [] for name in HOOKS}
        self._background: set[asyncio.Future[Any]] = set()
        for subscriber in subscribers:
            self.add(subscriber)

    def add(self, subscriber: object) -> None:
        """Subscribe ``subscriber`` (an :class:`Extension` or any object with hook methods)."""
        self.subscribers.append(subscriber)
        for name in HOOKS:
            method = _overrides(subscriber, name)
            if method is not None:
                self._by_hook[name].append(method)

    async def emit(self, hook: str, *args: Any, **kwargs: Any) -> None:
        """Call ``hook`` on every subscriber that has it, awaiting each in turn. A failure of a
        hook in the step's path (:data:`IN_PATH`) is the run's; of any other, only logged."""
        for method in self._by_hook[hook]:
            try:
                result = method(*args, **kwargs)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                if hook in IN_PATH:
                    raise
                log.exception("an extension failed; the run goes on", hook=hook,
                              extension=type(getattr(method, "__self__", method)).__name__)

    def notify(self, hook: str, *args: Any, **kwargs: Any) -> None:
        """:meth:`emit` without waiting: plain hooks run now, async ones in the background."""
        for method in self._by_hook[hook]:
            try:
                result = method(*args, **kwargs)
            except Exception:
                log.exception("an extension failed; the run goes on", hook=hook)
                continue
            if inspect.isawaitable(result):
                self._spawn(hook, result)

    def _spawn(self, hook: str, work: Awaitable[Any]) -> None:
        async def guarded() -> None:
            try:
                await work
            except Exception:
                log.exception("an extension failed; the run goes on", hook=hook)

        task = asyncio.ensure_future(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
