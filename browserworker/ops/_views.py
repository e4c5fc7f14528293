"""What the CLI prints: per-step progress lines, the run/journal views for ``show``/``runs``,
the chaos tables, and the one-line reports of the other commands.

Tables go to :func:`console`, which wraps at the terminal's width on a terminal and never
wraps when stdout is a pipe or a file (a script reads whole rows)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from ..flow import Extension
from ..states import AttemptState, RunState
from ..store.base import Store
from ..store.records import AttemptRecord, RunRecord

if TYPE_CHECKING:  # rich is imported only by the commands that print tables
    from rich.console import Console

    from ..control import ReviewItem
    from ..runtime import WorkerStats
    from ..store.records import KeyLimits

__all__ = [
    "Progress",
    "broken_line",
    "cancel_line",
    "journal_view",
    "limit_lines",
    "outcome_line",
    "print_chaos",
    "print_journal",
    "print_runs",
    "queue_line",
    "resolve_line",
    "review_lines",
    "run_summary",
    "terminal",
    "worker_line",
]

_UNWRAPPED = 1_000_000  # the width of a console that is not a terminal: rows are never folded

_MARK = {
    AttemptState.SUCCEEDED: "ok",
    AttemptState.FAILED: "FAILED",
    AttemptState.FAILED_BEFORE_SEND: "not sent",
    AttemptState.UNKNOWN: "UNKNOWN",
    AttemptState.NOT_DONE: "not done",
}


def _ts(value: float | None) -> str | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value, tz=UTC).isoformat(timespec="milliseconds")


class Progress(Extension):
    """One line per step on ``stream`` (stderr), as the executor reports it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._started: dict[str, float] = {}

    def _say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def step_started(self, run: RunRecord, step_id: str, kind: str) -> None:
        self._started[step_id] = time.monotonic()

    def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> None:
        self._say(
            f"  = {attempt.step_id}: already SUCCEEDED (attempt {attempt.attempt_no}, {attempt.decided_by}); skipped"
        )

    def intent_committed(self, attempt: AttemptRecord) -> None:
        self._say(f"  > {attempt.step_id}: intent committed (attempt {attempt.attempt_no}, key {attempt.request_key})")

    def outcome(self, attempt: AttemptRecord) -> None:
        began = self._started.pop(attempt.step_id, None)  # None: decided by recovery, not run here
        took = "" if began is None else f" ({max(0.0, time.monotonic() - began):.1f}s)"
        mark = _MARK.get(attempt.state, str(attempt.state))
        detail = f" by {attempt.decided_by}" if attempt.kind == "effect" and attempt.decided_by else ""
        extra = f": {attempt.error}" if attempt.error and attempt.state != AttemptState.SUCCEEDED else ""
        result = f" -> {attempt.result}" if attempt.kind == "effect" and attempt.result is not None else ""
        self._say(
            f"  {'+' if attempt.state == AttemptState.SUCCEEDED else '!'} {attempt.step_id} "
            f"[{attempt.kind} #{attempt.attempt_no}] {mark}{detail}{result}{extra}{took}"
        )

    def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None:
        where = f"{step_id}: " if step_id else ""
        self._say(f"  * {where}{message}")


def journal_view(store: Store, run: RunRecord) -> dict[str, Any]:
    """The run, its journal and its events as JSON-ready data."""
    attempts = store.attempts(run.id)
    view = run.to_dict()
    for key in (
        "created_at",
        "started_at",
        "finished_at",
        "updated_at",
        "lease_expires_at",
        "owner_stopped_at",
        "not_before",
    ):
        view[key] = _ts(view[key])
    journal = []
    for a in attempts:
        row = a.to_dict()
        for key in ("intent_at", "dispatched_at", "finished_at"):
            row[key] = _ts(row[key])
        if a.kind == "effect":
            row["outbox"] = [
                {
                    **o.to_dict(),
                    "released_at": _ts(o.released_at),
                    "response_at": _ts(o.response_at),
                    "failed_at": _ts(o.failed_at),
                }
                for o in store.outbox(a.id)
            ]
        journal.append(row)
    events = [{**e.to_dict(), "at": _ts(e.at)} for e in store.events(run.id)]
    return {"run": view, "journal": journal, "events": events}


