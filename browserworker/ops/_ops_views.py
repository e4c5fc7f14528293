"""What the operations commands print: ``status`` tables, ``backup``/``restore``/``check-db``/``migrate`` lines."""

from __future__ import annotations

from datetime import UTC, datetime

from rich import box
from rich.console import Console
from rich.table import Table

from ._backup import BackupReport, DbCheck, MigrateReport, RestoreReport
from ._health import format_age
from ._metrics import OpsSnapshot

__all__ = ["backup_line", "check_lines", "migrate_line", "print_status", "restore_lines"]

_STATE_ORDER = ("QUEUED", "LEASED", "RUNNING", "NEEDS_REVIEW", "AWAITING_APPROVAL", "SUCCEEDED", "FAILED", "CANCELLED")


def _counts(runs: dict[str, int]) -> str:
    ordered = [s for s in _STATE_ORDER if s in runs] + sorted(set(runs) - set(_STATE_ORDER))
    return ", ".join(f"{s} {runs[s]}" for s in ordered) or "no runs"


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(title: str) -> Table:
    return Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1, 0, 0),
        collapse_padding=True,
    )


def print_status(snap: OpsSnapshot, console: Console) -> None:
    """Queues, runs by state, UNKNOWN by step, reconciliation and workers, as rich tables."""
    console.print(
        f"[bold]browserworker status[/bold]  {snap.db or ''}  schema {snap.schema_version}  at {_when(snap.at)}",
        highlight=False,
    )
    console.print(_queues_table(snap))
    console.print(f"runs: {_counts(snap.states)}", highlight=False)
    if snap.states.get("AWAITING_APPROVAL"):
        console.print(
            f"awaiting approval: {snap.states['AWAITING_APPROVAL']} (browserworker approvals)", highlight=False
        )
    _print_reconciliation(snap, console)
    if snap.unknown:
        steps = _table("UNKNOWN by effect step")
        for col in ("flow", "step", "UNKNOWN now", f"new in {format_age(snap.window)}", "ever"):
            steps.add_column(col, justify="left" if col in ("flow", "step") else "right")
        for s in snap.unknown:
            steps.add_row(s.flow, s.step, str(s.open), str(s.classified_recent), str(s.classified_total))
        console.print(steps)
    if snap.limits:
        console.print(_limits_table(snap))
    if snap.workers:
        console.print(_workers_table(snap))
    else:
        console.print("workers: none running (none heartbeated in the last hour)")


def _queues_table(snap: OpsSnapshot) -> Table:
    queues = _table("queues")
    for col in (
        "queue",
        "queued",
        "ready",
        "oldest",
        "leased",
        "running",
        "review",
        "UNKNOWN",
        f"new/{format_age(snap.window)}",
        "max",
    ):
        queues.add_column(col, justify="left" if col == "queue" else "right")
    for q in snap.queues:
        queues.add_row(
            q.name,
            str(q.queued),
            str(q.ready),
            format_age(q.oldest_ready_age),
            str(q.states.get("LEASED", 0)),
            str(q.states.get("RUNNING", 0)),
            str(q.states.get("NEEDS_REVIEW", 0)),
            str(q.unknown),
            str(q.unknown_recent),
            "-" if q.max_depth is None else str(q.max_depth),
        )
    return queues


def _print_reconciliation(snap: OpsSnapshot, console: Console) -> None:
    """Lease expiries, duplicates prevented (by who decided), and how long reconciling took."""
    dup = sum(snap.duplicates_prevented.values())
    by: dict[str, int] = {}
    for (_, _, who), n in snap.duplicates_prevented.items():
        by[who] = by.get(who, 0) + n
    latency = ", ".join(
        f"{d} {h.count} (avg {h.sum / h.count:.1f}s)" for d, h in snap.reconcile_latency.items() if h.count
    )
    console.print(
        f"lease expiries: {snap.lease_expiries_total} ({snap.lease_expiries_recent} in the last "
        f"{format_age(snap.window)}); duplicates prevented: {dup}"
        + (f" ({', '.join(f'{k} {v}' for k, v in sorted(by.items()))})" if by else ""),
        highlight=False,
    )
    if latency:
        console.print(f"reconciliations (lost lease → decision): {latency}", highlight=False)


def _workers_table(snap: OpsSnapshot) -> Table:
    workers = _table("workers")
    for col in ("worker", "host", "pid", "status", "heartbeat", "runs", "queues"):
        workers.add_column(col, justify="right" if col in ("pid", "heartbeat", "runs") else "left")
    for w in snap.workers:
        style = {"stale": "red", "dead": "red", "unhealthy": "yellow", "stopped": "dim"}.get(w.status)
        workers.add_row(
            w.id,
            w.host,
            str(w.pid),
            w.status,
            f"{format_age(w.heartbeat_age)} ago",
            f"{w.leased}/{w.concurrency}",
            ",".join(w.queues),
            style=style,
        )
    return workers


def _limits_table(snap: OpsSnapshot) -> Table:
    """Limit keys with a budget or a pause: what holds each back now."""
    table = _table("limit keys")
    for col in ("key", "live", "concurrency", "rate", "claims/1m", "paused"):
        table.add_column(col, justify="left" if col in ("key", "paused") else "right")
    for b in snap.limits:
        pause = f"{format_age(max(0.0, (b.paused_until or 0) - snap.at))} more: {b.pause_reason}" if b.paused else "-"
        table.add_row(
            b.key,
            str(b.live),
            "-" if b.concurrency is None else str(b.concurrency),
            "-" if b.rate is None else f"{b.rate:g}/min",
            str(b.claims_last_minute),
            pause,
            style="yellow" if b.paused else None,
        )
    return table


def backup_line(report: BackupReport) -> str:
    return (
        f"backup {report.dest}: {report.bytes:,} bytes, schema {report.schema_version}, integrity "
        f"{report.integrity}, {report.seconds:.2f}s; runs: {_counts(report.runs)}"
    )


def restore_lines(report: RestoreReport) -> list[str]:
    lines = [
        f"restored {report.source} into {report.db} (schema {report.schema_version}); runs: {_counts(report.runs)}"
    ]
    if report.previous and report.dialect == "sqlite":
        lines.append(f"the replaced database is kept as {report.previous}")
    elif report.previous:
        lines.append(
            f"the replaced store is kept as the schema {report.previous} (DROP SCHEMA {report.previous} "
            "CASCADE once it is no longer needed)"
        )
    if report.backup_last_event_at is not None:
        lines.append(f"the backup's last journaled event: {_when(report.backup_last_event_at)}")
    lines.append(
        f"{report.flagged} unfinished runs will reconcile their effects before any dispatch "
        f"({len(report.requeued)} leased runs handed back to the queue)"
    )
    return lines


def check_lines(report: DbCheck) -> list[str]:
    mode = f"journal mode {report.journal_mode}; " if report.dialect == "sqlite" else ""
    lines = [
        f"{report.path}: integrity {report.integrity}; schema version {report.schema_version} "
        f"(this browserworker: {report.supported_version}); {mode}runs: {_counts(report.runs)}"
    ]
    lines += [f"problem: {p}" for p in report.problems]
    lines += [f"note: {n}" for n in report.notes]
    return lines


def migrate_line(report: MigrateReport) -> str:
    done = "created" if report.created else "migrated" if report.before != report.after else "up to date:"
    return (
        f"{done} {report.store} ({report.dialect}): schema version {report.before} -> {report.after} "
        f"(this browserworker: {report.supported})"
    )
