"""Recording a run: the network per step, the journal, and a verifier self-test per effect.

:class:`Recorder` is an :class:`~browserworker.flow._extensions.Extension`: it prepares every
context, captures around every step, and hears ``dispatched`` to mark which requests passed
the dispatch gate. Network
capture uses Playwright's ``context.tracing.start_har`` / ``stop_har``, one HAR per
segment: a step, a verifier self-test, or the time between steps (where a recovery's
verifier runs). Each segment is redacted and written when it ends, so a crash keeps
every finished one; the raw HAR lives in a private temp directory only until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import tempfile
import time
import zipfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.async_api import APIResponse, BrowserContext, Request, Response
from pydantic import BaseModel

from .._redact import REDACTED, Redactor
from ..errors import InputError, RunNotFound, UsageError
from ..flow import Effect, Extension, Extensions, Flow, LoadedFlow, Step, StepContext, secret_values
from ..gate import ApiCall, observe_api
from ..logs import get_logger
from ..states import RunState
from ..store.base import Store
from ..store.records import AttemptRecord, RunRecord
from .files import FORMAT, NO_SOCKETS, RecordingWriter, Segment, api_har_entry, recording_path, write_json
from .selftest import SelfTest, expected_after, run_verifier

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime import BrowserProcess, Engine

__all__ = ["RecordedRun", "Recorder", "TraceChunks", "journal_data", "record", "redact_trace"]

log = get_logger("browserworker.recording")

_DETECT_SECRET_FIELDS = """
(() => {
  const report = () => {
    try {
      const names = Array.from(document.querySelectorAll('input[type=password]'))
        .map(e => e.name || e.id).filter(Boolean);
      if (names.length && typeof window.__browserworkerSecretFields === 'function')
        window.__browserworkerSecretFields(names);
    } catch (e) {}
  };
  if (document.readyState !== 'loading') report();
  document.addEventListener('DOMContentLoaded', report);
  document.addEventListener('focusin', report, true);
  document.addEventListener('submit', report, true);
})();
"""


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # pragma: no cover
        return None


# -- traces -----------------------------------------------------------------------------

_TEXT_SUFFIXES = (".trace", ".network", ".stacks", ".json", ".html", ".txt", ".css", ".js")


_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{8,}")


def stored_tokens(value: str) -> list[str]:
    """What of a page's stored (``localStorage``) value may be a secret: the value, or each string
    in it where it is JSON, that looks like a token (letters, digits and ``._~+/=-``, no path,
    drawn at random: :func:`_random`). A page also stores its own state there (Wagtail keeps its icons' SVG and their
    address, ``/admin/sprite/?h=...``): scrubbed as secrets, those emptied the recorded answers and
    addresses they showed in, and the replay matched nothing."""
    try:
        data = json.loads(value)
    except ValueError:
        data = value
    leaves: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            leaves.append(node)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    return [v for v in leaves if _TOKEN.fullmatch(v) and not v.startswith("/") and _random(v)]


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _random(value: str) -> bool:
    """Whether a stored string looks drawn at random, as a token is: 12 or more characters with
    letters and digits (not a date), or 20 or more letters of both cases. A page's own state does
    not: a word (``markdown``), a type's name (``gradio.FileData``), a media type (``text/plain``),
    a file's name (``invoice.txt``), a number: Gradio keeps all of those beside what was typed."""
    letters, digits = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    if letters and digits:
        return len(value) >= 12 and not _DATE.match(value)
    return letters and len(value) >= 20 and not value.islower() and not value[1:].islower()


def redact_trace(path: Path, redactor: Redactor) -> None:
    """Rewrite a Playwright trace zip with headers, cookies, secret fields and secret values redacted.

    Traces are for looking at, never matched, so every secret value of 3+ characters is
    scrubbed here (even one that equals a public input)."""
    values = sorted({v for v in redactor.values + redactor.trace_values if len(v) >= 3}, key=len, reverse=True)
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is not None and (info.filename.endswith(_TEXT_SUFFIXES) or "resources/" in info.filename):
                lines = [_redact_trace_line(line, redactor) for line in text.split("\n")]
                data = redactor.scrub("\n".join(lines), values).encode()
            dst.writestr(info, data)
    os.replace(tmp, path)


