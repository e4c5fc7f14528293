"""browserworker: run browser automations as durable, crash-safe work.

Flows are ordered steps; every effect is journaled as intent before it is dispatched,
and after a crash a verifier proves what happened before anything is replayed.
"""

from .errors import (
    BrowserNotFound,
    BrowserworkerError,
    FlowDefinitionError,
    FlowLoadError,
    InputError,
    LeaseLost,
    QueueFull,
    RunNotFound,
    StoreError,
    UndeclaredEffect,
    UsageError,
)
from .flow import Action, Effect, Flow, RecordedResponse, StepContext, Verdict
from .jobs import enqueue
from .loader import load_flow
from .states import AttemptState, RunState
from .store import SQLiteStore

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AttemptState",
    "BrowserNotFound",
    "BrowserworkerError",
    "Effect",
    "Flow",
    "FlowDefinitionError",
    "FlowLoadError",
    "InputError",
    "LeaseLost",
    "QueueFull",
    "RecordedResponse",
    "RunNotFound",
    "RunState",
    "SQLiteStore",
    "StepContext",
    "StoreError",
    "UndeclaredEffect",
    "UsageError",
    "Verdict",
    "__version__",
    "enqueue",
    "load_flow",
]