def run_summary(run: RunRecord) -> dict[str, Any]:
    return {
        "id": run.id,
        "flow": run.flow_name,
        "state": str(run.state),
        "queue": run.queue,
        "created_at": _ts(run.created_at),
        "finished_at": _ts(run.finished_at),
        "error": run.error,
    }


def _detail(a: dict[str, Any]) -> str:
    """The result, else a short account of the evidence, of one journal row."""
    parts = []
    if a["result"] is not None:
        parts.append(f"result {a['result']}")
    ev = a["evidence"] if isinstance(a["evidence"], dict) else {}
    if ev.get("verdict"):
        who = f"verifier {ev['verifier']}" if ev.get("verifier") else "verifier"
        looked = (
            f"checked {', '.join(ev['checked'])}"
            if ev.get("checked")
            else f"loaded nothing; its page was at {ev.get('page_url')}"
        )
        why = f" ({ev['reason']})" if ev.get("reason") else ""
        parts.append(f"{who} said {ev['verdict']}{why} (asked {ev.get('asked', 1)}x): {looked}")
    for r in ev.get("responses") or []:
        parts.append(
            f"{r['method']} -> {r['status'] or r['failure'] or 'no response'}"
            + (f" {r['location']}" if r.get("location") else "")
        )
    if ev.get("reason") and not ev.get("verdict"):
        parts.append(str(ev["reason"]))
    if a["error"]:
        parts.append(f"error {a['error']}")
    return "; ".join(parts)


#: the events ``show`` lists as decisions: every move of the run and of its lease (a hand-back on
#: SIGTERM, an expiry found by a reclaimer), so each jump of the lease epoch has its reason
_DECISION_KINDS = (
    "attempt_state",
    "decision",
    "lease_claimed",
    "lease_released",
    "lease_expired",
    "run_state",
    "approval",
)


def _who(event: dict[str, Any]) -> str:
    """Who made a decision, where it matters: a person's approval, the worker that handed a
    lease back, the owner whose lease expired."""
    if event["kind"] == "approval" and event["decision"].startswith("human:"):
        return f" by {event['worker']}"
    if event["kind"] == "lease_released" and event["worker"]:
        return f" by {event['worker']}"
    detail = event["detail"] if isinstance(event["detail"], dict) else {}
    if event["kind"] == "lease_expired" and detail.get("previous_owner"):
        return f" (owner {detail['previous_owner']})"
    return ""


def _tool_call(detail: dict[str, Any]) -> str:
    """One call of an agent's session (``browserworker.agent``): its number, tool and arguments,
    a secret never shown."""
    args = detail.get("args") or {}
    target = (detail.get("target") or {}).get("selector") or args.get("selector") or args.get("ref")
    parts = [f"#{detail.get('seq')} {detail.get('tool')}"]
    if target:
        parts.append(str(target))
    if "url" in args:
        parts.append(str(args["url"]))
    if args.get("secret"):
        parts.append("[secret]")
    elif "value" in args:
        parts.append(repr(args["value"]))
    for name in ("key", "values"):
        if name in args:
            parts.append(f"{name}={args[name]}")
    if detail.get("effect_key"):
        parts.append(f"effect_key={detail['effect_key']}")
    if detail.get("verify"):
        verify = detail["verify"]
        parts.append(f"verify {verify.get('get') or verify.get('url')}")
    if args.get("ok") is False:
        parts.append("(refused or failed: nothing done)")
    return " ".join(parts)


