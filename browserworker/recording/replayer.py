"""Replaying a recording offline: run the recorded flow against the replay router, optionally
crash it at a named point and resume it, and compare what happened with the recording.

``replay("recordings/place-order")`` re-runs the flow with the recorded run id and inputs
(secrets redacted), in a fresh journal, with every request answered from the recording.
It runs each effect's verifier self-test again and compares step outcomes, results and
self-tests with ``journal.json``.

``replay(..., crash_at="submit:after_dispatch")`` runs it in a child process that is
SIGKILLed at that point, then resumes the run in this process (verify before replay, all
offline), and returns the resumed run and its journal. Points are the fault points of
:mod:`browserworker._faults`. At ``reply_lost`` (the dispatch reached the recorded server,
which committed it, and the worker died before the reply came back) the replay router
kills the child itself as it serves the dispatch, so the recording's ledger says the
server committed it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from playwright.async_api import BrowserContext

from .. import _faults as faults
from .._redact import REDACTED, Redactor
from ..errors import BrowserworkerError, InputError, ReplayError, UsageError
from ..flow import Effect, Extensions, LoadedFlow, Step, StepContext, load_flow
from ..journal import LeaseSettings
from ..ops import journal_view
from ..runtime import BrowserSettings, Engine, SessionSettings, replay_seed
from ..states import RunState
from ..store import Store, open_store
from ..store.records import AttemptRecord, EventRecord, NewRun, RunRecord
from .files import Ledger, Recording, recording_path
from .recorder import TraceChunks, journal_data
from .router import ReplayProxy, ReplayRouter, tls_context
from .selftest import SelfTest, expected_after, run_verifier

__all__ = ["CRASH_POINTS", "ReplayResult", "parse_crash_at", "replay", "replay_async"]

CRASH_POINTS = faults.POINTS
REPLY_LOST = "reply_lost"  # one of them; a replay crashes there from its router (see _crash_child)
MAX_PASSES = 8
T = TypeVar("T")


def _line(text: Any) -> str:
    """The first line of an error (Playwright's errors carry call logs below it)."""
    return str(text).strip().splitlines()[0] if text else ""


_EXIT = {RunState.SUCCEEDED: 0, RunState.FAILED: 1, RunState.NEEDS_REVIEW: 3, RunState.CANCELLED: 4}


class ReplayStopped(BrowserworkerError):
    """The replay stopped the run: it tried a duplicate dispatch, or kept starting new passes."""


@dataclass
class ReplayResult:
    """What a replay did: the run, its journal, and how it compares with the recording."""

    recording: Path
    run: RunRecord
    attempts: list[AttemptRecord]
    events: list[EventRecord]
    journal: dict[str, Any]
    mismatches: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    served: list[tuple[str, str]] = field(default_factory=list)
    self_tests: list[SelfTest] = field(default_factory=list)
    dispatches: dict[str, int] = field(default_factory=dict)  # per effect: answered, crash and resume together
    blocked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    crash_at: str | None = None
    crash_exit: int | None = None
    duration: float = 0.0
    workdir: Path | None = None

    @property
    def state(self) -> RunState:
        return self.run.state

    @property
    def ok(self) -> bool:
        """No mismatch with the recording and no request the recording could not answer."""
        return not self.mismatches and not self.refusals

    @property
    def exit_code(self) -> int:
        """For ``browserworker replay``: 0/1 for a comparison; the run's exit code for a crash replay."""
        if self.crash_at is None:
            return 0 if self.ok else 1
        return _EXIT.get(self.run.state, 5)

    def attempts_of(self, step_id: str) -> list[AttemptRecord]:
        return [a for a in self.attempts if a.step_id == step_id]

    def result_of(self, step_id: str) -> Any:
        """The result of the step's last SUCCEEDED attempt (None if it has none)."""
        done = [a for a in self.attempts_of(step_id) if a.state == "SUCCEEDED"]
        return done[-1].result if done else None

    def decisions(self) -> list[str]:
        return [e.decision for e in self.events if e.kind == "decision" and e.decision]

    def served_count(self, method: str, path_end: str) -> int:
        """How many answers this process's router gave to ``METHOD ...path_end`` (repeats included;
        for a crash replay only the resume's; see ``dispatches`` for both)."""
        return sum(
            1
            for shown, entry in self.served
            if entry != "refused" and shown.startswith(method + " ") and shown.split("?")[0].endswith(path_end)
        )

    def report(self) -> str:
        """A readable account: the outcome per step and every difference from the recording."""
        head = f"replay of {self.recording}" + (f" (crashed at {self.crash_at}, resumed)" if self.crash_at else "")
        lines = [f"{head}: run {self.run.id} {self.run.state} in {self.duration:.1f}s"]
        lines += [f"  note: {n}" for n in self.notes]
        for a in self.attempts:
            detail = f" -> {a.result}" if a.result is not None else (f": {_line(a.error)}" if a.error else "")
            lines.append(f"  {a.step_id} #{a.attempt_no} {a.kind} {a.state} by {a.decided_by or '-'}{detail}")
        for t in self.self_tests:
            lines.append(f"  {t.step}: {t.describe()}")
        if self.crash_at is None:
            if self.ok:
                lines.append("matches the recording")
            else:
                lines.append(f"DIFFERS from the recording ({len(self.mismatches) + len(self.refusals)}):")
        for m in self.mismatches:
            lines.append(f"  - {m}")
        for r in self.refusals:
            lines.append("  - " + r.replace("\n", "\n    "))
        return "\n".join(lines)


def parse_crash_at(spec: str, steps: list[Step]) -> tuple[str, str]:
    """``STEP:POINT`` (or ``POINT:STEP``) → ``(step, point)``; UsageError names what is wrong."""
    a, sep, b = spec.partition(":")
    if not sep:
        raise UsageError(f"crash point {spec!r} must look like STEP:POINT, e.g. submit:after_dispatch")
    step, point = (a, b) if b in CRASH_POINTS else (b, a)
    if point not in CRASH_POINTS:
        raise UsageError(f"unknown crash point {b!r} (known: {', '.join(CRASH_POINTS)})")
    effects = [s.id for s in steps if isinstance(s, Effect)]
    if step not in effects:
        raise UsageError(f"crash point {spec!r}: {step!r} is not an effect of the flow (effects: {', '.join(effects)})")
    return step, point


# -- what the replay observes -----------------------------------------------------------------------


class _Observer:
    """Per replayed context: the router; per step: verifier self-tests, trace chunks, evidence."""

    def __init__(
        self, router: ReplayRouter, *, self_test: bool, traces: TraceChunks | None, screenshots: Path | None
    ) -> None:
        self.router = router
        self.self_test = self_test
        self.traces = traces
        self.screenshots = screenshots
        self.tests: list[SelfTest] = []
        self.stopped: str | None = None
        self._pass = 0

    def _check(self) -> None:
        if self.router.duplicate is not None:
            raise ReplayStopped(
                f"stopped the run: it sent a dispatch the recording had already answered "
                f"({self.router.duplicate}); a live run would have placed a duplicate"
            )
        if self._pass > MAX_PASSES:
            raise ReplayStopped(
                f"stopped the run after {MAX_PASSES} passes: it keeps retrying (the recording "
                "cannot answer what it sends)"
            )

    async def context_created(self, context: BrowserContext) -> None:
        self._pass += 1
        self._check()
        await self.router.install(context)
        if self.traces is not None:
            await self.traces.start(context, f"replay pass {self._pass}")

    async def _ask(
        self, ctx: StepContext[Any], step: Effect, context: BrowserContext, phase: str, expected: str | None
    ) -> None:
        with self.router.verifying(step.id, context.pages):
            verdict = await run_verifier(step, ctx, context)
        self.tests.append(
            SelfTest(
                step=step.id,
                attempt=ctx.attempt_no,
                phase=phase,
                said=verdict.kind,
                expected=expected,
                reason=verdict.reason,
            )
        )

    async def before_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext) -> None:
        self._check()
        self.router.step = step.id
        if self.self_test and isinstance(step, Effect) and step.verifier is not None:
            await self._ask(ctx, step, context, "before", "not_done")

    async def after_step(
        self, ctx: StepContext[Any], step: Step, context: BrowserContext, attempt: AttemptRecord | None
    ) -> None:
        name = f"{self._pass}-{step.id}-{ctx.attempt_no}"
        if self.traces is not None:
            await self.traces.cut(context, name)
        if self.screenshots is not None and (attempt is None or attempt.state != "SUCCEEDED"):
            try:
                self.screenshots.mkdir(parents=True, exist_ok=True)
                await ctx.page.screenshot(path=str(self.screenshots / f"{name}.png"), timeout=5000)
            except Exception:  # evidence is best effort
                pass
        if self.self_test and isinstance(step, Effect) and step.verifier is not None and attempt is not None:
            await self._ask(ctx, step, context, "after", expected_after(attempt))


