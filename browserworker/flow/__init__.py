"""The authoring API: what a flow file writes and how it is loaded.

:class:`Flow` and its steps (actions and effects, verifiers, dispatch rules: ``_flow``,
``_dispatch_rules``), the login step (``_login``), a flow's browser context and login session
options (``_context_options``, ``_session_options``), loading flow files and their inputs
(``_loader``), and :class:`Extension`, the hooks that hear every run (``_extensions``).
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._context_options import secret_values
    from ._dispatch_rules import ChannelRequest, is_dispatch, rule_problem
    from ._extensions import Extension, Extensions
    from ._flow import Action, Effect, Flow, Login, RecordedResponse, Step, StepContext, Verdict, where_defined
    from ._loader import LoadedFlow, file_hash, load_flow, parse_inputs, unproven_effects

__getattr__, __dir__ = face(__name__)

__all__ = [
    "Action",
    "ChannelRequest",
    "Effect",
    "Extension",
    "Extensions",
    "Flow",
    "LoadedFlow",
    "Login",
    "RecordedResponse",
    "Step",
    "StepContext",
    "Verdict",
    "file_hash",
    "is_dispatch",
    "load_flow",
    "parse_inputs",
    "rule_problem",
    "secret_values",
    "unproven_effects",
    "where_defined",
]
