"""structlog set-up: JSON lines when stderr is not a terminal, readable output when it is."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = ["SECRET_KEYS", "RunLog", "configure_logging", "redact_secrets"]

SECRET_KEYS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "authorization",
        "cookie",
        "set-cookie",
        "proxy-authorization",
        "api_key",
        "apikey",
    }
)


def redact_secrets(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor that masks values of secret-looking keys."""
    for key in list(event):
        if key.lower() in SECRET_KEYS:
            event[key] = "[redacted]"
    return event


def _stderr_logger(*args: Any) -> structlog.PrintLogger:
    """structlog's own line printer, on ``sys.stderr`` as it is now, not as it was when logging
    was configured: a CLI run in-process (click's ``CliRunner``, a test's capture) swaps stderr
    for a stream it closes afterwards. Loggers are not cached, so this runs per log call."""
    return structlog.PrintLogger(sys.stderr)


def configure_logging(level: str = "warning", *, json: bool | None = None) -> None:
    """Configure structlog for this process (idempotent)."""
    use_json = not sys.stderr.isatty() if json is None else json
    renderer: Any = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def _quiet_by_default() -> None:
    """Used as a library (no ``browserworker`` command, structlog not configured by the
    application), log as the command does by default: warnings and errors only, to stderr
    (``$BROWSERWORKER_LOG_LEVEL`` overrides). An application that configures structlog
    itself, before or after, keeps its own set-up."""
    if not structlog.is_configured():
        level = os.environ.get("BROWSERWORKER_LOG_LEVEL", "warning").lower()
        configure_logging(level if level in ("debug", "info", "warning", "error") else "warning")


_quiet_by_default()


class RunLog:
    """One run's lifecycle as structured log lines: an extension the engine subscribes first
    to every run (one instance per run).

    Each line about a step names the run, the flow, the step, the attempt, its request key and
    fingerprint, its state, the worker and the lease epoch, so one ``grep`` follows an effect
    across workers and crashes."""

    def __init__(self) -> None:
        self.log = structlog.get_logger("browserworker")
        self.flow: str | None = None

    def _about(self, attempt: Any) -> Any:
        return self.log.bind(
            run_id=attempt.run_id,
            flow=self.flow,
            step_id=attempt.step_id,
            attempt_no=attempt.attempt_no,
            request_key=attempt.request_key,
            fingerprint=attempt.request_fingerprint,
            state=str(attempt.state),
            worker_id=attempt.worker,
            lease_epoch=attempt.lease_epoch,
        )

    def run_started(self, run: Any) -> None:
        self.flow = run.flow_name

    def intent_committed(self, attempt: Any) -> None:
        self._about(attempt).info("intent committed")

    def outcome(self, attempt: Any) -> None:
        line = self._about(attempt)
        if attempt.kind == "effect":
            line.info("effect finished", decided_by=attempt.decided_by)
        elif attempt.state == "SUCCEEDED":
            line.info("action finished")
        else:
            line.warning("action failed", error=attempt.error)