_COOKIE_KEYS = frozenset({"domain", "path", "expires", "httpOnly", "secure", "sameSite"})


def _redact_trace_value(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, dict):
        if isinstance(value.get("name"), str) and isinstance(value.get("value"), str):
            if _COOKIE_KEYS & value.keys():  # a cookie
                return {**value, "value": REDACTED}
            return {**value, "value": redactor.header(value["name"], value["value"])}  # a header or a field
        return {
            k: (REDACTED if redactor.is_secret(str(k)) and v is not None else _redact_trace_value(v, redactor))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact_trace_value(v, redactor) for v in value]
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return redactor.url(value)
    return value


def _redact_trace_line(line: str, redactor: Redactor) -> str:
    if not line.startswith("{"):
        return line
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    snap = obj.get("snapshot") if isinstance(obj, dict) else None
    if isinstance(snap, dict) and "request" in snap:  # a network entry: the HAR rules
        snap["request"] = redactor.har_request(snap["request"])
        if "response" in snap:
            snap["response"] = redactor.har_response(snap["response"])
    return json.dumps(_redact_trace_value(obj, redactor), ensure_ascii=False)


class TraceChunks:
    """A Playwright trace (screenshots + DOM snapshots) cut into one zip per step."""

    def __init__(self, directory: Path, redactor: Redactor | None = None) -> None:
        self.directory = directory
        self.redactor = redactor
        self.files: list[Path] = []

    async def start(self, context: BrowserContext, title: str) -> None:
        await context.tracing.start(screenshots=True, snapshots=True, title=title)

    async def cut(self, context: BrowserContext, name: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{name}.zip"
        try:
            await context.tracing.stop_chunk(path=path)
            await context.tracing.start_chunk()
        except Exception as exc:  # a trace is an aid, never a reason to fail a run
            log.warning("trace chunk not saved", path=str(path), error=str(exc))
            return
        if self.redactor is not None:
            redact_trace(path, self.redactor)
        self.files.append(path)


# -- the journal ------------------------------------------------------------------------


def _local(value: Any) -> Any:
    """Evidence without local file paths (review screenshots stay beside the database, not in recordings)."""
    if isinstance(value, dict):
        return {k: _local(v) for k, v in value.items() if k != "screenshot"}
    if isinstance(value, list):
        return [_local(v) for v in value]
    return value


def journal_data(
    store: Store, run_id: str, redactor: Redactor, fingerprints: Callable[[str], str] = lambda fp: fp
) -> dict[str, Any]:
    """The run, its attempts and its decisions as redacted JSON data (``journal.json``);
    :class:`~browserworker.errors.RunNotFound` for an unknown run."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id!r}")
    attempts = []
    for a in store.attempts(run_id):
        attempts.append(
            {
                "step_id": a.step_id,
                "attempt_no": a.attempt_no,
                "kind": a.kind,
                "state": str(a.state),
                "decided_by": a.decided_by,
                "request_key": a.request_key,
                "fingerprint": fingerprints(a.request_fingerprint),
                "dispatched": a.dispatched_at is not None,
                "result": a.result,
                "error": a.error,
                "evidence": _local(a.evidence),
            }
        )
    decisions = [
        {
            "kind": e.kind,
            "step_id": e.step_id,
            "attempt_no": e.attempt_no,
            "from_state": e.from_state,
            "to_state": e.to_state,
            "decision": e.decision,
            "detail": _local(e.detail),
        }
        for e in store.events(run_id)
        if e.decision or e.to_state
    ]
    data = {
        "run": {
            "id": run.id,
            "flow_name": run.flow_name,
            "state": str(run.state),
            "error": run.error,
            "inputs": {k: (REDACTED if k in run.secret_fields else v) for k, v in run.inputs.items()},
        },
        "attempts": attempts,
        "decisions": decisions,
    }
    redacted: dict[str, Any] = redactor.json_data(data)
    return redacted


# -- requests a segment's end would cut ------------------------------------------------------

SEGMENT_SETTLE = 2.0
"""Seconds a segment's end waits for the requests still on their way (see :class:`InFlight`)."""

_STREAMS = ("text/event-stream", "application/x-ndjson")


class InFlight:
    """The requests of a context that have not finished: a segment whose HAR is stopped while one
    is on its way keeps it with no response (status -1), and its answer lands in no segment, so a
    replay could only fail it. A page that builds itself after its load (a single-page app's
    modules, its configuration) is still loading when the step that opened it returns.

    :meth:`settled` waits until none is left but a stream (a response that never ends: server-sent
    events), at most :data:`SEGMENT_SETTLE` seconds."""

    def __init__(self, context: BrowserContext) -> None:
        self.pending: set[Request] = set()
        self.streams: set[Request] = set()
        self._changed = asyncio.Event()
        context.on("request", self._began)
        context.on("response", self._answered)
        context.on("requestfinished", self._ended)
        context.on("requestfailed", self._ended)
        context.on("close", self._closed)

    def _closed(self, _: BrowserContext) -> None:
        self.pending.clear()
        self._changed.set()

    def _began(self, request: Request) -> None:
        self.pending.add(request)

    def _answered(self, response: Response) -> None:
        kind = (response.headers.get("content-type") or "").split(";")[0].strip().lower()
        if kind in _STREAMS:
            self.streams.add(response.request)
            self._changed.set()

    def _ended(self, request: Request) -> None:
        self.pending.discard(request)
        self.streams.discard(request)
        self._changed.set()

    async def settled(self, flush: Callable[[], Awaitable[object]], timeout: float = SEGMENT_SETTLE) -> bool:
        """True once nothing but streams is on its way; False if ``timeout`` passed first.

        Playwright's driver tells of a request a moment after it sees it: ``flush`` (a round trip
        to the driver) makes every request it has seen known here before each look."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self._changed.clear()
            with contextlib.suppress(Exception):  # the context may be closing
                async with asyncio.timeout(max(deadline - loop.time(), 0.01)):  # (wait_for may swallow a cancel)
                    await flush()
            if not self.pending - self.streams:
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._changed.wait()


# -- a segment's HAR ------------------------------------------------------------------------


@dataclass
class _Open:
    """A segment being recorded: its HAR recorder, what passed its gate, its API calls."""

    seg: Segment
    raw: Path
    har: str | None  # the driver's id of its HAR recorder; None: Playwright's public one
    began: float  # time.time() once it records
    dispatched: list[tuple[str, str]] = field(default_factory=list)
    api: list[dict[str, Any]] = field(default_factory=list)
    counted: bool = False  # its dispatches added to its step's count


async def _begin_har(context: BrowserContext, raw: Path) -> str | None:
    """Start recording ``context``'s requests into ``raw``; returns the recorder's id. Playwright's
    public ``start_har`` allows one recorder at a time, and the next could only begin once the
    last had been exported; its driver keeps several, which its client's ``_record_into_har``
    starts (used where it is there; else the public one: None)."""
    start = getattr(getattr(context.tracing, "_impl_obj", None), "_record_into_har", None)
    if start is not None:
        try:
            return str(await start(har=raw, page=None, url=None, update_content="embed", update_mode="full"))
        except Exception as exc:  # another Playwright's signature, say: its one public recorder then
            log.debug("a second HAR recorder could not be started", error=str(exc))
    await context.tracing.start_har(raw, content="embed", mode="full")
    return None


async def _end_har(context: BrowserContext, har: str | None) -> None:
    if har is None:
        await context.tracing.stop_har()
    else:
        await context.tracing._impl_obj._export_har(har)


def _entry_key(entry: dict[str, Any]) -> tuple[str, str, str]:
    request = entry.get("request", {})
    return (str(request.get("method")), str(request.get("url")), str(entry.get("startedDateTime")))


def _began(entry: dict[str, Any]) -> float:
    try:
        return datetime.fromisoformat(str(entry.get("startedDateTime")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


# -- the recorder ---------------------------------------------------------------------------


class Recorder(Extension):
    """Records one run into a recording directory (see the module docstring)."""

    def __init__(
        self,
        writer: RecordingWriter,
        flow: Flow[Any],
        run: RunRecord,
        store: Store,
        *,
        name: str,
        flow_file: Path,
        flow_hash: str,
        trace: bool = False,
        notify: Extensions | None = None,
    ) -> None:
        self.writer = writer
        self.root = writer.root
        self.redactor = writer.redactor
        self.flow = flow
        self.run = run
        self.store = store
        self.name = name
        self.flow_file = flow_file
        self.flow_hash = flow_hash
        self.notify = notify or Extensions()
        self.traces = TraceChunks(self.root / "trace", self.redactor) if trace else None
        self._tmp = Path(tempfile.mkdtemp(prefix="browserworker-har-"))
        self._seq = 0
        self._pass = 0
        self._current: _Open | None = None  # the segment recording now
        self._ending: _Open | None = None  # the one before it, recording on until the next begins
        self._answered: set[tuple[str, str, str]] = set()  # the requests the last written segment answered
        self._in_flight: InFlight | None = None  # the open context's requests on their way
        self.unreplayable: list[str] = []  # calls a replay cannot answer, said at record time
        self._dispatch_counts: dict[str, int] = {}
        self.self_tests: list[SelfTest] = []
        self.password_fields: set[str] = set()
        self._fingerprints: dict[str, str] = {}
        self._started = time.time()
        self._browser_version: str | None = None
        self._replay_inputs = self._redacted_inputs_model()

    # -- fingerprints: what a replay (with redacted inputs) will compute -----------------

    def _redacted_inputs_model(self) -> BaseModel | None:
        secret = self.flow.secret_fields()
        redacted = {k: (REDACTED if k in secret else v) for k, v in self.run.inputs.items()}
        if redacted == self.run.inputs:
            return None
        try:
            return self.flow.validate_inputs(redacted)
        except InputError:
            return None

    def _fingerprint(self, fp: str) -> str:
        if self._replay_inputs is None:
            return fp
        return self._fingerprints.get(fp, REDACTED)

    # -- segments ---------------------------------------------------------------------------

    async def _start(
        self, context: BrowserContext, phase: str, step: Step | None = None, attempt: int | None = None
    ) -> None:
        """Begin a segment. The one that ended before it records on until this one has begun, so
        that no request falls between the two (exporting a HAR takes a while, and a page that
        builds itself after its load asks for dozens of modules meanwhile)."""
        self._seq += 1
        seg = Segment(
            number=self._seq,
            phase=phase,
            step=step.id if step else None,
            kind=step.kind if step else None,
            attempt=attempt,
            pass_no=self._pass,
            dispatches=self._dispatch_counts.get(step.id, 0) if step else 0,
        )
        raw = self._tmp / f"{self._seq:04d}.har"
        ending, self._ending = self._ending, None
        if ending is not None and ending.har is None:  # Playwright's one recorder: stopped first
            await self._end(context, ending)
            ending = None
        self._current = _Open(seg, raw, await _begin_har(context, raw), time.time())
        if ending is not None:
            await self._end(context, ending, cut=self._current.began)

    async def _stop(self, context: BrowserContext) -> None:
        """End the open segment: once the requests on their way have their answers (a request cut
        off would keep none). It records on until the next one begins (:meth:`_start`)."""
        if self._current is None:
            return
        if self._in_flight is not None:
            await self._in_flight.settled(context.cookies)
        self._count(self._current)  # the next segment of its step (its verifier's) starts from it
        self._ending, self._current = self._current, None

    def _count(self, segment: _Open) -> None:
        """Add what passed the gate in ``segment``'s step to its count (once)."""
        if segment.counted:
            return
        segment.counted = True
        if segment.seg.phase == "step" and segment.seg.step:
            step = segment.seg.step
            self._dispatch_counts[step] = self._dispatch_counts.get(step, 0) + len(segment.dispatched)

    async def _end(self, context: BrowserContext, segment: _Open, cut: float | None = None) -> None:
        try:
            await _end_har(context, segment.har)
        except Exception as exc:  # the context may be gone; keep what Playwright exported, if anything
            log.warning("HAR segment not stopped cleanly", segment=segment.seg.number, error=str(exc))
        self._write(segment, cut)

    def _write(self, segment: _Open, cut: float | None = None) -> None:
        """Write ``segment``. Of the requests two segments both recorded (those made while one had
        ended and the next was beginning), each is kept once: in the earlier if it was answered
        there, else (begun after ``cut``, the next one's start) in the next."""
        seg, raw, dispatched, api = segment.seg, segment.raw, segment.dispatched, segment.api
        self._count(segment)
        har: dict[str, Any] = {"log": {"version": "1.2", "entries": []}}
        if raw.exists():
            try:
                har = json.loads(raw.read_text())
            finally:
                raw.unlink(missing_ok=True)
        entries = har.setdefault("log", {}).setdefault("entries", [])
        seen, self._answered = self._answered, set()
        kept = []
        for entry in entries:
            key = _entry_key(entry)
            if key in seen:  # the segment before kept it, answered
                continue
            unanswered = int(entry.get("response", {}).get("status") or 0) <= 0
            if unanswered and cut is not None and _began(entry) >= cut:  # the next segment has it
                continue
            if not unanswered:
                self._answered.add(key)
            kept.append(entry)
        entries[:] = kept
        if api:  # the API calls (Playwright's HAR has none of them), after the browser's requests
            entries.extend(api)
        for entry in entries:
            url = str(entry.get("request", {}).get("url", ""))
            if url.lower().startswith(("ws:", "wss:")):
                self._cannot_replay(f"{self.redactor.url(url)}: a WebSocket; {NO_SOCKETS}; replays refuse it")
        self.writer.write_segment(seg, har, dispatched)

    async def _api_call(self, call: ApiCall, response: APIResponse | None, error: str | None) -> None:
        """Keep a ``page.request`` call in the open segment, as a HAR entry a replay answers."""
        if call.multipart:
            why = (
                f"{call.method} {self.redactor.url(call.url)}: a page.request call with multipart= cannot be "
                "replayed (its body's boundary differs on every call); replays refuse it"
            )
            self._cannot_replay(why)
            return
        segment = self._current or self._ending
        if segment is not None:
            segment.api.append(await api_har_entry(call, response, error))

    def _cannot_replay(self, why: str) -> None:
        """Say once, as it is recorded, what a replay will refuse."""
        if why not in self.unreplayable:
            self.unreplayable.append(why)
            self.notify.later.notice(self.run, None, f"recording: {why}")

    def _flush_closed(self) -> None:
        """The segments still recording when their context closed: Playwright exported them at the close."""
        for segment in (self._ending, self._current):
            if segment is not None:
                self._write(segment)
        self._ending = self._current = None
        self._answered = set()

    # -- the extension: context set-up, capture around steps ------------------------------------

    async def context_created(self, context: BrowserContext) -> None:
        self._flush_closed()
        self._pass += 1
        if self._browser_version is None and context.browser is not None:
            self._browser_version = context.browser.version
        observe_api(context, self._api_call)
        self._in_flight = InFlight(context)
        await context.expose_binding("__browserworkerSecretFields", self._secret_fields)
        await context.add_init_script(_DETECT_SECRET_FIELDS)
        await self._learn_storage(context)  # a context made from a saved login session starts with its cookies
        if self.traces is not None:
            await self.traces.start(context, f"{self.name} pass {self._pass}")
        await self._start(context, "between")

    async def _learn_storage(self, context: BrowserContext) -> None:
        """The context's cookie values and stored values are secrets: scrubbed wherever they show."""
        try:
            state = await context.storage_state()
        except Exception:  # the context may be closing; its cookies were learnt at the last step
            return
        found = [str(c.get("value") or "") for c in state.get("cookies", [])]
        found += [  # a page may store what was typed (Gradio keeps a history of its inputs): the run id is no secret
            token
            for origin in state.get("origins", [])
            for item in origin.get("localStorage", [])
            for token in stored_tokens(str(item.get("value") or ""))
            if self.run.id not in token
        ]
        self.redactor.add_values(found)

    def _secret_fields(self, source: Any, names: list[str]) -> None:
        new = {str(n) for n in names} - self.password_fields
        if new:
            self.password_fields |= new
            self.redactor.add_fields(new)

    async def before_step(self, ctx: StepContext[Any], step: Step, context: BrowserContext) -> None:
        if self._replay_inputs is not None:
            self._fingerprints[ctx.fingerprint] = self.flow.fingerprint(step, self._replay_inputs, ctx.results)
        await self._stop(context)
        if isinstance(step, Effect) and step.verifier is not None:
            await self._self_test(ctx, step, context, "before", "not_done")
        await self._start(context, "step", step, ctx.attempt_no)

    async def after_step(
        self, ctx: StepContext[Any], step: Step, context: BrowserContext, attempt: AttemptRecord | None
    ) -> None:
        await self._learn_storage(context)  # what a login step set, before its segment is written
        await self._stop(context)
        if self.traces is not None:
            await self.traces.cut(context, f"{self._seq:04d}-{step.id}")
        if isinstance(step, Effect) and step.verifier is not None and attempt is not None:
            await self._self_test(ctx, step, context, "after", expected_after(attempt))
        await asyncio.to_thread(self._save)
        await self._start(context, "between")

    async def _self_test(
        self, ctx: StepContext[Any], step: Effect, context: BrowserContext, phase: str, expected: str | None
    ) -> None:
        await self._start(context, f"verify_{phase}", step, ctx.attempt_no)
        verdict = await run_verifier(step, ctx, context)
        await self._stop(context)
        test = SelfTest(
            step=step.id,
            attempt=ctx.attempt_no,
            phase=phase,
            said=verdict.kind,
            expected=expected,
            reason=verdict.reason,
            result=verdict.result,
        )
        self.self_tests.append(test)
        self.notify.later.notice(self.run, step.id, test.describe())

    def dispatched(self, attempt: AttemptRecord, method: str, url: str) -> None:
        segment = self._current or self._ending
        if segment is not None:
            segment.dispatched.append((method, url))

    # -- meta and journal ---------------------------------------------------------------------

    @property
    def broken(self) -> list[str]:
        return sorted({t.step for t in self.self_tests if not t.ok})

    def meta(self, status: str, final: RunRecord | None = None) -> dict[str, Any]:
        secret = self.flow.secret_fields()
        inputs = {k: (REDACTED if k in secret else v) for k, v in self.run.inputs.items()}
        steps = [
            {
                "id": s.id,
                "kind": s.kind,
                **(
                    {"idempotent": s.idempotent, "verifier": s.verifier is not None, "confirm": s.confirm is not None}
                    if isinstance(s, Effect)
                    else {"sends": _rule_json(getattr(s, "sends", False))}
                ),
            }
            for s in self.flow.steps
        ]
        meta: dict[str, Any] = self.redactor.json_data(
            {
                "format": FORMAT,
                "name": self.name,
                "status": status,
                "flow": {
                    "name": self.flow.name,
                    "file": os.path.relpath(self.flow_file, self.root.resolve()),
                    "hash": self.flow_hash,
                    "steps": steps,
                },
                "run_id": self.run.id,
                "inputs": inputs,
                "final_state": str(final.state) if final else None,
                "secret_fields": self.redactor.names(),
                "password_fields": sorted(self.password_fields),
                "redaction_warnings": self.redactor.warnings,
                "recorded_at": datetime.fromtimestamp(self._started, UTC).isoformat(timespec="seconds"),
                "duration_s": round(time.time() - self._started, 2),
                "tools": {
                    "browserworker": _version("browserworker"),
                    "playwright": _version("playwright"),
                    "python": platform.python_version(),
                    "browser": self._browser_version,
                },
                "segments": self.writer.segments,
                "unreplayable": self.unreplayable,
                "verifiers": [t.to_dict() for t in self.self_tests],
                "broken_verifiers": self.broken,
                "traces": [os.path.relpath(p, self.root) for p in (self.traces.files if self.traces else [])],
            }
        )
        return meta

    def _save(self, status: str = "recording", final: RunRecord | None = None) -> None:
        write_json(self.root / "meta.json", self.meta(status, final))
        data = journal_data(self.store, self.run.id, self.redactor, self._fingerprint)
        write_json(self.root / "journal.json", data)

    def finish(self, final: RunRecord | None) -> None:
        """Write what is left after the last context closed, and the final meta and journal."""
        self._flush_closed()
        done = final is not None and final.state not in (RunState.QUEUED, RunState.LEASED, RunState.RUNNING)
        self._save("complete" if done else "interrupted", final)
        shutil.rmtree(self._tmp, ignore_errors=True)


@dataclass(frozen=True)
class RecordedRun:
    """What :func:`record` made: the final run, the recording's directory and the verifier self-tests."""

    run: RunRecord
    path: Path
    self_tests: tuple[SelfTest, ...] = ()

    @property
    def broken(self) -> list[str]:
        """The effect steps whose verifier failed its self-test (``verifier BROKEN``)."""
        return sorted({t.step for t in self.self_tests if not t.ok})


async def record(
    engine: Engine,
    loaded: LoadedFlow,
    run: RunRecord,
    *,
    name: str | os.PathLike[str],
    trace: bool = False,
    base: Path | None = None,
    stop: asyncio.Event | None = None,
    extensions: Sequence[object] = (),
    browser: BrowserProcess | None = None,
) -> RecordedRun:
    """Execute a new run with ``engine`` (:meth:`~browserworker.runtime._engine.Engine.run`), recording it into
    ``recordings/NAME``; returns the final run with the verifier self-tests (``broken`` names the
    steps whose verifier failed).

    Replaces an existing recording of that name. Raises :class:`UsageError` for a run that
    has already started (a recording must cover a run from its first step). ``browser`` is
    passed to :meth:`~browserworker.runtime._engine.Engine.run`.
    """
    store = engine.store
    path = recording_path(name, base)
    if run.state != RunState.QUEUED or store.attempts(run.id):
        raise UsageError(f"run {run.id} has already started; --record needs a new run (no --run-id of an existing run)")
    redactor = Redactor.for_run(loaded.flow.secret_fields(), run.inputs)
    # the passwords of its browser context options (basic auth, a proxy) are secrets too
    options = loaded.flow.context_options(loaded.flow.validate_inputs(run.inputs))
    redactor.values.extend(v for v in secret_values(options) if v not in redactor.values)
    redactor.values.sort(key=len, reverse=True)
    writer = RecordingWriter(path, redactor)
    writer.reset()
    others = engine.extensions_for(extensions)
    recorder = Recorder(
        writer,
        loaded.flow,
        run,
        store,
        name=path.name,
        flow_file=loaded.path,
        flow_hash=loaded.file_hash,
        trace=trace,
        notify=others,
    )
    recorder._save()
    final: RunRecord | None = None
    try:
        final = await engine.run(loaded, run, stop=stop, extensions=[recorder, *extensions], browser=browser)
    finally:
        recorder.finish(final)
    requests = sum(s["entries"] for s in writer.segments)
    verdict = (
        f"verifier self-test BROKEN for {', '.join(recorder.broken)}"
        if recorder.broken
        else "verifier self-tests ok"
        if recorder.self_tests
        else "no verifiers to self-test"
    )
    await others.notice(
        final,
        None,
        f"recorded {path} ({len(writer.segments)} network segments, {requests} requests); {verdict}",
    )
    return RecordedRun(run=final, path=path, self_tests=tuple(recorder.self_tests))


def _rule_json(rule: object) -> bool | str:
    """A ``sends=`` rule as JSON: a bool or a glob as it is, a predicate by its name."""
    if isinstance(rule, bool | str):
        return rule
    return f"predicate {getattr(rule, '__name__', type(rule).__name__)}"
