"""``browserworker chaos``: prove a flow's effects take place exactly once under crashes.

First each effect's verifier is self-tested in one clean run (:mod:`.chaos_selftest`): it
must say not done before the dispatch and done after the effect. Then, for every effect
step and every fault point, a child ``browserworker run`` is crashed at that point
(SIGKILL, or SIGSTOP past its lease), the run is resumed by a fresh process, and the
business outcome is checked on the target: the effect's ``@effect.count`` probe (how many
times it landed for the request key) when the flow has one, else its verifier.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._faults import CHAOS_POINTS
from ..errors import UsageError
from ..flow import Action, Effect, LoadedFlow, StepContext, Verdict
from ..logs import get_logger
from ..runtime import BrowserProcess, BrowserSettings
from ..states import AttemptState, RunState
from ..store import Store, open_store
from ._selftest import VerifierCheck, self_test_verifiers

__all__ = ["CHAOS_POINTS", "ChaosReport", "ChaosResult", "VerifierCheck", "run_chaos"]

_TTL = 3.0
_CHILD_TIMEOUT = 300.0


class _Hung(Exception):
    """A child run did not finish in time (it was killed)."""


@dataclass
class ChaosResult:
    """One crash scenario and what it ended in."""

    step: str
    point: str
    round: int
    run_id: str
    fired: bool
    run_state: str
    classification: str  # how the crashed attempt was classified on recovery
    decision: str  # how the step ended (state and who decided)
    landings: int | None
    probe: str
    verdict: str  # ok | unproven: no verifier | DUPLICATE | LOST | not reached
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict in ("ok", "not reached", UNPROVEN)

    def describe(self) -> str:
        return f"{self.step} @ {self.point} #{self.round}: {self.verdict} ({self.decision}, landings {self.landings})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ChaosReport:
    """Everything ``chaos`` found: the verifier self-tests and the crash scenarios."""

    results: list[ChaosResult] = field(default_factory=list)
    self_tests: list[VerifierCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No duplicate, lost or hung run, and no verifier that said the wrong thing."""
        return all(r.ok for r in self.results) and all(t.status != "BROKEN" for t in self.self_tests)

    def problems(self) -> list[str]:
        """One line per wrong verifier (with what it caused under the crashes) and per bad scenario."""
        lines = []
        for t in self.self_tests:
            if t.status == "BROKEN":
                caused = [
                    f"{r.verdict} at {r.point} (landings {r.landings})"
                    for r in self.results
                    if r.step == t.step and not r.ok
                ]
                when = "before the dispatch" if t.test.phase == "before" else "after the effect"
                why = f" ({t.test.reason})" if t.test.reason else ""
                lines.append(
                    f"verifier {t.verifier} of step {t.step} ({t.where}) is wrong: {when} it said "
                    f"{t.test.said}{why}, expected {t.test.expected}"
                    + (f"; under the crashes: {', '.join(caused)}" if caused else "")
                )
        lines += [
            f"{r.step} @ {r.point} #{r.round}: {r.verdict} (run {r.run_id}, {r.decision}, landings {r.landings})"
            for r in self.results
            if not r.ok
        ]
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "results": [r.to_dict() for r in self.results],
            "self_tests": [t.to_dict() for t in self.self_tests],
        }


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "browserworker", *args]


