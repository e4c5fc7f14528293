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
    FlowDefinitionError,
    FlowLoadError,
    InputError,
    LeaseLost,
    OverBudget,
    QueueFull,
    RunNotFound,
    StoreError,
    StoreUnavailable,
    UndeclaredEffect,
    UsageError,
)

# The rest is imported on first use: ``import browserworker`` (and every command that only
# reads the store) stays light; the browser stack loads when something needs it.
_LAZY = {
    "Action": "flow",
    "Effect": "flow",
    "Flow": "flow",
    "RecordedResponse": "flow",
    "StepContext": "flow",
    "Verdict": "flow",
    "BrowserSettings": "runtime",
    "Engine": "runtime",
    "Extension": "flow",
    "enqueue": "control",
    "LeaseSettings": "journal",
    "LoadedFlow": "flow",
    "load_flow": "flow",
    "AttemptState": "states",
    "RunState": "states",
    "SQLiteStore": "store",
    "Store": "store",
    "open_store": "store",
    "AttemptRecord": "store",
    "RunRecord": "store",
    "WorkerSettings": "runtime",
}

if _TYPE_CHECKING:  # pragma: no cover
    from .control import enqueue
    from .flow import Action, Effect, Extension, Flow, LoadedFlow, RecordedResponse, StepContext, Verdict, load_flow
    from .journal import LeaseSettings
    from .runtime import BrowserSettings, Engine, WorkerSettings
    from .states import AttemptState, RunState
    from .store import AttemptRecord, RunRecord, SQLiteStore, Store, open_store


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'browserworker' has no attribute {name!r}")
    value = getattr(_import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "Action",
    "AttemptRecord",
    "AttemptState",
    "BrowserNotFound",
    "BrowserSettings",
    "BrowserworkerError",
    "Effect",
    "Engine",
    "Extension",
    "Flow",
    "FlowDefinitionError",
    "FlowLoadError",
    "InputError",
    "LeaseLost",
    "LeaseSettings",
    "LoadedFlow",
    "OverBudget",
    "QueueFull",
    "RecordedResponse",
    "RunNotFound",
    "RunRecord",
    "RunState",
    "SQLiteStore",
    "StepContext",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "UndeclaredEffect",
    "UsageError",
    "Verdict",
    "WorkerSettings",
    "__version__",
    "enqueue",
    "load_flow",
    "open_store",
]
