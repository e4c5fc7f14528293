"""Operating a fleet: metrics, health, backup and restore, evidence, and what the commands print.

``_metrics`` and ``_counters`` (Prometheus), ``_health`` (alert rules), ``_backup`` with its
dialects ``_backup_sqlite`` and ``_backup_postgres``, ``_activity`` (counts over time),
``_evidence`` (screenshots, recordings, masking), ``_views`` and ``_ops_views`` (the text the
CLI and the console show).
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._activity import ActivitySlot, activity
    from ._backup import backup, check_db, migrate, restore
    from ._counters import ProcessCounters
    from ._evidence import mask, recordings_of, screenshot_file, screenshots
    from ._health import Breach, HealthRules, check, check_store, format_age, rules_from_options
    from ._metrics import MetricsServer, OpsSnapshot, exposition, snapshot
    from ._ops_views import backup_line, check_lines, migrate_line, print_status, restore_lines
    from ._views import (
        Progress,
        broken_line,
        cancel_line,
        journal_view,
        limit_lines,
        outcome_line,
        print_chaos,
        print_journal,
        print_runs,
        queue_line,
        resolve_line,
        review_lines,
        run_summary,
        terminal,
        worker_line,
    )

__getattr__, __dir__ = face(__name__)

__all__ = [
    "ActivitySlot",
    "Breach",
    "HealthRules",
    "MetricsServer",
    "OpsSnapshot",
    "ProcessCounters",
    "Progress",
    "activity",
    "backup",
    "backup_line",
    "broken_line",
    "cancel_line",
    "check",
    "check_db",
    "check_lines",
    "check_store",
    "exposition",
    "format_age",
    "journal_view",
    "limit_lines",
    "mask",
    "migrate",
    "migrate_line",
    "outcome_line",
    "print_chaos",
    "print_journal",
    "print_runs",
    "print_status",
    "queue_line",
    "recordings_of",
    "resolve_line",
    "restore",
    "restore_lines",
    "review_lines",
    "rules_from_options",
    "run_summary",
    "screenshot_file",
    "screenshots",
    "snapshot",
    "terminal",
    "worker_line",
]
