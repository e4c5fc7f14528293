"""What people and programs ask of runs: enqueue, cancel, requeue, review, resolve, approve.

``_runs``: creating runs for the workers and the decisions a person takes on them;
``_approvals``: listing, approving and rejecting the effects that wait for a person.
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._approvals import approvals_of_run, approve, list_approvals, reject
    from ._runs import (
        ReviewItem,
        cancel,
        cancel_many,
        enqueue,
        manage_limits,
        parse_decision,
        requeue,
        requeue_many,
        resolve,
        review_items,
        validate_queue,
    )

__getattr__, __dir__ = face(__name__)

__all__ = [
    "ReviewItem",
    "approvals_of_run",
    "approve",
    "cancel",
    "cancel_many",
    "enqueue",
    "list_approvals",
    "manage_limits",
    "parse_decision",
    "reject",
    "requeue",
    "requeue_many",
    "resolve",
    "review_items",
    "validate_queue",
]
