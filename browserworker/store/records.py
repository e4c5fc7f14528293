"""The typed records the store takes and returns: runs, journal attempts, outbox rows, events,
workers; what the operations' reads return; limit keys; approvals, login sessions and console
sign-ins. Every result of a store call is defined here, none in a manager."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from ..states import AttemptState, RunState

REDACTED = "[redacted]"

__all__ = [
    "REDACTED",
    "ApprovalRecord",
    "AttemptRecord",
    "ConsoleSession",
    "DuplicatePrevented",
    "EventRecord",
    "KeyLimits",
    "LiveLease",
    "LoginSession",
    "NewRun",
    "OutboxRecord",
    "Owner",
    "QueueBacklog",
    "QueueWait",
    "Reconciliation",
    "RestoreFence",
    "RunRecord",
    "StateCount",
    "StepUnknowns",
    "UnknownOpen",
    "WorkerLoad",
    "WorkerRecord",
]


def _fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as a new dict. ``dict(sqlite3.Row)`` looks every column up by name, each a linear
    case-insensitive scan of the names (quadratic in the columns); a Row (not a registered
    Mapping) iterates over its values, so pair them with its keys instead. Whether a row's
    type is a Mapping is asked once per type (an ABC check that fails is not cheap)."""
    mapping = _IS_MAPPING.get(type(row))
    if mapping is None:
        mapping = _IS_MAPPING[type(row)] = isinstance(row, Mapping)
    if mapping:
        return dict(row)
    return dict(zip(row.keys(), row, strict=True))


_IS_MAPPING: dict[type, bool] = {dict: True}


R = TypeVar("R")
_NAMES: dict[type, frozenset[str]] = {}


def _record(cls: type[R], data: dict[str, Any]) -> R:
    """``cls(**data)``, fast: a record's fields become its ``__dict__`` as they are.

    Calling a dataclass with 25 keyword arguments whose names are not interned strings (a
    row's keys never are) matches each name by comparing strings, and a frozen dataclass
    sets each field through ``object.__setattr__``: 12-18 µs per run record, several per
    run on the hot path. The dataclass's ``__init__`` only assigns, so when ``data`` has
    exactly its fields that is all this does; otherwise (a missing column, a stray one, or a
    record class given a ``__post_init__``) it calls ``cls(**data)``.
    """
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = (
            frozenset()
            if hasattr(cls, "__post_init__")  # never equal: always cls(**data)
            else frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
        )
    if data.keys() != names:
        return cls(**data)
    record = object.__new__(cls)
    object.__setattr__(record, "__dict__", data)
    return record


_EMPTY: dict[str, type] = {"{}": dict, "[]": list}  # the commonest stored values, decoded without the parser


def _json(value: str | None) -> Any:
    if value is None:
        return None
    empty = _EMPTY.get(value)
    return empty() if empty is not None else json.loads(value)


# value -> member, a dict lookup (calling the Enum class is several times slower)
_RUN_STATES = {s.value: s for s in RunState}
_ATTEMPT_STATES = {s.value: s for s in AttemptState}


@dataclass(frozen=True)
class Owner:
    """Who holds a lease: a worker id plus where it runs (host, pid, pid start time)."""

    worker: str
    host: str
    pid: int
    pid_start: str | None = None


@dataclass(frozen=True)
class NewRun:
    """What is needed to create a run."""

    id: str
    flow_name: str
    inputs: Mapping[str, Any]
    flow_path: str | None = None
    flow_hash: str | None = None
    queue: str = "default"
    priority: int = 0
    not_before: float | None = None
    secret_fields: tuple[str, ...] = ()
    limit_key: str | None = None
    """The key whose budget the run counts against (``None``: the flow's name)."""