# -- comparing with the recording ------------------------------------------------------------------------

_COMPARED = ("kind", "state", "decided_by", "request_key", "dispatched", "result", "fingerprint")


def compare(
    recorded: Mapping[str, Any],
    replayed: Mapping[str, Any],
    recorded_tests: list[dict[str, Any]],
    replayed_tests: list[SelfTest],
) -> list[str]:
    """Differences between two ``journal.json`` shapes (and the verifier self-tests), one line each."""
    out: list[str] = []
    r_run, p_run = recorded.get("run", {}), replayed.get("run", {})
    if r_run.get("state") != p_run.get("state"):
        out.append(
            f"run state: recorded {r_run.get('state')}, replayed {p_run.get('state')}"
            + (f" ({_line(p_run.get('error'))})" if p_run.get("error") else "")
        )
    rec = {(a["step_id"], a["attempt_no"]): a for a in recorded.get("attempts", [])}
    rep = {(a["step_id"], a["attempt_no"]): a for a in replayed.get("attempts", [])}
    order = list(dict.fromkeys([*rec, *rep]))
    for key in order:
        name = f"{key[0]} #{key[1]}"
        if key not in rep:
            a = rec[key]
            out.append(f"{name}: recorded {a['state']} by {a['decided_by']}, missing in the replay")
            continue
        if key not in rec:
            a = rep[key]
            out.append(
                f"{name}: not in the recording, replayed {a['state']} by {a['decided_by']}"
                + (f" ({_line(a['error'])})" if a.get("error") else "")
            )
            continue
        a, b = rec[key], rep[key]
        for col in _COMPARED:
            if col == "fingerprint" and REDACTED in (a.get(col), b.get(col)):
                continue
            if a.get(col) != b.get(col):
                extra = f" ({_line(b['error'])})" if col == "state" and b.get("error") else ""
                out.append(f"{name} {col}: recorded {a.get(col)!r}, replayed {b.get(col)!r}{extra}")
    said = {(t["step"], t["attempt"], t["phase"]): t["said"] for t in recorded_tests}
    for t in replayed_tests:
        before = said.get((t.step, t.attempt, t.phase))
        if before is not None and before != t.said:
            out.append(f"{t.step} #{t.attempt} verifier self-test {t.phase}: recorded {before}, replayed {t.said}")
        elif not t.ok:
            out.append(f"{t.step} #{t.attempt} {t.describe()}")
    return out


