"""The verifier self-test of ``browserworker chaos``: is each effect's verifier right?

Recovery trusts the verifier: a "not done" for an effect that landed replays it (a
duplicate), a "done" for one that did not skips it (a lost effect). So ``chaos`` first does
one clean run (no fault) of the flow, in this process with a fresh run id, and asks each
effect's verifier, as ``run --record`` does (:mod:`browserworker.recording.selftest`), on a
new page of the run's browser context:

- just before the dispatch (the intent is committed, nothing is sent yet): it must say
  ``not_done``;
- once the effect's outcome is journaled: ``done`` after SUCCEEDED (``not_done`` after a
  failure before or without landing).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _faults as faults
from ..flow import Effect, LoadedFlow, Step, StepContext, where_defined
from ..recording.selftest import SelfTest, expected_after, run_verifier
from ..runtime import BrowserSettings, Engine, RunRequest, prepare_run
from ..store.base import Store
from ..store.records import AttemptRecord

if TYPE_CHECKING:  # pragma: no cover
    from playwright.async_api import BrowserContext

__all__ = ["VerifierCheck", "self_test_verifiers"]

NOT_REACHED = "not reached"


@dataclass(frozen=True)
class VerifierCheck:
    """One question to an effect's verifier in the clean run, and whether its answer was right."""

    test: SelfTest
    verifier: str  # the verifier function's name
    where: str  # its file:line
    run_id: str  # the clean run

    @property
    def step(self) -> str:
        return self.test.step

    @property
    def status(self) -> str:
        """``ok``, ``BROKEN`` (it said what it must not), or ``not reached`` (the clean run never got there)."""
        if self.test.said == NOT_REACHED:
            return NOT_REACHED
        return "ok" if self.test.ok else "BROKEN"

    def describe(self) -> str:
        if self.status == NOT_REACHED:
            text = f"verifier not self-tested: {self.test.reason}"
        else:
            text = self.test.describe()
        return f"{self.step}: {text} (verifier {self.verifier} at {self.where})"

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.test.to_dict(),
            "status": self.status,
            "verifier": self.verifier,
            "where": self.where,
            "run_id": self.run_id,
        }


def _check(effect: Effect, test: SelfTest, run_id: str) -> VerifierCheck:
    assert effect.verifier is not None
    return VerifierCheck(
        test=test,
        verifier=getattr(effect.verifier, "__name__", repr(effect.verifier)),
        where=where_defined(effect.verifier),
        run_id=run_id,
    )


class _SelfTester:
    """A step observer that asks the chosen effects' verifiers before and after each attempt."""

    def __init__(self, effects: Mapping[str, Effect], run_id: str, report: Callable[[VerifierCheck], None]) -> None:
        self.effects = effects
        self.run_id = run_id
        self.report = report
        self.checks: list[VerifierCheck] = []

    async def _ask(
        self, ctx: StepContext[Any], effect: Effect, context: BrowserContext, phase: str, expected: str | None
    ) -> None:
        verdict = await run_verifier(effect, ctx, context)
        check = _check(
            effect,
            SelfTest(
                step=effect.id,
                attempt=ctx.attempt_no,
                phase=phase,
                said=verdict.kind,
                expected=expected,
                reason=verdict.reason,
                result=verdict.result,
            ),
            self.run_id,
        )
        self.checks.append(check)
        self.report(check)

    async def before_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext) -> None:
        effect = self.effects.get(step.id)
        if effect is not None:
            await self._ask(ctx, effect, context, "before", "not_done")

    async def after_step(
        self, ctx: StepContext[Any], step: Step, context: BrowserContext, attempt: AttemptRecord | None
    ) -> None:
        effect = self.effects.get(step.id)
        if effect is not None and attempt is not None:
            await self._ask(ctx, effect, context, "after", expected_after(attempt))


async def self_test_verifiers(
    store: Store,
    loaded: LoadedFlow,
    inputs: Mapping[str, Any],
    effects: Collection[Effect],
    *,
    browser: BrowserSettings,
    progress: Callable[[VerifierCheck], None] | None = None,
) -> list[VerifierCheck]:
    """One clean run of ``loaded`` in ``store``, self-testing the verifiers of ``effects``.

    Effects without a verifier have nothing to test. A verifier whose effect the clean run
    never reached gets one ``not reached`` check saying how the run ended.
    """
    chosen = {e.id: e for e in effects if e.verifier is not None}
    if not chosen:
        return []
    run, _ = prepare_run(
        store, RunRequest(loaded=loaded, inputs=inputs, run_id=f"chaos-selftest-{uuid.uuid4().hex[:8]}")
    )
    tester = _SelfTester(chosen, run.id, progress or (lambda check: None))
    with faults.suspended():  # this process's own fault rules (if any) must not fire in the clean run
        final = await Engine(store, browser=browser, extensions=[tester]).run(loaded, run)
    tested = {c.step for c in tester.checks}
    for effect in chosen.values():
        if effect.id not in tested:
            error = f" ({final.error})" if final.error else ""
            test = SelfTest(
                step=effect.id,
                attempt=0,
                phase="before",
                said=NOT_REACHED,
                expected="not_done",
                reason=f"the clean run {final.id} ended {final.state}{error} before {effect.id} ran",
            )
            check = _check(effect, test, run.id)
            tester.checks.append(check)
            if progress:
                progress(check)
    return tester.checks
