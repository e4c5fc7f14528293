"""Run and attempt states, and which transitions between them are legal."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "RUN_TRANSITIONS",
    "TERMINAL_RUN_STATES",
    "AttemptState",
    "RunState",
    "check_attempt_transition",
    "check_run_transition",
]


class RunState(StrEnum):
    """The life of a run (a job)."""

    QUEUED = "QUEUED"
    LEASED = "LEASED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"


TERMINAL_RUN_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})
"""States a run never leaves by itself (NEEDS_REVIEW and AWAITING_APPROVAL wait for a person instead)."""


class AttemptState(StrEnum):
    """One attempt of one step: the journal row's state.

    Effects use INTENT → SUCCEEDED | FAILED_BEFORE_SEND | FAILED | UNKNOWN, and
    UNKNOWN → SUCCEEDED | NOT_DONE | FAILED once reconciled. NOT_DONE means the attempt
    was dispatched but a verifier proved (after the settle time) that it did not land;
    the step is replayed with the same request key. Actions use RUNNING → SUCCEEDED | FAILED.
    """

    RUNNING = "RUNNING"
    INTENT = "INTENT"
    SUCCEEDED = "SUCCEEDED"
    FAILED_BEFORE_SEND = "FAILED_BEFORE_SEND"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    NOT_DONE = "NOT_DONE"


RUN_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.LEASED, RunState.CANCELLED}),
    RunState.LEASED: frozenset(
        {
            RunState.RUNNING,
            RunState.QUEUED,
            RunState.LEASED,
            RunState.CANCELLED,
            RunState.NEEDS_REVIEW,
            RunState.FAILED,
            RunState.AWAITING_APPROVAL,
        }
    ),
    RunState.RUNNING: frozenset(
        {
            RunState.SUCCEEDED,
            RunState.FAILED,
            RunState.CANCELLED,
            RunState.NEEDS_REVIEW,
            RunState.QUEUED,
            RunState.LEASED,
            RunState.AWAITING_APPROVAL,
        }
    ),
    RunState.NEEDS_REVIEW: frozenset({RunState.QUEUED, RunState.FAILED, RunState.CANCELLED}),
    # parked until a person approves (QUEUED) or rejects (FAILED), or the approval expires (FAILED)
    RunState.AWAITING_APPROVAL: frozenset({RunState.QUEUED, RunState.FAILED, RunState.CANCELLED}),
    RunState.SUCCEEDED: frozenset(),
    RunState.FAILED: frozenset({RunState.QUEUED}),
    RunState.CANCELLED: frozenset({RunState.QUEUED}),
}
"""Each run state and the states it may move to (FAILED and CANCELLED only by a person's
requeue: :func:`browserworker.control._runs.requeue`)."""

_ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.RUNNING: frozenset({AttemptState.SUCCEEDED, AttemptState.FAILED}),
    AttemptState.INTENT: frozenset(
        {AttemptState.SUCCEEDED, AttemptState.FAILED_BEFORE_SEND, AttemptState.FAILED, AttemptState.UNKNOWN}
    ),
    AttemptState.UNKNOWN: frozenset(
        {AttemptState.SUCCEEDED, AttemptState.NOT_DONE, AttemptState.FAILED, AttemptState.FAILED_BEFORE_SEND}
    ),
    AttemptState.SUCCEEDED: frozenset(),
    AttemptState.FAILED_BEFORE_SEND: frozenset(),
    AttemptState.FAILED: frozenset(),
    AttemptState.NOT_DONE: frozenset(),
}


def check_run_transition(old: RunState, new: RunState) -> None:
    """Raise ValueError for a transition the run state machine does not allow."""
    if new not in RUN_TRANSITIONS[old]:
        raise ValueError(f"illegal run transition {old} -> {new}")


def check_attempt_transition(old: AttemptState, new: AttemptState) -> None:
    """Raise ValueError for a transition the attempt state machine does not allow."""
    if new not in _ATTEMPT_TRANSITIONS[old]:
        raise ValueError(f"illegal attempt transition {old} -> {new}")