# -- running ------------------------------------------------------------------------------------------


def _settings(browser: BrowserSettings | None, proxy: str, https: bool) -> BrowserSettings:
    base = browser or BrowserSettings.discover()
    options = {**base.context_options, "proxy": {"server": proxy}}
    if https:  # the proxy's own certificate, for HTTPS redirect hops
        options["ignore_https_errors"] = True
    return dataclasses.replace(base, context_options=options)


def _load(recording: Recording, flow: str | os.PathLike[str] | None, settle: float | None) -> LoadedFlow:
    path = Path(flow) if flow is not None else recording.flow_path
    if not path.is_file():
        raise UsageError(f"{recording.root}: its flow file {path} is missing (pass the flow's path)")
    loaded = load_flow(path, recording.meta["flow"]["name"])
    if settle is not None:
        for step in loaded.flow.steps:
            if isinstance(step, Effect):
                step.settle = float(settle)
    return loaded


def _create_run(store: Store, recording: Recording, loaded: LoadedFlow, inputs: Mapping[str, Any] | None) -> RunRecord:
    data = {**recording.meta["inputs"], **(inputs or {})}
    try:
        validated = loaded.flow.validate_inputs(data)
    except InputError as exc:
        redacted = [k for k, v in recording.meta["inputs"].items() if v == REDACTED]
        raise UsageError(
            f"{exc}; the recording redacted {', '.join(redacted) or 'no inputs'}: pass "
            "inputs={...} with stand-in values"
        ) from None
    # a run that started from a saved login session replays from one (the recorded answers decide its check)
    replay_seed(
        store,
        loaded.flow,
        validated,
        [d["decision"] for d in recording.journal.get("decisions", []) if d.get("decision")],
        SessionSettings.from_env(),
    )
    return store.create_run(
        NewRun(
            id=recording.meta["run_id"],
            flow_name=loaded.flow.name,
            inputs=loaded.flow.dump_inputs(validated),
            flow_path=str(loaded.path),
            flow_hash=loaded.file_hash,
            secret_fields=tuple(loaded.flow.secret_fields()),
        )
    )