@dataclass(frozen=True)
class RunRecord:
    """A run (a job) as stored."""

    id: str
    flow_name: str
    flow_path: str | None
    flow_hash: str | None
    inputs: dict[str, Any]
    secret_fields: list[str]
    queue: str
    priority: int
    state: RunState
    owner: str | None
    owner_host: str | None
    owner_pid: int | None
    owner_pid_start: str | None
    lease_epoch: int
    lease_expires_at: float | None
    owner_stopped_at: float | None
    needs_reconcile: bool
    created_at: float
    not_before: float | None
    started_at: float | None
    finished_at: float | None
    updated_at: float
    error: str | None
    cancel_requested: bool = False
    lease_losses: int = 0
    limit_key: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunRecord:
        data = _fields(row)
        data["inputs"] = _json(data.pop("inputs_json"))
        data["secret_fields"] = _json(data["secret_fields"])
        data["state"] = _RUN_STATES[data["state"]]
        data["needs_reconcile"] = bool(data["needs_reconcile"])
        data["cancel_requested"] = bool(data.get("cancel_requested", 0))
        return _record(cls, data)

    @property
    def fresh(self) -> bool:
        """Leased for the first time, with nothing to reconcile: the run has no journal yet.

        No attempt can be written without a lease (every journal write is fenced by the
        epoch), and every claim bumps the epoch, so a run at epoch 1 has never been leased
        before this claim; a restore from a backup flags every unfinished run
        ``needs_reconcile``. The executor reads no history for such a run.
        """
        return self.lease_epoch == 1 and not self.needs_reconcile

    def public_inputs(self) -> dict[str, Any]:
        """The inputs with secret fields masked, for display."""
        return {k: (REDACTED if k in self.secret_fields else v) for k, v in self.inputs.items()}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (secret inputs masked)."""
        data = asdict(self)
        data["inputs"] = self.public_inputs()
        return data


@dataclass(frozen=True)
class AttemptRecord:
    """One journal row: an attempt of one step."""

    id: int
    run_id: str
    step_id: str
    kind: str
    attempt_no: int
    request_key: str
    request_fingerprint: str
    state: AttemptState
    lease_epoch: int
    worker: str | None
    intent_at: float
    dispatched_at: float | None
    finished_at: float | None
    result: Any
    decided_by: str | None
    evidence: Any
    error: str | None

    @classmethod
    def new(
        cls,
        *,
        id: int,
        run_id: str,
        step_id: str,
        kind: str,
        attempt_no: int,
        request_key: str,
        request_fingerprint: str,
        state: AttemptState,
        lease_epoch: int,
        worker: str | None,
        intent_at: float,
    ) -> AttemptRecord:
        """A just-journaled attempt, as its row reads: not yet dispatched, finished or decided."""
        return _record(
            cls,
            {
                "id": id,
                "run_id": run_id,
                "step_id": step_id,
                "kind": kind,
                "attempt_no": attempt_no,
                "request_key": request_key,
                "request_fingerprint": request_fingerprint,
                "state": state,
                "lease_epoch": lease_epoch,
                "worker": worker,
                "intent_at": intent_at,
                "dispatched_at": None,
                "finished_at": None,
                "result": None,
                "decided_by": None,
                "evidence": None,
                "error": None,
            },
        )

    def finished(
        self,
        *,
        state: AttemptState,
        finished_at: float,
        result_json: str | None,
        decided_by: str,
        evidence_json: str | None,
        error: str | None,
        dispatched_at: float | None,
    ) -> AttemptRecord:
        """This attempt as it reads after its outcome was written (the store's finish_attempt)."""
        data = dict(self.__dict__)
        data.update(
            state=state,
            finished_at=finished_at,
            result=_json(result_json),
            decided_by=decided_by,
            evidence=_json(evidence_json),
            error=error,
            dispatched_at=dispatched_at,
        )
        return _record(type(self), data)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AttemptRecord:
        data = _fields(row)
        data["state"] = _ATTEMPT_STATES[data["state"]]
        data["result"] = _json(data.pop("result_json"))
        data["evidence"] = _json(data["evidence"])
        return _record(cls, data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OutboxRecord:
    """A request released by the dispatch gate, and its response once recorded."""

    id: int
    attempt_id: int
    run_id: str
    step_id: str
    method: str
    url: str
    released_at: float
    status: int | None
    response_url: str | None
    headers: dict[str, str] | None
    response_at: float | None
    failure: str | None
    failed_at: float | None
    channel: str = "held"  # held | api | websocket | detected (see the store's migration 5)
    final_status: int | None = None  # a redirect chain's last answer (status is the first)
    final_url: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> OutboxRecord:
        data = _fields(row)
        data["headers"] = _json(data.pop("headers_json"))
        return _record(cls, data)

    @property
    def answered(self) -> bool:
        """A response was recorded: the request is no longer in flight."""
        return self.response_at is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WorkerRecord:
    """A worker process in the registry."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: float
    last_heartbeat: float
    health: str
    stopped_at: float | None
    pid_start: str | None = None  # the process's identity beside its pid (leases.process_token)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WorkerRecord:
        data = _fields(row)
        data["queues"] = json.loads(data["queues"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EventRecord:
    """One state transition or decision."""

    id: int
    at: float
    run_id: str
    step_id: str | None
    attempt_no: int | None
    worker: str | None
    lease_epoch: int | None
    kind: str
    from_state: str | None
    to_state: str | None
    decision: str | None
    detail: Any

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EventRecord:
        data = _fields(row)
        data["detail"] = _json(data.pop("detail_json"))
        return _record(cls, data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# what the operations' reads return (browserworker.store.ops)


@dataclass(frozen=True)
class StateCount:
    queue: str
    state: str
    n: int


@dataclass(frozen=True)
class QueueBacklog:
    """A queue's QUEUED runs: all, those claimable now, and when the oldest claimable one
    became claimable (enqueued, or its delay ended)."""

    queue: str
    queued: int
    ready: int | None
    oldest_ready_at: float | None


@dataclass(frozen=True)
class UnknownOpen:
    """Effect attempts of one step that are UNKNOWN now, and how many became so since ``since``."""

    queue: str
    flow_name: str
    step_id: str
    n: int
    recent: int | None


@dataclass(frozen=True)
class StepUnknowns:
    """Every classification of one step's attempts as UNKNOWN, ever and since ``since``."""

    flow_name: str
    step_id: str
    n: int
    recent: int | None


@dataclass(frozen=True)
class DuplicatePrevented:
    """Reconciliations that proved an UNKNOWN effect had landed, by who proved it."""

    flow_name: str
    step_id: str
    decision: str | None
    n: int


@dataclass(frozen=True)
class Reconciliation:
    """A lost lease and the first event after it that settles what was in doubt."""

    run_id: str
    detected_at: float
    kind: str
    from_state: str | None
    to_state: str | None
    decision: str | None
    decided_at: float


@dataclass(frozen=True)
class QueueWait:
    queue: str
    waited: float | None


@dataclass(frozen=True)
class WorkerLoad:
    worker: WorkerRecord
    leased: int


@dataclass(frozen=True)
class LiveLease:
    id: str
    state: str
    owner: str | None
    owner_host: str | None
    owner_pid: int | None
    owner_pid_start: str | None
    lease_epoch: int
    lease_expires_at: float


@dataclass(frozen=True)
class RestoreFence:
    requeued: list[str]  # leased runs handed back to the queue
    flagged: int  # unfinished runs flagged for reconciliation
    last_event_at: float | None  # the restored journal's last event


# the limit keys (browserworker.store.limits; the rules are browserworker.store.limit_rules)


@dataclass(frozen=True)
class KeyLimits:
    """One limit key as ``browserworker limits`` shows it."""

    key: str
    concurrency: int | None
    rate: float | None
    """Claims per minute."""
    tokens: float | None
    paused_until: float | None
    pause_reason: str | None
    live: int
    """Runs of the key LEASED or RUNNING now."""
    claims_last_minute: int
    paused: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# the tables of approvals, login sessions and console sign-ins


@dataclass(frozen=True)
class ApprovalRecord:
    """One request held for a decision, as stored (its summary is masked: no secret in it)."""

    id: int
    run_id: str
    step_id: str
    attempt_no: int
    request_key: str
    fingerprint: str
    summary: dict[str, Any]
    screenshot: str | None
    state: str
    worker: str | None
    created_at: float
    expires_at: float
    decided_at: float | None
    decided_by: str | None
    reason: str | None
    flow_name: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ApprovalRecord:
        return cls(
            id=int(row["id"]),
            run_id=row["run_id"],
            step_id=row["step_id"],
            attempt_no=int(row["attempt_no"]),
            request_key=row["request_key"],
            fingerprint=row["fingerprint"],
            summary=json.loads(row["summary_json"]),
            screenshot=row["screenshot"],
            state=row["state"],
            worker=row["worker"],
            created_at=float(row["created_at"]),
            expires_at=float(row["expires_at"]),
            decided_at=row["decided_at"],
            decided_by=row["decided_by"],
            reason=row["reason"],
            flow_name=row["flow_name"] if "flow_name" in row.keys() else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "flow": self.flow_name,
            "step_id": self.step_id,
            "attempt_no": self.attempt_no,
            "request_key": self.request_key,
            "fingerprint": self.fingerprint,
            "request": self.summary,
            "screenshot": self.screenshot,
            "state": self.state,
            "worker": self.worker,
            "waiting_since": self.created_at,
            "expires_at": self.expires_at,
            "decided_at": self.decided_at,
            "decided_by": self.decided_by,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class LoginSession:
    """A ``login_sessions`` row. ``state`` is the sealed storage state (None: none saved yet)."""

    key: str
    state: bytes | None
    key_id: str | None
    flow_name: str | None
    saved_by: str | None
    created_at: float
    saved_at: float | None
    used_at: float | None
    max_age: float | None
    uses: int
    version: int
    login_owner: str | None
    login_until: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LoginSession:
        state = row["state"]
        return cls(
            key=row["key"],
            state=None if state is None else bytes(state),
            key_id=row["key_id"],
            flow_name=row["flow_name"],
            saved_by=row["saved_by"],
            created_at=row["created_at"],
            saved_at=row["saved_at"],
            used_at=row["used_at"],
            max_age=row["max_age"],
            uses=row["uses"],
            version=row["version"],
            login_owner=row["login_owner"],
            login_until=row["login_until"],
        )

    def claimed(self, now: float) -> bool:
        """Whether a run holds the login claim at ``now``."""
        return self.login_owner is not None and (self.login_until or 0) >= now


@dataclass(frozen=True)
class ConsoleSession:
    """A ``console_sessions`` row."""

    name: str
    role: str
    token_key: str
    created_at: float
    expires_at: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ConsoleSession:
        return cls(
            name=row["name"],
            role=row["role"],
            token_key=row["token_key"],
            created_at=row["created_at"],
            expires_at=row["expires_at"],
        )
