"""The dispatch gate: everything a page may send while a step runs, held, detected or refused.

``_gate`` holds an effect's requests until the journal has them, does the same for
``page.request`` calls and WebSocket messages, and detects what may leave without asking
(navigations, beacons, popups, unload sends); ``_outbox`` keeps what came back;
``_approval`` holds an ``approve=`` effect's request for a person; ``_guard`` watches actions and
the gap between steps; ``_unload`` disarms a done effect's page; ``_routes`` is a context's one
route; ``_observed`` records what a verifier looked at. The table of channels is
``docs/channels.md``.
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._approval import ApprovalCheck
    from ._gate import DispatchGate
    from ._guard import ActionGuard, StepGap
    from ._observed import Observed
    from ._outbox import DETECTED, LATE, PAGE_LEFT, POPUP, watch_navigations
    from ._routes import ApiCall, ContextRoute, observe_api, safe_url
    from ._unload import disarm_unload

__getattr__, __dir__ = face(__name__)

__all__ = [
    "DETECTED",
    "LATE",
    "PAGE_LEFT",
    "POPUP",
    "ActionGuard",
    "ApiCall",
    "ApprovalCheck",
    "ContextRoute",
    "DispatchGate",
    "Observed",
    "StepGap",
    "disarm_unload",
    "observe_api",
    "safe_url",
    "watch_navigations",
]
