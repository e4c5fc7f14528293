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
import difflib
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..logs import get_logger
from ..store.records import AttemptRecord, RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from playwright.async_api import BrowserContext

    from ._flow import Step, StepContext

__all__ = ["HOOKS", "IN_PATH", "Extension", "Extensions", "Later"]

log = get_logger("browserworker.extensions")


class Extension:
    """Every hook of a run, each a no-op here; override what you need.

    Order within a run: ``run_started``; per browser context ``context_created`` (before any
    step runs in it: put routes or init scripts in here); per step ``step_started`` (or
    ``step_skipped``), for an effect ``intent_committed``, ``before_step`` (the step function
    is next; nothing has been dispatched), ``dispatched`` / ``response`` for each request the
    gate lets go, ``outcome`` (the attempt's journaled end), ``after_step``; ``notice`` for
    anything worth telling a person; ``run_settled`` once the run's end is committed (its
    context may still be closing); ``run_finished``. ``lease_lost`` may come at any time.

    Override a hook as ``async def`` or plain ``def``. A public method whose name is close to
    a hook's but is not one (``outcomes``, ``on_outcome``) is refused when the class is defined:
    it would never be called.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            if name.startswith("_") or name in HOOKS or not callable(value):
                continue
            close = difflib.get_close_matches(name.removeprefix("on_"), HOOKS, n=1, cutoff=0.8)
            if close:
                raise TypeError(
                    f"{cls.__qualname__}.{name} is not a hook of Extension, so it would never be "
                    f"called (did you mean {close[0]!r}?)"
                )

    def run_started(self, run: RunRecord) -> Awaitable[None] | None:
        """The run is leased and about to take its first pass."""
        return None

    def context_created(self, context: BrowserContext) -> Awaitable[None] | None:
        """A pass opened a fresh browser context; no page and no step exists in it yet."""
        return None

    def step_started(self, run: RunRecord, step_id: str, kind: str) -> Awaitable[None] | None:
        """A step begins (``kind`` is "action" or "effect")."""
        return None

    def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> Awaitable[None] | None:
        """An effect already SUCCEEDED in an earlier pass: its journaled result is handed on."""
        return None

    def intent_committed(self, attempt: AttemptRecord) -> Awaitable[None] | None:
        """An effect's intent is durable; it may now dispatch."""
        return None

    def before_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext) -> Awaitable[None] | None:
        """The step function runs next (for an effect: after its intent, before any dispatch)."""
        return None

    def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> Awaitable[None] | None:
        """The gate journaled a request of ``attempt`` and let it go."""
        return None

    def response(self, attempt: AttemptRecord, status: int, url: str) -> Awaitable[None] | None:
        """The answer to a request of ``attempt`` is journaled."""
        return None

    def outcome(self, attempt: AttemptRecord) -> Awaitable[None] | None:
        """An attempt's end (or a recovery's decision) is journaled."""
        return None

    def after_step(
        self, ctx: StepContext[Any], step: Step, context: BrowserContext, attempt: AttemptRecord | None
    ) -> Awaitable[None] | None:
        """The step's attempt has its outcome (``attempt``: the finished row; None if it raised past it)."""
        return None

    def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> Awaitable[None] | None:
        """Something a person watching should be told (recovery decisions, waits, warnings)."""
        return None

    def lease_lost(self, run_id: str, error: BaseException) -> Awaitable[None] | None:
        """The run's lease is lost: nothing more may be dispatched for it."""
        return None

    def run_settled(self, run_id: str) -> Awaitable[None] | None:
        """The run's end is committed; all that is left is closing its browser context."""
        return None

    def run_finished(self, run: RunRecord) -> Awaitable[None] | None:
        """The run reached its end (SUCCEEDED, FAILED, NEEDS_REVIEW, CANCELLED)."""
        return None


HOOKS: tuple[str, ...] = tuple(
    name for name, value in vars(Extension).items() if not name.startswith("_") and callable(value)
)

IN_PATH = frozenset({"context_created", "before_step", "after_step"})


def _overrides(subscriber: object, name: str) -> Callable[..., Any] | None:
    """``subscriber``'s own ``name`` hook, or None where it keeps the no-op (or has none)."""
    method = getattr(subscriber, name, None)
    if method is None or getattr(type(subscriber), name, None) is getattr(Extension, name):
        return None
    return method  # type: ignore[no-any-return]


