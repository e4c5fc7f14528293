"""structlog set-up: JSON lines when stderr is not a terminal, readable output when it is.

structlog (and the rich console it loads) is imported when the first line is to be written,
not before: a run that logs nothing at its level never pays for it. :func:`get_logger` is the
one way the package gets a logger.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["SECRET_KEYS", "Logger", "RunLog", "configure_logging", "get_logger", "redact_secrets"]

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

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def redact_secrets(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor that masks values of secret-looking keys."""
    for key in list(event):
        if key.lower() in SECRET_KEYS:
            event[key] = "[redacted]"
    return event


def _stderr_logger(*args: Any) -> Any:
    """structlog's own line printer, on ``sys.stderr`` as it is now, not as it was when logging
    was configured: a CLI run in-process (click's ``CliRunner``, a test's capture) swaps stderr
    for a stream it closes afterwards. Loggers are not cached, so this runs per log call."""
    import structlog

    return structlog.PrintLogger(sys.stderr)


class _SetUp:
    """The set-up this process asked for, and whether structlog has it yet.

    Used as a library (no ``browserworker`` command), the kit logs as the command does by
    default: warnings and errors only, to stderr (``$BROWSERWORKER_LOG_LEVEL`` overrides), unless
    the application configured structlog itself before the kit's first line; the command's
    :func:`configure_logging` always applies."""

    def __init__(self) -> None:
        level = os.environ.get("BROWSERWORKER_LOG_LEVEL", "warning").lower()
        self.level = _LEVELS.get(level, logging.WARNING)
        self.json: bool | None = None
        self.forced = False
        self.applied = False

    def structlog(self) -> ModuleType:
        """structlog, configured as asked the first time it is needed."""
        import structlog

        if not self.applied:
            self.applied = True
            if self.forced or not structlog.is_configured():
                self._configure(structlog)
        return structlog

    def _configure(self, structlog: ModuleType) -> None:
        use_json = not sys.stderr.isatty() if self.json is None else self.json
        renderer: Any = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                redact_secrets,
                renderer,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(self.level),
            logger_factory=_stderr_logger,
            cache_logger_on_first_use=False,
        )

    def silent(self, level: int) -> bool:
        """A line at ``level`` would be dropped and structlog is not loaded: while it is not,
        nobody but this set-up can have configured it, so its level decides."""
        return level < self.level and "structlog" not in sys.modules


_SETUP = _SetUp()
if "structlog" in sys.modules:  # the application loaded it first: set up now, as it may log at once
    _SETUP.structlog()


def configure_logging(level: str = "warning", *, json: bool | None = None) -> None:
    """Configure logging for this process (the command calls it first): lines at ``level`` and
    above, as JSON lines (``json=None``: when stderr is not a terminal). Idempotent."""
    _SETUP.level = _LEVELS[level.lower()]
    _SETUP.json = json
    _SETUP.forced = True
    _SETUP.applied = False
    if "structlog" in sys.modules:
        _SETUP.structlog()


class Logger:
    """A structlog ``FilteringBoundLogger`` that loads structlog only for a line to be written.

    Its context is bound here; each line is written by structlog's logger of the same name
    with that context, as configured at that moment."""

    __slots__ = ("_context", "_name")

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self._name = name
        self._context: dict[str, Any] = context or {}

    def _real(self) -> Any:
        return _SETUP.structlog().get_logger(self._name).bind(**self._context)

    def _line(self, level: int, method: str, event: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        if _SETUP.silent(level):
            return None
        return getattr(self._real(), method)(event, *args, **kw)

    async def _aline(self, level: int, method: str, event: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        if _SETUP.silent(level):
            return None
        return await getattr(self._real(), method)(event, *args, **kw)

    def bind(self, **new_values: Any) -> Logger:
        return Logger(self._name, {**self._context, **new_values})

    def unbind(self, *keys: str) -> Logger:
        context = dict(self._context)
        for key in keys:
            del context[key]
        return Logger(self._name, context)

    def try_unbind(self, *keys: str) -> Logger:
        return Logger(self._name, {k: v for k, v in self._context.items() if k not in keys})

    def new(self, **new_values: Any) -> Logger:
        return Logger(self._name, dict(new_values))

    def is_enabled_for(self, level: int) -> bool:
        return not _SETUP.silent(level) and bool(self._real().is_enabled_for(level))

    def get_effective_level(self) -> int:
        return _SETUP.level if "structlog" not in sys.modules else int(self._real().get_effective_level())

    def debug(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.DEBUG, "debug", event, args, kw)

    def info(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.INFO, "info", event, args, kw)

    def msg(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.INFO, "msg", event, args, kw)

    def warning(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.WARNING, "warning", event, args, kw)

    def warn(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.WARNING, "warn", event, args, kw)

    def error(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.ERROR, "error", event, args, kw)

    def err(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.ERROR, "err", event, args, kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.ERROR, "exception", event, args, kw)

    def critical(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.CRITICAL, "critical", event, args, kw)

    def fatal(self, event: str, *args: Any, **kw: Any) -> Any:
        return self._line(logging.CRITICAL, "fatal", event, args, kw)

    def log(self, level: int, event: str, *args: Any, **kw: Any) -> Any:
        if _SETUP.silent(level):
            return None
        return self._real().log(level, event, *args, **kw)

    async def adebug(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.DEBUG, "adebug", event, args, kw)

    async def ainfo(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.INFO, "ainfo", event, args, kw)

    async def amsg(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.INFO, "amsg", event, args, kw)

    async def awarning(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.WARNING, "awarning", event, args, kw)

    async def awarn(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.WARNING, "awarn", event, args, kw)

    async def aerror(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.ERROR, "aerror", event, args, kw)

    async def aexception(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.ERROR, "aexception", event, args, kw)

    async def acritical(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.CRITICAL, "acritical", event, args, kw)

    async def afatal(self, event: str, *args: Any, **kw: Any) -> Any:
        return await self._aline(logging.CRITICAL, "afatal", event, args, kw)

    async def alog(self, level: int, event: str, *args: Any, **kw: Any) -> Any:
        if _SETUP.silent(level):
            return None
        return await self._real().alog(level, event, *args, **kw)


def get_logger(name: str) -> Logger:
    """The package's logger called ``name`` (structlog's logger of that name, loaded on use)."""
    return Logger(name)


class RunLog:
    """One run's lifecycle as structured log lines: an extension the engine subscribes first
    to every run (one instance per run).

    Each line about a step names the run, the flow, the step, the attempt, its request key and
    fingerprint, its state, the worker and the lease epoch, so one ``grep`` follows an effect
    across workers and crashes."""

    def __init__(self) -> None:
        self.log = get_logger("browserworker")
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
