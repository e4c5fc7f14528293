"""The verifier self-test: an effect's verifier must say ``not_done`` just before its dispatch
and ``done`` once the effect succeeded. It runs on a new page of the same browser context,
so the effect's own page is never disturbed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..flow import Effect, Verdict
from ..states import AttemptState

if TYPE_CHECKING:  # pragma: no cover
    from playwright.async_api import BrowserContext

    from ..flow import StepContext
    from ..store.records import AttemptRecord

__all__ = ["SelfTest", "expected_after", "run_verifier"]

VERIFY_TIMEOUT_MS = 15_000


@dataclass(frozen=True)
class SelfTest:
    """One question to a verifier and how its answer compares with what it should say."""

    step: str
    attempt: int
    phase: str  # "before" or "after"
    said: str  # "done", "not_done", "unknown"
    expected: str | None  # None: no expectation (the attempt's outcome is itself unknown)
    reason: str | None = None
    result: Any = None

    @property
    def ok(self) -> bool:
        return self.expected is None or self.said == self.expected

    def describe(self) -> str:
        when = "before the dispatch" if self.phase == "before" else "after the effect"
        why = f" ({self.reason})" if self.reason else ""
        if self.ok:
            return f"verifier self-test {when}: said {self.said} (ok)"
        if self.said == "unknown":  # neither done nor not done: after a crash a person would decide
            hint = (
                "the verifier cannot tell what it reads (an error status, neither of its texts): if the target "
                "answers so exactly when the effect is missing, make it say not done there"
            )
        elif self.phase == "before":
            hint = "the target already had this effect (a reused run id?) or the verifier finds the wrong thing"
        else:
            hint = "the verifier does not find the effect it should"
        return f"verifier BROKEN: {when} it said {self.said}{why}, expected {self.expected}; {hint}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "attempt": self.attempt,
            "phase": self.phase,
            "said": self.said,
            "expected": self.expected,
            "ok": self.ok,
            "reason": self.reason,
        }


def expected_after(attempt: AttemptRecord | None) -> str | None:
    """What the verifier should say once an attempt ended this way."""
    if attempt is None:
        return None
    if attempt.state == AttemptState.SUCCEEDED:
        return "done"
    if attempt.state in (AttemptState.FAILED, AttemptState.FAILED_BEFORE_SEND, AttemptState.NOT_DONE):
        return "not_done"
    return None


async def run_verifier(step: Effect, ctx: StepContext[Any], context: BrowserContext) -> Verdict:
    """Ask ``step``'s verifier on a new page of ``context``; an exception is an ``unknown`` verdict."""
    assert step.verifier is not None
    page = await context.new_page()
    page.set_default_timeout(VERIFY_TIMEOUT_MS)
    try:
        verdict = await step.verifier(dataclasses.replace(ctx, page=page))
        if not isinstance(verdict, Verdict):
            return Verdict.unknown(f"verifier returned {verdict!r}, not a Verdict")
        return verdict
    except Exception as exc:
        return Verdict.unknown(f"verifier raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        try:
            await page.close()
        except Exception:  # pragma: no cover - the context may be closing
            pass