class Extensions:
    """The subscribers of a run, called hook by hook: the bus has every hook of
    :class:`Extension`, typed as there. ``await ext.outcome(attempt)`` calls every subscriber
    that overrides ``outcome``, in order; ``ext.later.outcome(attempt)`` does the same from code
    that cannot wait (plain hooks run now, async ones in the background, and :meth:`drain`
    waits for those when the run ends)."""

    def __init__(self, subscribers: Iterable[object] = ()) -> None:
        self.subscribers: list[object] = []
        self._by_hook: dict[str, list[Callable[..., Any]]] = {name: [] for name in HOOKS}
        self._background: set[asyncio.Future[Any]] = set()
        self.later = Later(self)
        for subscriber in subscribers:
            self.add(subscriber)

    def add(self, subscriber: object) -> None:
        """Subscribe ``subscriber`` (an :class:`Extension` or any object with hook methods)."""
        self.subscribers.append(subscriber)
        for name in HOOKS:
            method = _overrides(subscriber, name)
            if method is not None:
                self._by_hook[name].append(method)

    def subscribed(self, hook: str) -> int:
        """How many subscribers override ``hook`` (the others are never called for it)."""
        return len(self._by_hook[hook])

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait (up to ``timeout`` seconds) for the hooks :attr:`later` started in the
        background; a hook still running then is logged and left to finish on its own."""
        if not self._background:
            return
        _, pending = await asyncio.wait(set(self._background), timeout=timeout)
        if pending:
            log.warning("extension hooks still running when the run ended", count=len(pending))

    async def run_started(self, run: RunRecord) -> None:
        await self._emit("run_started", run)

    async def context_created(self, context: BrowserContext) -> None:
        await self._emit("context_created", context)

    async def step_started(self, run: RunRecord, step_id: str, kind: str) -> None:
        await self._emit("step_started", run, step_id, kind)

    async def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> None:
        await self._emit("step_skipped", run, attempt)

    async def intent_committed(self, attempt: AttemptRecord) -> None:
        await self._emit("intent_committed", attempt)

    async def before_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext) -> None:
        await self._emit("before_step", ctx, step, context)

    async def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> None:
        await self._emit("dispatched", attempt, method, url)

    async def response(self, attempt: AttemptRecord, status: int, url: str) -> None:
        await self._emit("response", attempt, status, url)

    async def outcome(self, attempt: AttemptRecord) -> None:
        await self._emit("outcome", attempt)

    async def after_step(
        self, ctx: StepContext[Any], step: Step, context: BrowserContext, attempt: AttemptRecord | None
    ) -> None:
        await self._emit("after_step", ctx, step, context, attempt)

    async def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None:
        await self._emit("notice", run, step_id, message, **fields)

    async def lease_lost(self, run_id: str, error: BaseException) -> None:
        await self._emit("lease_lost", run_id, error)

    async def run_settled(self, run_id: str) -> None:
        await self._emit("run_settled", run_id)

    async def run_finished(self, run: RunRecord) -> None:
        await self._emit("run_finished", run)

    async def _emit(self, hook: str, *args: Any, **kwargs: Any) -> None:
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
                log.exception(
                    "an extension failed; the run goes on",
                    hook=hook,
                    extension=type(getattr(method, "__self__", method)).__name__,
                )

    def _notify(self, hook: str, *args: Any, **kwargs: Any) -> None:
        """:meth:`_emit` without waiting: plain hooks run now, async ones in the background."""
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


class Later:
    """The hooks of an :class:`Extensions` bus for code that cannot wait (a browser event
    listener, a heartbeat): plain hooks run now, async ones in the background."""

    def __init__(self, bus: Extensions) -> None:
        self._bus = bus

    def run_started(self, run: RunRecord) -> None:
        self._bus._notify("run_started", run)

    def context_created(self, context: BrowserContext) -> None:
        self._bus._notify("context_created", context)

    def step_started(self, run: RunRecord, step_id: str, kind: str) -> None:
        self._bus._notify("step_started", run, step_id, kind)

    def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> None:
        self._bus._notify("step_skipped", run, attempt)

    def intent_committed(self, attempt: AttemptRecord) -> None:
        self._bus._notify("intent_committed", attempt)

    def before_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext) -> None:
        self._bus._notify("before_step", ctx, step, context)

    def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> None:
        self._bus._notify("dispatched", attempt, method, url)

    def response(self, attempt: AttemptRecord, status: int, url: str) -> None:
        self._bus._notify("response", attempt, status, url)

    def outcome(self, attempt: AttemptRecord) -> None:
        self._bus._notify("outcome", attempt)

    def after_step(
        self, ctx: StepContext[Any], step: Step, context: BrowserContext, attempt: AttemptRecord | None
    ) -> None:
        self._bus._notify("after_step", ctx, step, context, attempt)

    def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None:
        self._bus._notify("notice", run, step_id, message, **fields)

    def lease_lost(self, run_id: str, error: BaseException) -> None:
        self._bus._notify("lease_lost", run_id, error)

    def run_settled(self, run_id: str) -> None:
        self._bus._notify("run_settled", run_id)

    def run_finished(self, run: RunRecord) -> None:
        self._bus._notify("run_finished", run)
