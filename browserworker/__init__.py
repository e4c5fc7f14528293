"""browserworker: run browser automations as durable, crash-safe work.

Flows are ordered steps; every effect is journaled as intent before it is dispatched,
and after a crash a verifier proves what happened before anything is replayed.

What a user composes::

    from browserworker import Engine, Flow, StepContext, Verdict, load_flow, open_store
"""

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from . import logs as _logs  # noqa: F401  (used as a library, it logs warnings only, as the command)
from .errors import (
    BrowserNotFound,
    BrowserworkerError,
    DatabaseInUse,
    FlowDefinitionError,
    FlowLoadError,
    GroupSpoiled,
    InjectedFault,
    InputError,
    LeaseLost,
    OverBudget,
    QueueFull,
    ReplayError,
    RunNotFound,
    SessionKeyError,
    StoreError,
    StoreUnavailable,
    ToolCallError,
    UndeclaredEffect,
    UsageError,
)

# The rest is imported on first use: ``import browserworker`` (and every command that only
# reads the store) stays light; the browser stack loads when something needs it.
_LAZY = {
    # writing flows
    "Action": "flow",
    "ChannelRequest": "flow",
    "Effect": "flow",
    "Extension": "flow",
    "Flow": "flow",
    "LoadedFlow": "flow",
    "Login": "flow",
    "RecordedResponse": "flow",
    "StepContext": "flow",
    "Verdict": "flow",
    "load_flow": "flow",
    # running runs
    "ApprovalSettings": "runtime",
    "BrowserSettings": "runtime",
    "Engine": "runtime",
    "LeaseSettings": "journal",
    "Worker": "runtime",
    "WorkerSettings": "runtime",
    "WorkerStats": "runtime",
    "enqueue": "control",
    # the store
    "AttemptRecord": "store",
    "PostgresStore": "store",
    "RunRecord": "store",
    "SQLiteStore": "store",
    "Store": "store",
    "open_store": "store",
    "AttemptState": "states",
    "RunState": "states",
    # testing flows
    "ReplayResult": "recording",
}

if _TYPE_CHECKING:  # pragma: no cover
    from .control import enqueue
    from .flow import (
        Action,
        ChannelRequest,
        Effect,
        Extension,
        Flow,
        LoadedFlow,
        Login,
        RecordedResponse,
        StepContext,
        Verdict,
        load_flow,
    )
    from .journal import LeaseSettings
    from .recording import ReplayResult
    from .runtime import ApprovalSettings, BrowserSettings, Engine, Worker, WorkerSettings, WorkerStats
    from .states import AttemptState, RunState
    from .store import AttemptRecord, PostgresStore, RunRecord, SQLiteStore, Store, open_store

    __version__: str


def _version() -> str:
    """The installed distribution's version (``pyproject.toml``'s, once installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("browserworker")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> _Any:
    if name == "__version__":
        value: _Any = _version()
    else:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'browserworker' has no attribute {name!r}")
        value = getattr(_import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})


# The public names: each has its line in docs/api.md (a test compares the two).
__all__ = [
    "Action",
    "ApprovalSettings",
    "AttemptRecord",
    "AttemptState",
    "BrowserNotFound",
    "BrowserSettings",
    "BrowserworkerError",
    "ChannelRequest",
    "DatabaseInUse",
    "Effect",
    "Engine",
    "Extension",
    "Flow",
    "FlowDefinitionError",
    "FlowLoadError",
    "GroupSpoiled",
    "InjectedFault",
    "InputError",
    "LeaseLost",
    "LeaseSettings",
    "LoadedFlow",
    "Login",
    "OverBudget",
    "PostgresStore",
    "QueueFull",
    "RecordedResponse",
    "ReplayError",
    "ReplayResult",
    "RunNotFound",
    "RunRecord",
    "RunState",
    "SQLiteStore",
    "SessionKeyError",
    "StepContext",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "ToolCallError",
    "UndeclaredEffect",
    "UsageError",
    "Verdict",
    "Worker",
    "WorkerSettings",
    "WorkerStats",
    "__version__",
    "enqueue",
    "load_flow",
    "open_store",
]
