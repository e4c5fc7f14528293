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
    RunNotFound,
    StoreError,
    UsageError,
)
from .flow import Action, Effect, Flow, RecordedResponse, StepContext, Verdict
from .states import AttemptState, RunState

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
    "RecordedResponse",
    "RunNotFound",
    "RunState",
    "StepContext",
    "StoreError",
    "UsageError",
    "Verdict",
    "__version__",
]
