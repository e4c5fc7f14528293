"""Extensions and their bus: a subscriber's hooks called sync or async (only those it overrides),
failing notifications logged but failing step hooks failing the run, misspelt hooks refused when
the class is defined, background hooks drained at a run's end."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from browserworker.flow import Extension, Extensions
from browserworker.flow._extensions import HOOKS


class _Seen(Extension):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def notice(self, run: Any, step_id: str | None, message: str, **fields: Any) -> None:
        self.seen.append(("notice", message))

    async def outcome(self, attempt: Any) -> None:
        await asyncio.sleep(0)
        self.seen.append(("outcome", attempt))


def test_extensions_call_only_what_a_subscriber_overrides_sync_or_async() -> None:
    """A subscriber's plain and async hooks are both called, in subscription order; a hook it
    does not override is never called (it costs nothing); any object with hook methods subscribes."""
    first, second = _Seen(), _Seen()

    class Duck:
        calls: list[str] = []

        def outcome(self, attempt: Any) -> None:
            self.calls.append(attempt)

    bus = Extensions([first, Duck(), second])
    assert [bus.subscribed(h) for h in ("notice", "outcome", "run_started")] == [2, 3, 0]

    async def main() -> None:
        await bus.notice(None, None, "hello")
        await bus.outcome("attempt-1")
        await bus.run_started(None)

    asyncio.run(main())
    assert first.seen == second.seen == [("notice", "hello"), ("outcome", "attempt-1")]
    assert Duck.calls == ["attempt-1"]
    assert HOOKS == (  # every hook, in the order a run meets them (docs/flows.md)
        "run_started",
        "context_created",
        "step_started",
        "step_skipped",
        "intent_committed",
        "before_step",
        "dispatched",
        "response",
        "outcome",
        "after_step",
        "notice",
        "lease_lost",
        "run_settled",
        "run_finished",
    )


def test_a_failing_notification_is_logged_but_a_failing_step_hook_fails_the_run() -> None:
    """``notice``/``outcome`` and the like never break a run; ``before_step`` and the other hooks in
    the step's path raise, as the step itself would."""

    class Broken(Extension):
        async def outcome(self, attempt: Any) -> None:
            raise RuntimeError("outcome broke")

        async def before_step(self, ctx: Any, step: Any, context: Any) -> None:
            raise RuntimeError("before_step broke")

    after = _Seen()
    bus = Extensions([Broken(), after])

    async def main() -> None:
        await bus.outcome("a")
        with pytest.raises(RuntimeError, match="before_step broke"):
            await bus.before_step(None, None, None)
        bus.later.outcome("b")  # from code that cannot wait: in the background
        await bus.drain()

    asyncio.run(main())
    assert after.seen == [("outcome", "a"), ("outcome", "b")]


def test_a_misspelt_hook_is_refused_when_the_extension_is_defined() -> None:
    """A method named close to a hook but not one (``outcomes``, ``on_outcome``) would never be
    called: defining the class raises, naming the hook meant; other public methods are fine."""
    with pytest.raises(TypeError, match=r"Misspelt.outcomes is not a hook.*did you mean 'outcome'"):

        class Misspelt(Extension):
            def outcomes(self, attempt: Any) -> None: ...

    with pytest.raises(TypeError, match=r"did you mean 'run_started'"):

        class Prefixed(Extension):
            def on_run_started(self, run: Any) -> None: ...

    class Fine(Extension):
        def report(self) -> str:
            return "a helper of its own"

    assert Fine().report() == "a helper of its own"


def test_background_hooks_are_drained_when_the_run_ends() -> None:
    """An async hook called from code that cannot wait has finished once ``drain`` returns
    (a leased run drains its bus at its end)."""
    finished: list[str] = []

    class Slow(Extension):
        async def run_settled(self, run_id: str) -> None:
            await asyncio.sleep(0.05)
            finished.append(run_id)

    async def main() -> None:
        bus = Extensions([Slow()])
        bus.later.run_settled("r1")
        assert finished == []
        await bus.drain()
        assert finished == ["r1"]

    asyncio.run(main())