def print_journal(view: dict[str, Any], console: Console) -> None:
    """``show``'s text: what came from the run (ids, inputs, results, errors) is escaped, so a
    ``[redacted]`` or a ``[1, 2]`` prints as it is instead of being read as Rich markup."""
    from rich.markup import escape

    run = view["run"]
    console.print(
        f"[bold]run {escape(run['id'])}[/bold]  flow {escape(run['flow_name'])}  "
        f"[bold]{run['state']}[/bold]  lease epoch {run['lease_epoch']}  owner {escape(run['owner'] or '-')}"
    )
    console.print(f"inputs {escape(str(run['inputs']))}", highlight=False)
    console.print(f"request keys {escape(run['id'])}/<step>")
    if run["error"]:
        console.print(f"error {escape(str(run['error']))}")
    console.print("[bold]journal[/bold] (step #attempt kind state, decided by, dispatched, fingerprint)")
    width = max((len(a["step_id"]) for a in view["journal"]), default=4)
    for a in view["journal"]:
        sent = "sent" if a["dispatched_at"] else "    "
        console.print(
            escape(
                f"  {a['step_id']:<{width}} #{a['attempt_no']:<2} {a['kind']:<6} {a['state']:<18} "
                f"by {a['decided_by'] or '-':<22} {sent} fp {a['request_fingerprint'][:12]}"
            ),
            soft_wrap=True,
            highlight=False,
        )
        detail = _detail(a)
        if detail:
            console.print(escape(f"  {'':<{width}}   {detail}"), soft_wrap=True, highlight=False)
    calls = [e["detail"] for e in view["events"] if e["kind"] == "tool_call" and isinstance(e["detail"], dict)]
    if calls:
        console.print("[bold]tool calls[/bold] (an agent's session)")
        for call in calls:
            console.print(escape(f"  {_tool_call(call)}"), soft_wrap=True, highlight=False)
    decisions = [e for e in view["events"] if e["decision"] and e["kind"] in _DECISION_KINDS]
    if decisions:
        console.print("[bold]decisions[/bold]")
        for e in decisions:
            step = f" {e['step_id']}#{e['attempt_no']}" if e["step_id"] else ""
            move = f" {e['from_state']}->{e['to_state']}" if e["to_state"] else ""
            who = _who(e)
            console.print(
                escape(
                    f"  {e['at'][11:23]} {e['kind']}{step}{move}: {e['decision']}{who}"
                    f"{' (epoch ' + str(e['lease_epoch']) + ')' if e['lease_epoch'] else ''}"
                ),
                soft_wrap=True,
            )


def print_runs(runs: list[RunRecord], console: Console) -> None:
    from rich.table import Table

    table = Table()
    for col in ("run id", "flow", "state", "queue", "created", "finished", "error"):
        table.add_column(col, overflow="fold")
    for r in runs:
        s = run_summary(r)
        table.add_row(
            s["id"],
            s["flow"],
            s["state"],
            s["queue"],
            s["created_at"] or "",
            s["finished_at"] or "",
            (s["error"] or "")[:80],
        )
    console.print(table)


def print_chaos(report: Any, console: Console) -> None:
    """The chaos tables: the verifier self-tests, then step × point → classification, decision,
    landings, verdict (``report`` is a :class:`~browserworker.prove._chaos.ChaosReport`)."""
    from rich.table import Table

    colours = {"ok": "green", "not reached": "yellow"}
    if report.self_tests:
        where = {t.verifier: t.where for t in report.self_tests}
        tests = Table(
            title="verifier self-tests (clean run)",
            caption="; ".join(f"{name} at {place}" for name, place in where.items()),
        )
        for col in ("step", "verifier", "asked", "said", "expected", "verdict"):
            tests.add_column(col, overflow="fold")
        for t in report.self_tests:
            colour = colours.get(t.status, "red")
            asked = "before the dispatch" if t.test.phase == "before" else "after the effect"
            tests.add_row(
                t.step, t.verifier, asked, t.test.said, t.test.expected or "-", f"[{colour}]{t.status}[/{colour}]"
            )
        console.print(tests)
    table = Table(title="browserworker chaos")
    for col in ("step", "point", "#", "crashed attempt", "decision", "landings", "verdict"):
        table.add_column(col, overflow="fold")
    for r in report.results:
        colour = colours.get(r.verdict, "red")
        table.add_row(
            r.step,
            r.point,
            str(r.round),
            r.classification,
            f"{r.decision} [{r.run_state}]",
            f"{r.landings} ({r.probe})",
            f"[{colour}]{r.verdict}[/{colour}]",
        )
    console.print(table)