class _Scenario:
    def __init__(self, loaded: LoadedFlow, inputs: Mapping[str, Any], db: Path, env: dict[str, str]) -> None:
        self.loaded = loaded
        self.inputs_args = ["--inputs-json", json.dumps(dict(inputs))]
        self.db = db
        self.env = env

    def run(
        self, run_id: str, *, faults: str | None = None, new: bool = False, wait: bool = True
    ) -> subprocess.Popen[str]:
        args = [
            "run",
            str(self.loaded.path),
            "--flow",
            self.loaded.flow.name,
            "--db",
            str(self.db),
            "--run-id",
            run_id,
            "--lease-ttl",
            str(_TTL),
        ]
        if new:
            args += self.inputs_args
        env = dict(self.env)
        if faults:
            env["BROWSERWORKER_FAULTS"] = faults
        else:
            env.pop("BROWSERWORKER_FAULTS", None)
        proc = subprocess.Popen(_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        if wait:
            try:
                proc.communicate(timeout=_CHILD_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise _Hung(f"browserworker run --run-id {run_id} did not finish in {_CHILD_TIMEOUT:.0f}s") from None
        return proc


def _wait_stopped(pid: int, proc: subprocess.Popen[str], timeout: float) -> bool:
    """Until the child has paused itself (SIGSTOP at the fault), or exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return False
        if state == "T":
            return True
        time.sleep(0.05)
    return False


def _crash(sc: _Scenario, step: str, point: str, run_id: str) -> bool:
    """Run until the fault fires and leave the run crashed; False if it never fired."""
    if point == "lease_expired_while_alive":
        paused = sc.run(run_id, faults=f"{point}:{step}=stop", new=True, wait=False)
        if not _wait_stopped(paused.pid, paused, timeout=120):
            paused.communicate(timeout=60)
            return False
        sc.run(run_id)  # waits for the paused owner's lease to expire, then completes the run
        paused.send_signal(signal.SIGCONT)  # the stale owner wakes up: its fenced dispatch must fail
        paused.communicate(timeout=120)
        return True
    if point == "reclaimer_startup":
        first = sc.run(run_id, faults=f"after_dispatch:{step}=kill", new=True)
        if first.returncode != -signal.SIGKILL:
            return False
        second = sc.run(run_id, faults=f"{point}:{step}=kill")
        return second.returncode == -signal.SIGKILL
    first = sc.run(run_id, faults=f"{point}:{step}=kill", new=True)
    return first.returncode == -signal.SIGKILL


async def _probe(
    loaded: LoadedFlow, store: Store, run_id: str, effect: Effect, browser: BrowserSettings
) -> tuple[int | None, str]:
    """Count the effect's landings for its request key (count probe, else verifier yes/no)."""
    if effect.counter is None and effect.verifier is None:
        return None, "none"
    run = store.get_run(run_id)
    assert run is not None
    flow = loaded.flow
    inputs = flow.validate_inputs(run.inputs)
    results = {a.step_id: a.result for a in store.attempts(run_id) if a.state == AttemptState.SUCCEEDED}
    log = get_logger("browserworker.chaos")
    async with BrowserProcess(browser) as session, session.context() as context:
        page = await context.new_page()

        def ctx_for(step_id: str) -> StepContext[Any]:
            return StepContext(
                page=page,
                inputs=inputs,
                run_id=run_id,
                step_id=step_id,
                attempt_no=0,
                request_key=f"{run_id}/{step_id}",
                fingerprint="",
                results=results,
                log=log,
            )

        for step in flow.preceding(effect.id):
            if isinstance(step, Action):
                try:
                    await step.fn(ctx_for(step.id))
                except Exception:  # noqa: BLE001 - the site moved on (a checkout gone once its order is placed)
                    break  # counted on the page as it is: a probe that reads an API needs none of it

        ctx = ctx_for(effect.id)
        if effect.counter is not None:
            return int(await effect.counter(ctx)), "count"
        assert effect.verifier is not None
        verdict = await effect.verifier(ctx)
        return (1 if isinstance(verdict, Verdict) and verdict.kind == "done" else 0), "verifier"


def _journal_summary(store: Store, run_id: str, step: str) -> tuple[str, str]:
    attempts = [a for a in store.attempts(run_id) if a.step_id == step]
    if not attempts:
        return "-", "-"
    first, last = attempts[0], attempts[-1]
    classification = f"{first.state} ({first.decided_by})"
    decision = f"{last.state} by {last.decided_by}" + (f" after {len(attempts)} attempts" if len(attempts) > 1 else "")
    return classification, decision


def run_chaos(
    loaded: LoadedFlow,
    inputs: Mapping[str, Any],
    *,
    points: Sequence[str],
    rounds: int = 1,
    browser: BrowserSettings,
    steps: Sequence[str] | None = None,
    progress: Callable[[ChaosResult | VerifierCheck], None] | None = None,
    jobs: int = 1,
) -> ChaosReport:
    """Self-test every effect step's verifier in a clean run; then every effect step × every
    point × ``rounds``: crash, resume, check the outcome. ``jobs`` scenarios run at once (each
    is a run of its own, so the target must take that many runs at once); the report lists
    them in that order all the same, and ``progress`` hears each as it ends."""
    unknown = [p for p in points if p not in CHAOS_POINTS]
    if unknown:
        raise UsageError(f"unknown chaos point(s) {', '.join(unknown)} (known: {', '.join(CHAOS_POINTS)})")
    if jobs < 1:
        raise UsageError(f"jobs must be at least 1, not {jobs}")
    effects = [s for s in loaded.flow.steps if isinstance(s, Effect) and (not steps or s.id in steps)]
    if not effects:
        raise UsageError(f"flow {loaded.flow.name!r} has no effect steps to test")
    report = ChaosReport()
    with tempfile.TemporaryDirectory(prefix="browserworker-chaos-") as tmp:
        db = Path(tmp) / "chaos.db"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        sc = _Scenario(loaded, inputs, db, env)
        store = open_store(db)
        try:
            report.self_tests = asyncio.run(
                self_test_verifiers(store, loaded, inputs, effects, browser=browser, progress=progress)
            )
        finally:
            store.close()
        told = threading.Lock()  # progress hears one scenario at a time

        def scenario(effect: Effect, point: str, rnd: int) -> ChaosResult:
            result = _scenario(sc, effect, point, rnd, browser)
            if progress:
                with told:
                    progress(result)
            return result

        planned = [(e, p, r) for e in effects for p in points for r in range(1, rounds + 1)]
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="chaos") as pool:
            report.results = list(pool.map(lambda plan: scenario(*plan), planned))
    return report


def chaos_run_id(step_id: str, point: str, rnd: int) -> str:
    """The id of a scenario's run: letters, digits and hyphens only, as a flow may type its run id
    as a reference into a site that takes nothing else in one (a step id may hold a dot, and
    Django REST framework's detail routes take none)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", f"chaos-{step_id}-{point}-{rnd}-{uuid.uuid4().hex[:6]}")


def _scenario(sc: _Scenario, effect: Effect, point: str, rnd: int, browser: BrowserSettings) -> ChaosResult:
    """Crash ``effect`` at ``point``, resume the run to its end, and check the target."""
    started = time.monotonic()
    run_id = chaos_run_id(effect.id, point, rnd)
    try:
        fired = _crash(sc, effect.id, point, run_id)
        sc.run(run_id)  # resume to the end (a no-op if it already ended)
        hung = None
    except (_Hung, subprocess.TimeoutExpired) as exc:
        fired, hung = True, str(exc)
    store = open_store(sc.db)
    try:
        run = store.get_run(run_id)
        state = str(run.state) if run else "missing"
        classification, decision = _journal_summary(store, run_id, effect.id)
        landings, probe = asyncio.run(_probe(sc.loaded, store, run_id, effect, browser)) if run else (None, "none")
    finally:
        store.close()
    verdict = f"HUNG: {hung}" if hung else _verdict(fired, state, landings, effect)
    return ChaosResult(
        effect.id,
        point,
        rnd,
        run_id,
        fired,
        state,
        classification,
        decision,
        landings,
        probe,
        verdict,
        round(time.monotonic() - started, 1),
    )


UNPROVEN = "unproven: no verifier"  # nothing counted what landed, and nothing could prove it


def _verdict(fired: bool, state: str, landings: int | None, effect: Effect) -> str:
    """ok, DUPLICATE, LOST (a run or an effect that should have landed did not), or WRONG STATE."""
    if landings is not None and landings > 1:
        return "DUPLICATE"
    provable = effect.verifier is not None or effect.idempotent
    if state == RunState.SUCCEEDED:
        if landings == 0:
            return "LOST"
    elif state == RunState.NEEDS_REVIEW and not provable:
        pass  # without proof a person decides: at most once is the promise
    elif state in ("missing", RunState.QUEUED, RunState.LEASED, RunState.RUNNING):
        return "LOST"
    else:
        return f"WRONG STATE {state}"
    if not fired:
        return "not reached"
    return "ok" if provable or landings is not None else UNPROVEN