async def _crash_child(config: dict[str, Any], workdir: Path, step: str, point: str) -> tuple[int, str]:
    """Run the replay in a child process that is SIGKILLed at ``step:point``; its exit code and stderr."""
    cfg = workdir / "crash.json"
    cfg.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    if point != REPLY_LOST:  # reply_lost: the router kills the child as it serves the dispatch
        env[faults.ENV] = f"{point}:{step}=kill"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "browserworker.recording._child",
        str(cfg),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    _, err = await proc.communicate()
    return proc.returncode if proc.returncode is not None else 0, err.decode(errors="replace")


async def replay_pass(
    recording: Recording,
    loaded: LoadedFlow,
    store: Store,
    run: RunRecord,
    *,
    ledger: Ledger,
    browser: BrowserSettings | None,
    extensions: Sequence[object] = (),
    self_test: bool,
    workdir: Path,
    crash_on_dispatch: str | None = None,
    trace_dir: Path | None = None,
) -> tuple[RunRecord, ReplayRouter, _Observer]:
    """Run (or resume) ``run`` against the recording until it ends; nothing leaves the machine."""
    redactor = Redactor.from_names(recording.meta.get("secret_fields") or [])
    others = Extensions(extensions)

    def notify(message: str) -> None:
        others.later.notice(run, None, message)

    router = ReplayRouter(recording, ledger, redactor, crash_on_dispatch=crash_on_dispatch, notify=notify)
    https_hosts = sorted({urlsplit(e.url).hostname or "" for e in router.entries if e.url.startswith("https://")})
    tls = await asyncio.to_thread(tls_context, https_hosts, workdir) if https_hosts else None
    proxy = ReplayProxy(router, tls)
    settings = _settings(browser, await proxy.start(), tls is not None)
    observer = _Observer(
        router,
        self_test=self_test,
        traces=TraceChunks(trace_dir / "traces") if trace_dir else None,
        screenshots=trace_dir / "screenshots" if trace_dir else None,
    )
    try:
        final = await Engine(store, browser=settings, lease=LeaseSettings(), extensions=[*extensions, observer]).run(
            loaded, run
        )
    except ReplayStopped as exc:
        observer.stopped = str(exc)
        await others.notice(run, None, str(exc))
        final = store.get_run(run.id) or run
    finally:
        await proxy.stop()
    return final, router, observer


def _notes(rec: Recording, loaded: LoadedFlow) -> list[str]:
    """What a reader of the replay's result should know about the recording it used."""
    notes = []
    if loaded.file_hash != rec.meta["flow"].get("hash"):
        notes.append(f"the flow file {loaded.path.name} changed since this recording was made")
    if rec.meta.get("status") != "complete":
        notes.append(f"the recording is {rec.meta.get('status')!r}, not complete")
    return notes


async def _crash_first(crash_at: str, loaded: LoadedFlow, config: dict[str, Any], work: Path) -> int:
    """Run the replay in a child SIGKILLed at ``crash_at`` (``STEP:POINT``); its exit code (-9)."""
    step, point = parse_crash_at(crash_at, list(loaded.flow.steps))
    config["crash_on_dispatch"] = step if point == REPLY_LOST else None
    crash_exit, err = await _crash_child(config, work, step, point)
    if crash_exit != -9:
        tail = "\n".join(err.strip().splitlines()[-15:])
        raise ReplayError(
            f"crash point {crash_at} was never reached (the replay exited with {crash_exit}); its output:\n{tail}"
        )
    return crash_exit