def terminal() -> Console:
    """A console on stdout: the terminal's width on a terminal, unwrapped when piped."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=_UNWRAPPED)


def outcome_line(run: RunRecord) -> str:
    """How ``run`` ended (or that it was handed back), for stderr."""
    if run.state == RunState.QUEUED:
        return f"run {run.id} stopped and handed back (QUEUED); resume with --run-id {run.id}"
    return f"run {run.id}: {run.state}" + (f" ({run.error})" if run.error else "")


def broken_line(broken: Sequence[str]) -> str:
    return (
        f"error: verifier BROKEN for {', '.join(broken)} (its self-test above): recovery after a crash "
        "would trust it; the recording is written"
    )


def worker_line(worker_id: str, stats: WorkerStats) -> str:
    return (
        f"worker {worker_id} stopped: claimed {stats.claimed}, finished {stats.finished}, "
        f"released {stats.released}, lease lost {stats.lease_lost}, reclaimed {stats.reclaimed}" + left_line(stats.left)
    )


def left_line(left: dict[str, int]) -> str:
    """What ``--once`` left queued, for the worker's closing line ("" when nothing)."""
    parts = []
    if left.get("delayed"):
        parts.append(f"{left['delayed']} delayed (--delay not ended)")
    if left.get("held"):
        parts.append(f"{left['held']} held by a site budget or pause (browserworker limits)")
    return f"; left queued: {', '.join(parts)}" if parts else ""


def cancel_line(run_id: str, outcome: str) -> str | None:
    """What ``cancel`` did, or None when the run had already ended (``outcome`` is its state)."""
    return {
        "cancelled": f"run {run_id} CANCELLED",
        "requested": f"run {run_id} is running: it stops at its next step boundary",
    }.get(outcome)


def resolve_line(run: RunRecord) -> str:
    return f"run {run.id} {run.state}" + (" (a worker will pick it up)" if run.state == RunState.QUEUED else "")


def queue_line(name: str, limit: int | None) -> str:
    return f"queue {name}: max depth {'unlimited' if limit is None else limit}"


def review_lines(items: Sequence[ReviewItem]) -> list[str]:
    """Each run waiting for a person, its UNKNOWN step, the evidence and how to resolve it."""
    lines = [] if items else ["nothing to review"]
    for item in items:
        lines.append(f"run {item.run_id} ({item.flow}): {item.reason or ''}")
        if not item.step_id:
            continue
        ev = item.evidence
        lines.append(f"  step {item.step_id} #{item.attempt_no}  key {item.request_key}  fp {item.fingerprint}")
        for resp in ev.get("responses", []):
            lines.append(f"    {resp['method']} {resp['url']} -> {resp['status'] or resp['failure'] or 'no response'}")
        if ev.get("verdict"):
            lines.append(
                f"    verifier {ev.get('verifier') or ''} said {ev['verdict']}; checked: "
                + (", ".join(ev.get("checked") or []) or "nothing (no page load, no page.request call)")
            )
        lines += [f"    {key}: {ev[key]}" for key in ("page_url", "screenshot", "reason") if ev.get(key)]
        lines.append(f"  resolve: browserworker resolve {item.run_id} {item.step_id} --done|--not-done|--failed")
    return lines


def limit_lines(found: Sequence[KeyLimits], now: float) -> list[str]:
    """``browserworker limits``: one line per limit key."""
    if not found:
        return ["no limit keys have a budget or a pause"]
    lines = []
    for b in found:
        parts = [
            f"concurrency {b.concurrency}" if b.concurrency is not None else "concurrency unlimited",
            f"rate {b.rate:g}/min" if b.rate is not None else "rate unlimited",
        ]
        if b.paused and b.paused_until is not None:
            parts.append(f"paused {b.paused_until - now:.0f}s more ({b.pause_reason})")
        parts.append(f"{b.live} live, {b.claims_last_minute} claimed in the last minute")
        lines.append(f"{b.key}: {', '.join(parts)}")
    return lines
