"""Durable browser sessions for AI agents: each session a run, each tool call a journaled step,
each ``submit`` an effect (intent journaled before the click, every request through the dispatch
gate, a retry answered from the journal and the target, never by clicking again).

:class:`AgentService` holds the sessions (``_service``); ``_calls`` turns journaled tool calls
into the steps they replay as (``_actionable``: an element that will not take one, told at once;
``_settle``: what a call waits for once it has acted); ``_snapshot`` is the page as an agent reads
it (refs); ``_verify`` the verifiers an agent declares as data; ``_answers`` what a call is
answered, in words; ``_export`` writes a session as a flow file that runs with no model.
``_approvals`` asks a person about a submit held for approval beside the console.
``browserworker.mcp`` serves it over MCP.
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._actionable import set_checked
    from ._answers import submit_status
    from ._approvals import AskPerson, PersonDecision
    from ._calls import MaySend
    from ._export import export_flow
    from ._service import AgentPolicy, AgentService
    from ._settle import click_and_settle, go_back, go_to, settled
    from ._uploads import choose_files
    from ._verify import VerifySpec, verifier

__getattr__, __dir__ = face(__name__)

__all__ = [
    "AgentPolicy",
    "AgentService",
    "AskPerson",
    "MaySend",
    "PersonDecision",
    "VerifySpec",
    "choose_files",
    "click_and_settle",
    "export_flow",
    "go_back",
    "go_to",
    "set_checked",
    "settled",
    "submit_status",
    "verifier",
]