async def replay_async(
    recording: str | os.PathLike[str],
    *,
    crash_at: str | None = None,
    settle: float | None = None,
    inputs: Mapping[str, Any] | None = None,
    flow: str | os.PathLike[str] | None = None,
    browser: BrowserSettings | None = None,
    extensions: Sequence[object] = (),
    workdir: Path | None = None,
    trace_dir: Path | None = None,
) -> ReplayResult:
    """Replay a recording offline; see the module docstring. ``settle`` overrides every effect's
    settle time, ``inputs`` stand in for inputs, ``trace_dir`` keeps a trace per step."""
    started = time.monotonic()
    rec = Recording.load(recording_path(recording))
    loaded = _load(rec, flow, settle)
    notes = _notes(rec, loaded)
    own_dir = workdir is None
    work = Path(tempfile.mkdtemp(prefix="browserworker-replay-")) if workdir is None else workdir
    work.mkdir(parents=True, exist_ok=True)
    store = open_store(work / "replay.db")
    try:
        run = _create_run(store, rec, loaded, inputs)
        ledger_path = work / "ledger.jsonl"
        crash_exit = None
        if crash_at is not None:
            run, crash_exit = await _crash_then_resume(
                crash_at, rec, loaded, store, run, work, settle=settle, inputs=inputs, browser=browser
            )
            Extensions(extensions).later.notice(run, None, f"replay crashed (SIGKILL) at {crash_at}; resuming")
        final, router, observer = await replay_pass(
            rec,
            loaded,
            store,
            run,
            ledger=Ledger(ledger_path),
            browser=browser,
            extensions=extensions,
            self_test=crash_at is None,
            workdir=work,
            trace_dir=trace_dir,
        )
        mismatches = [] if crash_at else _mismatches(rec, store, final, observer.tests)
        if observer.stopped:
            mismatches.append(observer.stopped)
        return ReplayResult(
            recording=rec.root,
            run=final,
            attempts=store.attempts(final.id),
            events=store.events(final.id),
            journal=journal_view(store, final),
            mismatches=mismatches,
            refusals=list(router.refusals),
            served=list(router.served),
            self_tests=observer.tests,
            blocked=list(router.blocked),
            dispatches={s.id: router.dispatches_served(s.id) for s in loaded.flow.steps if isinstance(s, Effect)},
            notes=notes + router.stood_in,
            crash_at=crash_at,
            crash_exit=crash_exit,
            duration=time.monotonic() - started,
            workdir=None if own_dir else work,
        )
    finally:
        store.close()
        if own_dir:
            shutil.rmtree(work, ignore_errors=True)


def _mismatches(rec: Recording, store: Store, final: RunRecord, tests: list[SelfTest]) -> list[str]:
    """How the replayed journal differs from the recorded one (secrets redacted alike)."""
    redactor = Redactor.from_names(rec.meta.get("secret_fields") or [])
    replayed = journal_data(store, final.id, redactor)
    return compare(rec.journal, replayed, rec.meta.get("verifiers") or [], tests)


async def _crash_then_resume(
    crash_at: str,
    rec: Recording,
    loaded: LoadedFlow,
    store: Store,
    run: RunRecord,
    work: Path,
    *,
    settle: float | None,
    inputs: Mapping[str, Any] | None,
    browser: BrowserSettings | None,
) -> tuple[RunRecord, int | None]:
    """The first pass of a crash replay, in a child process SIGKILLed at ``crash_at``: the run as
    the crash left it, and the child's exit code."""
    config = {
        "recording": str(rec.root.resolve()),
        "flow": str(loaded.path),
        "db": str(work / "replay.db"),
        "ledger": str(work / "ledger.jsonl"),
        "run_id": run.id,
        "settle": settle,
        "inputs": dict(inputs or {}),
        "browser": dataclasses.asdict(browser or BrowserSettings.discover()),
    }
    crash_exit = await _crash_first(crash_at, loaded, config, work)
    return store.get_run(run.id) or run, crash_exit


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` here, or in a thread when this thread already runs a loop (e.g. under pytest-playwright)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="browserworker-replay")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def replay(recording: str | os.PathLike[str], **options: Any) -> ReplayResult:
    """Synchronous :func:`replay_async` (for tests and the CLI)."""
    return run_sync(replay_async(recording, **options))
