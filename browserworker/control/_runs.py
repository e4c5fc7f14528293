"""Queue-level operations: enqueue, cancel, human review and resolution.

Library functions the CLI (and users' Python code) call; each validates everything before
it writes, so a refused call leaves the store untouched.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RunNotFound, UsageError
from ..flow import LoadedFlow
from ..runtime import new_run_id, validate_run_id
from ..states import AttemptState, RunState
from ..store import limit_rules
from ..store.base import Store
from ..store.records import KeyLimits, NewRun, RunRecord

__all__ = [
    "ReviewItem",
    "cancel",
    "cancel_many",
    "enqueue",
    "manage_limits",
    "parse_decision",
    "requeue",
    "requeue_many",
    "resolve",
    "review_items",
]

_QUEUE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def validate_queue(name: str) -> str:
    if not name or len(name) > 64 or not set(name) <= _QUEUE_NAME_CHARS:
        raise UsageError(f"invalid queue name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return name


def enqueue(
    store: Store,
    loaded: LoadedFlow,
    inputs: Mapping[str, Any],
    *,
    run_id: str | None = None,
    queue: str = "default",
    priority: int = 0,
    delay: float = 0.0,
) -> RunRecord:
    """Validate inputs and queue a run of ``loaded``; durable once this returns.

    Raises :class:`~browserworker.errors.InputError` / :class:`UsageError` (nothing written)
    or :class:`~browserworker.errors.QueueFull` (backpressure, nothing written).
    """
    flow = loaded.flow
    validated = flow.validate_inputs(inputs)
    flow.context_options(validated)  # a function of the inputs that fails says so now, not in a worker
    flow.session_key(validated)  # and a session key
    limit_key = flow.limit_key(validated)  # and its limit key
    validate_queue(queue)
    if delay < 0:
        raise UsageError("--delay must be >= 0 seconds")
    rid = validate_run_id(run_id) if run_id is not None else new_run_id()
    return store.enqueue(
        NewRun(
            id=rid,
            flow_name=flow.name,
            inputs=flow.dump_inputs(validated),
            flow_path=str(loaded.path),
            flow_hash=loaded.file_hash,
            queue=queue,
            priority=priority,
            not_before=store.now() + delay if delay else None,
            secret_fields=tuple(flow.secret_fields()),
            limit_key=limit_key,
        )
    )


def manage_limits(
    open_store: Callable[[bool], Store],
    action: str = "list",
    key: str | None = None,
    *,
    concurrency: int | None = None,
    rate: str | None = None,
    all_keys: bool = False,
) -> list[KeyLimits]:
    """``browserworker limits``: list the keys' budgets, ``set`` one (``rate`` as ``N/s``, ``N/min``
    or ``N/h``) or ``clear`` one (or ``all_keys``); returns every key's budget afterwards. Input
    is checked before the store is opened (``open_store(create)``): bad input writes nothing."""
    if action == "list" and (key or concurrency is not None or rate or all_keys):
        raise UsageError("limits (list) takes no KEY, --concurrency, --rate or --all")
    if action == "set":
        if key is None or all_keys or (concurrency is None and rate is None):
            raise UsageError("limits set needs a KEY and --concurrency N and/or --rate N/min (and no --all)")
        if concurrency is not None and concurrency < 1:
            raise UsageError(f"--concurrency must be a positive whole number, not {concurrency}")
        per_minute = None if rate is None else limit_rules.parse_rate(rate)
        open_store(True).set_limit(limit_rules.check_key(key, "limits set"), concurrency=concurrency, rate=per_minute)
    elif action == "clear":
        if (key is None) == (not all_keys) or concurrency is not None or rate:
            raise UsageError("limits clear needs a KEY or --all (and no --concurrency or --rate)")
        if not open_store(False).clear_limit(None if all_keys else key) and key is not None:
            raise UsageError(f"no budget or pause for limit key {key!r}")
    elif action != "list":
        raise UsageError(f"unknown limits action {action!r}: list, set or clear")
    return open_store(False).limits()


def cancel(store: Store, run_id: str, *, who: str | None = None) -> str:
    """Cancel a run: 'cancelled' (it was queued or in review), 'requested' (it stops at its
    next step boundary, never between an effect's intent and its outcome), or its final state.
    ``who`` (a person's name) is journaled with the cancel. :class:`RunNotFound` for an unknown run."""
    return store.cancel(run_id, who=who)


def requeue(store: Store, run_id: str, *, who: str | None = None) -> RunRecord:
    """Put a FAILED or CANCELLED run back in its queue with its id and journal (its SUCCEEDED
    steps are skipped, its effects keep their request keys); the decision and ``who`` are
    journaled. :class:`UsageError` for a run in any other state, :class:`RunNotFound` for an
    unknown run (nothing written)."""
    return store.requeue(run_id, who=who or _who())


def cancel_many(store: Store, run_ids: Sequence[str], *, who: str | None = None) -> dict[str, str]:
    """:func:`cancel` each run, in one transaction: each id's outcome, or ``"error: ..."``
    for an id that could not be cancelled (the others are)."""
    return _each(store, run_ids, lambda rid: cancel(store, rid, who=who))


def requeue_many(store: Store, run_ids: Sequence[str], *, who: str | None = None) -> dict[str, str]:
    """:func:`requeue` each run, in one transaction: ``"requeued"`` or ``"error: ..."`` per id."""

    def one(rid: str) -> str:
        requeue(store, rid, who=who)
        return "requeued"

    return _each(store, run_ids, one)


def _each(store: Store, run_ids: Sequence[str], act: Callable[[str], object]) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    with store.group():  # isolated: a refused id rolls back only itself
        for rid in dict.fromkeys(run_ids):
            try:
                outcomes[rid] = str(act(rid))
            except UsageError as exc:
                outcomes[rid] = f"error: {exc}"
    return outcomes


@dataclass(frozen=True)
class ReviewItem:
    """One UNKNOWN step of a NEEDS_REVIEW run, with what was known when it was parked."""

    run_id: str
    flow: str
    step_id: str | None
    attempt_no: int | None
    request_key: str | None
    fingerprint: str | None
    reason: str | None
    evidence: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def review_items(store: Store, limit: int = 100) -> list[ReviewItem]:
    """NEEDS_REVIEW runs with their UNKNOWN steps and the evidence captured when classified."""
    items = []
    for run in store.runs_needing_review(limit):
        unknown = [
            a
            for a in store.attempts(run.id)
            if a.state in (AttemptState.UNKNOWN, AttemptState.INTENT) and store.latest_attempt(run.id, a.step_id) == a
        ]
        events = store.events(run.id)
        if not unknown:
            items.append(ReviewItem(run.id, run.flow_name, None, None, None, None, run.error, {}))
        for a in unknown:
            evidence: dict[str, Any] = dict(a.evidence) if isinstance(a.evidence, dict) else {}
            for e in events:
                if (
                    e.step_id == a.step_id
                    and e.attempt_no == a.attempt_no
                    and e.decision == "needs_review"
                    and isinstance(e.detail, dict)
                ):
                    evidence.update({k: v for k, v in e.detail.items() if v is not None})
            evidence["responses"] = [
                {"method": o.method, "url": o.url, "status": o.status, "failure": o.failure} for o in store.outbox(a.id)
            ]
            items.append(
                ReviewItem(
                    run.id,
                    run.flow_name,
                    a.step_id,
                    a.attempt_no,
                    a.request_key,
                    a.request_fingerprint,
                    run.error,
                    evidence,
                )
            )
    return items


def parse_decision(decision: str | None, result_json: str | None) -> tuple[str, Any]:
    """A reviewer's decision (done, not_done, failed) and the JSON result that may go with
    ``done``, checked: :class:`UsageError` says what is wrong."""
    if decision is None:
        raise UsageError("say what happened: --done, --not-done or --failed")
    if decision not in ("done", "not_done", "failed"):
        raise UsageError(f"unknown decision {decision!r}: done, not_done or failed")
    if result_json is not None and decision != "done":
        raise UsageError("--result goes with --done")
    try:
        return decision, json.loads(result_json) if result_json is not None else None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--result is not valid JSON: {exc.msg}") from exc


def resolve(
    store: Store, run_id: str, step_id: str, decision: str, *, result: Any = None, who: str | None = None
) -> RunRecord:
    """Journal a person's decision and re-queue the run (or end it FAILED).
    :class:`RunNotFound` for an unknown run, :class:`UsageError` for one not in NEEDS_REVIEW."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id!r}")
    if run.state != RunState.NEEDS_REVIEW:
        raise UsageError(f"run {run_id} is {run.state}, not NEEDS_REVIEW")
    return store.resolve(run_id, step_id, decision, result=result, who=who or _who())


def _who() -> str:
    try:
        return getpass.getuser()
    except Exception:  # pragma: no cover
        return "unknown"
