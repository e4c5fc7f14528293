"""The operations commands: ``status``, ``metrics``, ``health``, ``backup``, ``restore``, ``check-db``,
``migrate``."""

from __future__ import annotations

from pathlib import Path

import click

from ..ops import terminal
from .app import main
from .failures import stage
from .invocation import invocation
from .options import db_option, emit, json_option


@main.command()
@db_option
@json_option("the snapshot")
def status(as_json: bool) -> None:
    """Queues (depth, oldest age, UNKNOWN), runs by state, lease expiries and workers."""
    from ..ops import print_status, snapshot

    snap = snapshot(invocation().store(create=False), histograms=False)
    emit(snap.to_dict(), as_json, lambda: print_status(snap, terminal()))


@main.command()
@db_option
def metrics() -> None:
    """Print the metrics in the Prometheus text format (what worker --metrics-port serves)."""
    from ..ops import exposition

    click.echo(exposition(invocation().store(create=False)).decode(), nl=False)


@main.command("health")
@db_option
@click.option(
    "--max-queue-age",
    default="5m",
    show_default=True,
    metavar="DURATION",
    help="Oldest claimable QUEUED run of any queue (or off).",
)
@click.option(
    "--max-unknown", default="off", show_default=True, metavar="N", help="Effect attempts UNKNOWN now, in all (or off)."
)
@click.option(
    "--max-unknown-growth",
    default="0/10m",
    show_default=True,
    metavar="N/WINDOW",
    help="New, still unresolved UNKNOWN attempts per queue in the window (or off).",
)
@click.option(
    "--max-stale-workers",
    default="0",
    show_default=True,
    metavar="N",
    help="Workers that stopped heartbeating without stopping cleanly (or off).",
)
@click.option(
    "--stale-after",
    default="60s",
    show_default=True,
    metavar="DURATION",
    help="A worker without a heartbeat for this long is stale.",
)
@json_option("the verdict and the breached rules")
@click.pass_context
def health_command(
    ctx: click.Context,
    max_queue_age: str,
    max_unknown: str,
    max_unknown_growth: str,
    max_stale_workers: str,
    stale_after: str,
    as_json: bool,
) -> None:
    """Exit 0 when healthy; else 1, with one line per breached rule (for cron, systemd, probes)."""
    from ..ops import check_store, rules_from_options

    rules = rules_from_options(
        max_queue_age=max_queue_age,
        max_unknown=max_unknown,
        max_unknown_growth=max_unknown_growth,
        max_stale_workers=max_stale_workers,
        stale_after=stale_after,
    )
    breaches = check_store(invocation().store(create=False), rules)
    emit(
        {"healthy": not breaches, "breaches": [vars(b) for b in breaches]},
        as_json,
        lambda: click.echo("\n".join(str(b) for b in breaches) or "healthy"),
    )
    ctx.exit(1 if breaches else 0)


@main.command("backup")
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@db_option
@json_option("the backup's report")
def backup_command(dest: Path, as_json: bool) -> None:
    """Copy the database to DEST, consistently, while workers run.

    SQLite: one file (SQLite's backup API). PostgreSQL: pg_dump --format=custom of the
    store's schema (pg_dump on PATH).
    """
    from ..ops import backup, backup_line

    with stage(refusing=True):  # a backup that fails is refused (exit 2)
        report = backup(invocation().db, dest, schema=invocation().schema)
    emit(report.to_dict(), as_json, lambda: click.echo(backup_line(report)))


@main.command("restore")
@click.argument("src", type=click.Path(dir_okay=False, path_type=Path))
@db_option
@json_option("the restore's report")
def restore_command(src: Path, as_json: bool) -> None:
    """Replace the database with the backup SRC; refused while the database is in use.

    The replaced database is kept (SQLite: beside it; PostgreSQL: its schema renamed
    SCHEMA_before_restore_TIME). Unfinished runs reconcile every effect that the backup
    does not show as done (verifier or review) before anything is dispatched.
    """
    from ..ops import restore, restore_lines

    with stage(refusing=True):  # a restore that fails is refused (exit 2)
        report = restore(src, invocation().db, schema=invocation().schema)
    emit(report.to_dict(), as_json, lambda: click.echo("\n".join(restore_lines(report))))


@main.command("check-db")
@db_option
@json_option("the report")
@click.pass_context
def check_db_command(ctx: click.Context, as_json: bool) -> None:
    """Report the database's integrity and schema version, read-only; exit 1 if it has problems.

    PostgreSQL: the consistency rules of the journal, and the indexes where the amcheck
    extension is installed.
    """
    from ..ops import check_db, check_lines

    report = check_db(invocation().db, schema=invocation().schema)
    emit(report.to_dict(), as_json, lambda: click.echo("\n".join(check_lines(report))))
    ctx.exit(0 if report.ok else 1)


@main.command("migrate")
@db_option
@json_option("the store and its schema versions")
def migrate_command(as_json: bool) -> None:
    """Create the store if it is not there and apply the migrations it lacks (idempotent).

    Every command migrates the store it opens; run this to do it ahead of a deployment, or
    to create a PostgreSQL store's schema before any worker starts.
    """
    from ..ops import migrate, migrate_line

    with stage(refusing=True):  # nothing migrated: refused (exit 2)
        report = migrate(invocation().db, schema=invocation().schema)
    emit(report.to_dict(), as_json, lambda: click.echo(migrate_line(report)))
