"""The durable control plane: the :class:`Store` protocol and the shared SQL implementation.

The executor only ever talks to a :class:`Store`. :class:`SQLStore` implements it once
over named queries (``sql/queries.sql``); a dialect subclass supplies the connection,
transactions, the clock and migrations (SQLite now, PostgreSQL later).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from importlib import resources
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import LeaseLost, QueueFull, StoreError, UsageError
from ..canonical import canonical_json
from ..states import RUN_TRANSITIONS, AttemptState, RunState, check_attempt_transition, check_run_transition
from .records import AttemptRecord, EventRecord, NewRun, OutboxRecord, Owner, RunRecord, WorkerRecord, _fields

__all__ = ["GroupSpoiled", "SQLStore", "Store", "load_queries", "read_only"]

F = TypeVar("F", bound=Callable[..., Any])


def read_only(method: F) -> F:
    """Mark a store method that only reads. :class:`~browserworker.store.aio.AsyncStore`
    runs such calls outside a batch's write transaction when they lead the batch."""
    method.read_only = True  # type: ignore[attr-defined]
    return method


class GroupSpoiled(StoreError):
    """A call failed in a group run without savepoints (``group(isolate=False)``): the whole
    group was rolled back and nothing of it is durable; run the batch again isolated."""


@runtime_checkable
class Store(Protocol):
    """What the executor and the CLI need from a durable store.

    Every write that changes a run or its journal is *fenced*: it names the lease epoch
    the caller holds and raises :class:`LeaseLost` when that epoch is no longer current
    (or, with ``margin``, when the lease has less than ``margin`` seconds left).
    """

    def now(self) -> float: ...
    def close(self) -> None: ...

    # runs
    def create_run(self, run: NewRun) -> RunRecord: ...
    def get_run(self, run_id: str) -> RunRecord | None: ...
    def list_runs(self, state: RunState | None = None, limit: int = 100) -> list[RunRecord]: ...
    def claim_run(self, run_id: str, owner: Owner, ttl: float, *, skew: float = 0.0,
                  takeover_epoch: int | None = None) -> RunRecord | None: ...
    def heartbeat(self, run_id: str, epoch: int, ttl: float) -> None: ...
    def cancel_requested(self, run_id: str) -> bool: ...
    def set_run_state(self, run_id: str, epoch: int, state: RunState, *, worker: str | None = None,
                      error: str | None = None, decision: str | None = None) -> RunRecord: ...
    def advance_run(self, run_id: str, epoch: int, state: RunState, *, worker: str | None = None,
                    error: str | None = None, decision: str | None = None) -> None: ...
    def clear_reconcile(self, run_id: str, epoch: int) -> None: ...

    # journal
    def begin_attempt(self, run_id: str, epoch: int, step_id: str, kind: str, request_key: str,
                      fingerprint: str, *, worker: str | None = None, margin: float = 0.0) -> AttemptRecord: ...
    def mark_dispatched(self, attempt: AttemptRecord, epoch: int, method: str, url: str, *,
                        margin: float = 0.0, channel: str = "held") -> int: ...
    def record_response(self, outbox_id: int, status: int, url: str, headers: Mapping[str, str]) -> None: ...
    def record_final(self, outbox_id: int, status: int, url: str) -> None: ...
    def record_request_failed(self, outbox_id: int, failure: str) -> None: ...
    def finish_attempt(self, attempt: AttemptRecord, epoch: int, state: AttemptState, *,
                       decided_by: str, result: Any = None, evidence: Any = None, error: str | None = None,
                       worker: str | None = None, dispatched: bool = False) -> AttemptRecord: ...
    def get_attempt(self, attempt_id: int) -> AttemptRecord: ...
    def attempts(self, run_id: str) -> list[AttemptRecord]: ...
    def latest_attempt(self, run_id: str, step_id: str) -> AttemptRecord | None: ...
    def outbox(self, attempt_id: int) -> list[OutboxRecord]: ...
    def events(self, run_id: str) -> list[EventRecord]: ...
    def restored_at(self, run_id: str) -> float | None: ...
    def history(self, run_id: str) -> tuple[list[AttemptRecord], float | None]: ...
    def effect_boundary(self, run_id: str, step_id: str) -> tuple[bool, AttemptRecord | None]: ...
    def record_event(self, run_id: str, kind: str, *, step_id: str | None = None, attempt_no: int | None = None,
                     worker: str | None = None, epoch: int | None = None, decision: str | None = None,
                     detail: Any = None) -> None: ...

    # the fleet
    def enqueue(self, run: NewRun) -> RunRecord: ...
    def set_queue_limit(self, queue: str, max_depth: int | None) -> None: ...
    def queue_limits(self) -> dict[str, int | None]: ...
    def claim_next(self, owner: Owner, queues: Sequence[str], ttl: float) -> RunRecord | None:
        """Atomically lease the next run of ``queues``: highest priority, then oldest."""
        ...

    def reclaim_expired(self, *, skew: float, max_lease_losses: int, worker: str | None = None,
                        limit: int = 100) -> list[RunRecord]: ...
    def reclaim_dead_owners(self, host: str, is_gone: Callable[[RunRecord], bool], *, max_lease_losses: int,
                            worker: str | None = None) -> list[RunRecord]: ...
    def next_expiry_in(self) -> float | None: ...
    def release_run(self, run_id: str, epoch: int, *, worker: str | None = None) -> None: ...
    def cancel(self, run_id: str) -> str: ...
    def resolve(self, run_id: str, step_id: str, decision: str, *, result: Any = None, who: str) -> RunRecord: ...
    def register_worker(self, owner: Owner, queues: Sequence[str], concurrency: int) -> None: ...
    def worker_heartbeat(self, worker_id: str) -> None: ...
    def mark_worker(self, worker_id: str, health: str) -> None: ...
    def workers(self) -> list[WorkerRecord]: ...
    def runs_needing_review(self, limit: int = 100) -> list[RunRecord]: ...


# set_run_state's narrow updates (the generic query sets every column, so rewrites every index)
_STATE_QUERY = {RunState.RUNNING: "start_run", RunState.SUCCEEDED: "end_run", RunState.FAILED: "end_run",
                RunState.CANCELLED: "end_run", RunState.NEEDS_REVIEW: "end_run"}

# states only one state may precede: set_run_state's single-statement path
_ONLY_FROM = {to: str(froms[0]) for to in RunState
              if len(froms := [s for s in RunState if to in RUN_TRANSITIONS[s]]) == 1}


def _attempt_beside(row: Mapping[str, Any], column: str) -> tuple[Any, AttemptRecord | None]:
    """A row of an attempt's columns plus one more (``column``), as ``(that value, the
    attempt)``; the attempt is None where a LEFT JOIN found none (its columns all NULL)."""
    data = _fields(row)
    value = data.pop(column)
    return value, None if data["id"] is None else AttemptRecord.from_row(data)


_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.M)


def load_queries(package: str, filename: str) -> dict[str, str]:
    """Parse a ``.sql`` file of ``-- name: X`` sections into ``{name: sql}``."""
    text = resources.files(package).joinpath(filename).read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).strip()
    return queries


class SQLStore:
    """The :class:`Store` logic, once, over named queries and a dialect's connection.

    Subclasses implement :meth:`_transaction` (a context manager yielding a cursor-like
    object with ``execute(sql, params)`` returning rows as mappings and ``rowcount``),
    :meth:`_read` and :meth:`now`.
    """

    queries: dict[str, str]

    # -- dialect hooks ------------------------------------------------------------

    def now(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _read(self, query: str, params: Mapping[str, Any]) -> list[Mapping[str, Any]]:  # pragma: no cover
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------

    def _exec(self, tx: Any, _query: str, **params: Any) -> int:
        return tx.execute(self.queries[_query], params).rowcount

    def _one(self, _query: str, **params: Any) -> Mapping[str, Any] | None:
        rows = self._read(self.queries[_query], params)
        return rows[0] if rows else None

    @read_only
    def ops_rows(self, _query: str, **params: Any) -> list[Mapping[str, Any]]:
        """Rows of a read-only named query of the ``-- ops`` section (metrics, status, health)."""
        return self._read(self.queries[_query], params)

    def _event(self, tx: Any, run_id: str, kind: str, *, now: float, step_id: str | None = None,
               attempt_no: int | None = None, worker: str | None = None, epoch: int | None = None,
               from_state: str | None = None, to_state: str | None = None, decision: str | None = None,
               detail: Any = None) -> None:
        tx.execute(self.queries["insert_event"],
                   (now, run_id, step_id, attempt_no, worker, epoch, kind,
                    # plain str: the driver adapts a str subclass (a state) the slow way
                    None if from_state is None else str(from_state), None if to_state is None else str(to_state),
                    decision, None if detail is None else canonical_json(detail)))

    def _lease_lost(self, run_id: str, epoch: int, margin: float, what: str) -> LeaseLost:
        run = self.get_run(run_id)
        if run is None:
            return LeaseLost(f"{what}: run {run_id} does not exist")
        if run.lease_epoch != epoch:
            return LeaseLost(f"{what}: run {run_id} is now at lease epoch {run.lease_epoch} (owner {run.owner}), "
                             f"not {epoch}")
        left = (run.lease_expires_at or 0) - self.now()
        return LeaseLost(f"{what}: lease of run {run_id} has {left:.1f}s left, less than the {margin:.1f}s margin")

    # -- runs -----------------------------------------------------------------------

    def create_run(self, run: NewRun) -> RunRecord:
        now = self.now()
        with self._transaction() as tx:
            self._exec(tx, "insert_run", id=run.id, flow_name=run.flow_name, flow_path=run.flow_path,
                       flow_hash=run.flow_hash, inputs_json=canonical_json(dict(run.inputs)),
                       secret_fields=canonical_json(sorted(run.secret_fields)), queue=run.queue,
                       priority=run.priority, not_before=run.not_before, now=now)
            self._event(tx, run.id, "run_created", now=now, to_state=RunState.QUEUED,
                        detail={"flow": run.flow_name, "queue": run.queue})
        created = self.get_run(run.id)
        assert created is not None
        return created

    @read_only
    def get_run(self, run_id: str) -> RunRecord | None:
        row = self._one("get_run", id=run_id)
        return None if row is None else RunRecord.from_row(row)

    @read_only
    def list_runs(self, state: RunState | None = None, limit: int = 100) -> list[RunRecord]:
        if state is None:
            rows = self._read(self.queries["list_runs"], {"limit": limit})
        else:
            rows = self._read(self.queries["list_runs_in_state"], {"state": str(state), "limit": limit})
        return [RunRecord.from_row(r) for r in rows]

    def claim_run(self, run_id: str, owner: Owner, ttl: float, *, skew: float = 0.0,
                  takeover_epoch: int | None = None) -> RunRecord | None:
        """Atomically lease a run; None if someone else holds it. Bumps the lease epoch."""
        now = self.now()
        with self._transaction() as tx:
            before = tx.execute(self.queries["get_run"], {"id": run_id}).fetchone()
            if before is None:
                return None
            n = self._exec(tx, "claim_run", id=run_id, owner=owner.worker, host=owner.host, pid=owner.pid,
                           pid_start=owner.pid_start, now=now, ttl=ttl, skew=skew,
                           takeover_epoch=-1 if takeover_epoch is None else takeover_epoch)
            if n != 1:
                return None
            old_state = before["state"]
            if old_state == RunState.QUEUED:
                decision = "claimed"
            elif takeover_epoch is not None and before["lease_epoch"] == takeover_epoch:
                decision = "owner_dead"
            else:
                decision = "lease_expired"
            self._event(tx, run_id, "lease_claimed", now=now, worker=owner.worker, epoch=before["lease_epoch"] + 1,
                        from_state=old_state, to_state=RunState.LEASED, decision=decision,
                        detail={"previous_owner": before["owner"], "previous_epoch": before["lease_epoch"],
                                "ttl": ttl})
        return self.get_run(run_id)

    def heartbeat(self, run_id: str, epoch: int, ttl: float) -> None:
        """Extend the lease; :class:`LeaseLost` if it is no longer ours or already expired."""
        with self._transaction() as tx:
            if self._exec(tx, "heartbeat", id=run_id, epoch=epoch, now=self.now(), ttl=ttl) != 1:
                raise self._lease_lost(run_id, epoch, 0.0, "heartbeat")

    @read_only
    def cancel_requested(self, run_id: str) -> bool:
        """Whether someone asked to cancel the run (read at every step boundary: one column)."""
        row = self._one("run_cancel_requested", id=run_id)
        return bool(row and row["cancel_requested"])

    def set_run_state(self, run_id: str, epoch: int, state: RunState, *, worker: str | None = None,
                      error: str | None = None, decision: str | None = None) -> RunRecord:
        """Move the run to ``state`` (fenced by ``epoch``); returns the run as it is now."""
        with self._transaction() as tx:
            self._move_run(tx, run_id, epoch, state, worker, error, decision)
            row = tx.execute(self.queries["get_run"], {"id": run_id}).fetchone()
        return RunRecord.from_row(row)

    def advance_run(self, run_id: str, epoch: int, state: RunState, *, worker: str | None = None,
                    error: str | None = None, decision: str | None = None) -> None:
        """:meth:`set_run_state` for a caller that does not use the run afterwards (the
        executor's RUNNING transition): the same write, without reading 25 columns back."""
        with self._transaction() as tx:
            self._move_run(tx, run_id, epoch, state, worker, error, decision)

    def _move_run(self, tx: Any, run_id: str, epoch: int, state: RunState, worker: str | None, error: str | None,
                  decision: str | None) -> None:
        """The fenced transition and its event, in the caller's transaction.

        A state with one legal predecessor (RUNNING, SUCCEEDED: the happy path) is tried as a
        single update conditioned on that predecessor; only when it matches nothing is the run
        read, to tell an illegal transition (ValueError) from a lost lease.
        """
        now = self.now()
        only_from = _ONLY_FROM.get(state)
        params = {"id": run_id, "epoch": epoch, "state": str(state), "error": error, "now": now,
                  "from_state": only_from}
        query = self.queries[_STATE_QUERY.get(state, "set_run_state")]
        from_state = only_from
        if only_from is None or tx.execute(query, params).rowcount != 1:
            before = tx.execute(self.queries["run_fence"], {"id": run_id}).fetchone()
            if before is not None and before["lease_epoch"] == epoch:
                check_run_transition(RunState(before["state"]), state)
            from_state = before["state"] if before else None
            params["from_state"] = None
            if tx.execute(query, params).rowcount != 1:
                raise self._lease_lost(run_id, epoch, 0.0, f"set run state {state}")
        self._event(tx, run_id, "run_state", now=now, worker=worker, epoch=epoch,
                    from_state=from_state, to_state=state, decision=decision,
                    detail={"error": error} if error else None)

    def clear_reconcile(self, run_id: str, epoch: int) -> None:
        with self._transaction() as tx:
            self._exec(tx, "clear_reconcile", id=run_id, epoch=epoch, now=self.now())

    # -- journal --------------------------------------------------------------------

    def begin_attempt(self, run_id: str, epoch: int, step_id: str, kind: str, request_key: str,
                      fingerprint: str, *, worker: str | None = None, margin: float = 0.0) -> AttemptRecord:
        """Journal a new attempt (INTENT for effects, RUNNING for actions), fenced."""
        now = self.now()
        state = AttemptState.INTENT if kind == "effect" else AttemptState.RUNNING
        with self._transaction() as tx:
            next_no = tx.execute(self.queries["next_attempt_no"], {"run_id": run_id, "step_id": step_id})
            attempt_no = next_no.fetchone()[0]
            cursor = tx.execute(self.queries["insert_attempt"],
                                {"run_id": run_id, "step_id": step_id, "kind": kind, "attempt_no": attempt_no,
                                 "request_key": request_key, "fingerprint": fingerprint, "state": str(state),
                                 "epoch": epoch, "worker": worker, "now": now, "margin": margin})
            if cursor.rowcount != 1:
                raise self._lease_lost(run_id, epoch, margin, f"intent for {step_id}")
            attempt = AttemptRecord.new(id=cursor.lastrowid, run_id=run_id, step_id=step_id, kind=kind,
                                        attempt_no=attempt_no, request_key=request_key,
                                        request_fingerprint=fingerprint, state=state, lease_epoch=epoch, worker=worker,
                                        intent_at=now)
            if kind == "effect":
                self._event(tx, run_id, "intent", now=now, step_id=step_id, attempt_no=attempt.attempt_no,
                            worker=worker, epoch=epoch, to_state=state,
                            detail={"request_key": request_key, "fingerprint": fingerprint})
        return attempt

    def mark_dispatched(self, attempt: AttemptRecord, epoch: int, method: str, url: str, *,
                        margin: float = 0.0, channel: str = "held") -> int:
        """The dispatch gate's commit: ``dispatched_at`` plus an outbox row, fenced. Returns the outbox id.

        ``channel="detected"`` journals what the browser let out (or may have) without asking the
        gate; it is written with no margin (it has left already), fenced by the epoch alone.
        """
        now = self.now()
        with self._transaction() as tx:
            if self._exec(tx, "mark_dispatched", attempt_id=attempt.id, epoch=epoch, now=now, margin=margin) != 1:
                raise self._lease_lost(attempt.run_id, epoch, margin, f"dispatch of {attempt.step_id}")
            outbox_id = tx.execute(self.queries["insert_outbox"],
                                   {"attempt_id": attempt.id, "run_id": attempt.run_id, "step_id": attempt.step_id,
                                    "method": method, "url": url, "now": now, "channel": channel}).lastrowid
            detail: dict[str, Any] = {"method": method, "url": url, "outbox_id": outbox_id}
            if channel != "held":
                detail["channel"] = channel
            self._event(tx, attempt.run_id, "dispatched", now=now, step_id=attempt.step_id,
                        attempt_no=attempt.attempt_no, worker=attempt.worker, epoch=epoch, detail=detail)
        return int(outbox_id)

    def record_final(self, outbox_id: int, status: int, url: str) -> None:
        """Evidence: the last answer of a redirect chain, unfenced, in its own commit."""
        with self._transaction() as tx:
            self._exec(tx, "record_final", id=outbox_id, status=status, url=url)

    def record_response(self, outbox_id: int, status: int, url: str, headers: Mapping[str, str]) -> None:
        """Evidence, not a decision: written unfenced, in its own commit."""
        with self._transaction() as tx:
            self._exec(tx, "record_response", id=outbox_id, status=status, response_url=url,
                       headers_json=canonical_json(dict(headers)), now=self.now())

    def record_request_failed(self, outbox_id: int, failure: str) -> None:
        with self._transaction() as tx:
            self._exec(tx, "record_request_failed", id=outbox_id, failure=failure, now=self.now())

    def finish_attempt(self, attempt: AttemptRecord, epoch: int, state: AttemptState, *,
                       decided_by: str, result: Any = None, evidence: Any = None, error: str | None = None,
                       worker: str | None = None, dispatched: bool = False) -> AttemptRecord:
        """Move an attempt out of INTENT/RUNNING/UNKNOWN, fenced by the run's current epoch.

        ``dispatched=True`` also sets ``dispatched_at`` if nothing set it yet: something of the
        attempt left (the gate saw it) although its own journal write did not get through.

        Returns the attempt as it now reads, built from ``attempt`` and what this update wrote
        (result and evidence as they read back from their JSON) rather than read in full.
        """
        check_attempt_transition(attempt.state, state)
        now = self.now()
        result_json = None if result is None else canonical_json(result)
        evidence_json = None if evidence is None else canonical_json(evidence)
        with self._transaction() as tx:
            changed = self._exec(tx, "finish_attempt", attempt_id=attempt.id, from_state=str(attempt.state),
                                 state=str(state), now=now, epoch=epoch, result_json=result_json,
                                 decided_by=decided_by, evidence=evidence_json, error=error,
                                 dispatched=dispatched)
            if changed != 1:
                current = tx.execute(self.queries["get_attempt"], {"id": attempt.id}).fetchone()
                if current is not None and current["state"] != attempt.state:
                    raise LeaseLost(f"attempt {attempt.request_key}#{attempt.attempt_no} is already "
                                    f"{current['state']}, not {attempt.state}")
                raise self._lease_lost(attempt.run_id, epoch, 0.0, f"outcome of {attempt.step_id}")
            self._event(tx, attempt.run_id, "attempt_state", now=now, step_id=attempt.step_id,
                        attempt_no=attempt.attempt_no, worker=worker, epoch=epoch, from_state=attempt.state,
                        to_state=state, decision=decided_by,
                        detail={"evidence": evidence, "error": error} if (evidence or error) else None)
            # of the columns this update did not set, only dispatched_at may have changed since
            # the caller read ``attempt`` (the gate sets it); the others never change
            dispatched_at = tx.execute(self.queries["dispatched_at"], {"id": attempt.id}).fetchone()[0]
        return attempt.finished(state=AttemptState(state), finished_at=now, result_json=result_json,
                                decided_by=decided_by, evidence_json=evidence_json, error=error,
                                dispatched_at=dispatched_at)

    @read_only
    def get_attempt(self, attempt_id: int) -> AttemptRecord:
        row = self._one("get_attempt", id=attempt_id)
        if row is None:
            raise KeyError(attempt_id)
        return AttemptRecord.from_row(row)

    @read_only
    def attempts(self, run_id: str) -> list[AttemptRecord]:
        return [AttemptRecord.from_row(r) for r in self._read(self.queries["attempts_of_run"], {"run_id": run_id})]

    @read_only
    def latest_attempt(self, run_id: str, step_id: str) -> AttemptRecord | None:
        row = self._one("latest_attempt", run_id=run_id, step_id=step_id)
        return None if row is None else AttemptRecord.from_row(row)

    @read_only
    def outbox(self, attempt_id: int) -> list[OutboxRecord]:
        rows = self._read(self.queries["outbox_of_attempt"], {"attempt_id": attempt_id})
        return [OutboxRecord.from_row(r) for r in rows]

    @read_only
    def events(self, run_id: str) -> list[EventRecord]:
        return [EventRecord.from_row(r) for r in self._read(self.queries["events_of_run"], {"run_id": run_id})]

    @read_only
    def restored_at(self, run_id: str) -> float | None:
        """When the run was last restored from a backup, or None (see :mod:`browserworker.backup`)."""
        row = self._one("restored_at", run_id=run_id)
        return None if row is None or row["at"] is None else float(row["at"])

    @read_only
    def history(self, run_id: str) -> tuple[list[AttemptRecord], float | None]:
        """What a run's new pass starts from: :meth:`attempts` and :meth:`restored_at`, in one
        call (one round trip to the store's thread) and one statement."""
        attempts, at = [], None
        for row in self._read(self.queries["history"], {"run_id": run_id}):
            at, attempt = _attempt_beside(row, "restored_at")
            if attempt is not None:
                attempts.append(attempt)
        return attempts, None if at is None else float(at)

    @read_only
    def effect_boundary(self, run_id: str, step_id: str) -> tuple[bool, AttemptRecord | None]:
        """What the executor reads at the boundary before an effect, in one call (one
        statement): whether a cancel was asked (:meth:`cancel_requested`) and the step's
        :meth:`latest_attempt`."""
        row = self._one("effect_boundary", run_id=run_id, step_id=step_id)
        if row is None:
            return False, None
        cancelled, latest = _attempt_beside(row, "run_cancel_requested")
        return bool(cancelled), latest

    def record_event(self, run_id: str, kind: str, *, step_id: str | None = None, attempt_no: int | None = None,
                     worker: str | None = None, epoch: int | None = None, decision: str | None = None,
                     detail: Any = None) -> None:
        with self._transaction() as tx:
            self._event(tx, run_id, kind, now=self.now(), step_id=step_id, attempt_no=attempt_no, worker=worker,
                        epoch=epoch, decision=decision, detail=detail)


    # -- the fleet --------------------------------------------------------------------

    def enqueue(self, run: NewRun) -> RunRecord:
        """Create a queued run, refusing (:class:`QueueFull`, nothing written) past the queue's max depth."""
        now = self.now()
        with self._transaction() as tx:
            limit = tx.execute(self.queries["get_queue"], {"name": run.queue}).fetchone()
            if limit is not None and limit["max_depth"] is not None:
                depth = tx.execute(self.queries["queued_depth"], {"queue": run.queue}).fetchone()["depth"]
                if depth >= limit["max_depth"]:
                    raise QueueFull(f"queue {run.queue!r} is full ({depth} queued, max depth {limit['max_depth']}); "
                                    "nothing was enqueued")
            if tx.execute(self.queries["get_run"], {"id": run.id}).fetchone() is not None:
                raise UsageError(f"a run with id {run.id!r} already exists")
            self._exec(tx, "insert_run", id=run.id, flow_name=run.flow_name, flow_path=run.flow_path,
                       flow_hash=run.flow_hash, inputs_json=canonical_json(dict(run.inputs)),
                       secret_fields=canonical_json(sorted(run.secret_fields)), queue=run.queue,
                       priority=run.priority, not_before=run.not_before, now=now)
            self._event(tx, run.id, "run_created", now=now, to_state=RunState.QUEUED,
                        detail={"flow": run.flow_name, "queue": run.queue, "priority": run.priority,
                                "not_before": run.not_before})
        created = self.get_run(run.id)
        assert created is not None
        return created

    def set_queue_limit(self, queue: str, max_depth: int | None) -> None:
        with self._transaction() as tx:
            self._exec(tx, "set_queue", name=queue, max_depth=max_depth)

    @read_only
    def queue_limits(self) -> dict[str, int | None]:
        return {r["name"]: r["max_depth"] for r in self._read(self.queries["list_queues"], {})}

    def claim_next(self, owner: Owner, queues: Sequence[str], ttl: float) -> RunRecord | None:
        """Atomically lease the next run of ``queues``: highest priority, then oldest."""
        now = self.now()
        who = {"owner": owner.worker, "host": owner.host, "pid": owner.pid, "pid_start": owner.pid_start,
               "now": now, "ttl": ttl}
        with self._transaction() as tx:
            if len(queues) == 1:
                first = tx.execute(self.queries["next_queued_id"], {"queue": queues[0], "now": now}).fetchone()
                run_id = None if first is None else first["id"]
            else:
                best = None
                for queue in queues:
                    cand = tx.execute(self.queries["next_queued_full"], {"queue": queue, "now": now}).fetchone()
                    if cand is not None:
                        key = (-cand["priority"], cand["created_at"], cand["id"])
                        if best is None or key < best[0]:
                            best = (key, cand["id"])
                run_id = None if best is None else best[1]
            # in the write transaction: the run read above is still QUEUED
            if run_id is None or self._exec(tx, "claim_queued_by_id", **who, id=run_id) != 1:
                return None
            row = tx.execute(self.queries["get_run"], {"id": run_id}).fetchone()
            self._event(tx, row["id"], "lease_claimed", now=now, worker=owner.worker, epoch=row["lease_epoch"],
                        from_state=RunState.QUEUED, to_state=RunState.LEASED, decision="claimed",
                        detail={"ttl": ttl, "waited": now - row["created_at"]})
            return RunRecord.from_row(row)

    def reclaim_expired(self, *, skew: float, max_lease_losses: int, worker: str | None = None,
                        limit: int = 100) -> list[RunRecord]:
        """Send runs whose lease expired (plus ``skew``) back to QUEUED, flagged for reconciliation.

        A run that has lost its lease more than ``max_lease_losses`` times goes to NEEDS_REVIEW
        instead (a poison run). The owning worker is marked unhealthy.
        """
        now = self.now()
        reclaimed = []
        for row in self._read(self.queries["expired_leases"], {"now": now, "skew": skew, "limit": limit}):
            poison = row["lease_losses"] + 1 > max_lease_losses
            state = RunState.NEEDS_REVIEW if poison else RunState.QUEUED
            error = (f"lost its lease {row['lease_losses'] + 1} times (last owner {row['owner']})" if poison
                     else None)
            with self._transaction() as tx:
                n = self._exec(tx, "requeue_expired", id=row["id"], epoch=row["lease_epoch"], state=str(state),
                               error=error, now=now, skew=skew)
                if n != 1:
                    continue  # renewed or taken meanwhile
                self._event(tx, row["id"], "lease_expired", now=now, worker=worker, epoch=row["lease_epoch"] + 1,
                            from_state=row["state"], to_state=state, decision="poison" if poison else "requeued",
                            detail={"previous_owner": row["owner"], "expired_at": row["lease_expires_at"],
                                    "detected_at": now, "lease_losses": row["lease_losses"] + 1})
                if row["owner"]:
                    self._exec(tx, "mark_worker", id=row["owner"], health="unhealthy", now=now)
            reclaimed.append(self.get_run(row["id"]))
        return [r for r in reclaimed if r is not None]

    @read_only
    def next_expiry_in(self) -> float | None:
        """Seconds until the earliest lease of a LEASED or RUNNING run expires, by the store's
        clock (negative once it has); None if no lease is held."""
        row = self._one("next_lease_expiry")
        return None if row is None or row["at"] is None else float(row["at"]) - self.now()

    def reclaim_dead_owners(self, host: str, is_gone: Callable[[RunRecord], bool], *, max_lease_losses: int,
                            worker: str | None = None) -> list[RunRecord]:
        """Requeue runs held on ``host`` by owners ``is_gone`` proves dead, without waiting for
        expiry; ``owner_stopped_at`` is now, for the settle rule. The runs of ``worker`` (the
        caller, alive) are not looked at."""
        reclaimed = []
        for row in self._read(self.queries["owned_on_host"], {"host": host, "worker": worker}):
            run = RunRecord.from_row(row)
            if not is_gone(run):
                continue
            now = self.now()
            poison = run.lease_losses + 1 > max_lease_losses
            state = RunState.NEEDS_REVIEW if poison else RunState.QUEUED
            with self._transaction() as tx:
                n = self._exec(tx, "requeue_dead_owner", id=run.id, epoch=run.lease_epoch, state=str(state), now=now,
                               error=f"lost its owner {run.lease_losses + 1} times" if poison else None)
                if n != 1:
                    continue
                self._event(tx, run.id, "lease_expired", now=now, worker=worker, epoch=run.lease_epoch + 1,
                            from_state=run.state, to_state=state, decision="poison" if poison else "owner_dead",
                            detail={"previous_owner": run.owner, "expired_at": run.lease_expires_at,
                                    "detected_at": now, "owner_pid": run.owner_pid,
                                    "lease_losses": run.lease_losses + 1})
                if run.owner:
                    self._exec(tx, "mark_worker", id=run.owner, health="unhealthy", now=now)
            again = self.get_run(run.id)
            if again is not None:
                reclaimed.append(again)
        return reclaimed

    def release_run(self, run_id: str, epoch: int, *, worker: str | None = None) -> None:
        """Hand a run back (QUEUED now, no expiry wait); bumps the epoch so this owner is fenced off."""
        now = self.now()
        with self._transaction() as tx:
            before = tx.execute(self.queries["get_run"], {"id": run_id}).fetchone()
            if self._exec(tx, "release_run", id=run_id, epoch=epoch, now=now) != 1:
                raise self._lease_lost(run_id, epoch, 0.0, "release")
            self._event(tx, run_id, "lease_released", now=now, worker=worker, epoch=epoch,
                        from_state=before["state"], to_state=RunState.QUEUED, decision="released")

    def cancel(self, run_id: str) -> str:
        """Cancel a run: queued or waiting for review → CANCELLED now ('cancelled'); leased or
        running → asked to stop at its next step boundary ('requested'); else its state."""
        now = self.now()
        with self._transaction() as tx:
            before = tx.execute(self.queries["get_run"], {"id": run_id}).fetchone()
            if before is None:
                raise UsageError(f"no run {run_id!r}")
            if self._exec(tx, "cancel_queued", id=run_id, now=now) == 1:
                self._event(tx, run_id, "run_state", now=now, from_state=before["state"], to_state=RunState.CANCELLED,
                            decision="cancelled")
                return "cancelled"
            if self._exec(tx, "request_cancel", id=run_id, now=now) == 1:
                self._event(tx, run_id, "cancel_requested", now=now, decision="cancel_requested")
                return "requested"
        return str(before["state"])

    def resolve(self, run_id: str, step_id: str, decision: str, *, result: Any = None, who: str) -> RunRecord:
        """A person's decision on an UNKNOWN step of a NEEDS_REVIEW run.

        ``done`` → SUCCEEDED (skipped on re-run), ``not_done`` → NOT_DONE (replayed with the
        same key), ``failed`` → FAILED and the run ends FAILED. The run is re-queued unless failed.
        """
        if decision not in ("done", "not_done", "failed"):
            raise UsageError(f"unknown decision {decision!r}")
        now = self.now()
        with self._transaction() as tx:
            run = tx.execute(self.queries["get_run"], {"id": run_id}).fetchone()
            if run is None:
                raise UsageError(f"no run {run_id!r}")
            if run["state"] != RunState.NEEDS_REVIEW:
                raise UsageError(f"run {run_id} is {run['state']}, not NEEDS_REVIEW")
            latest = tx.execute(self.queries["latest_attempt"], {"run_id": run_id, "step_id": step_id}).fetchone()
            state = {"done": AttemptState.SUCCEEDED, "not_done": AttemptState.NOT_DONE,
                     "failed": AttemptState.FAILED}[decision]
            evidence = {"who": who, "decision": decision, "at": now,
                        "before": None if latest is None else {"state": latest["state"], "error": latest["error"],
                                                               "evidence": latest["evidence"]}}
            if latest is not None and latest["state"] in (AttemptState.UNKNOWN, AttemptState.INTENT):
                self._exec(tx, "resolve_attempt", attempt_id=latest["id"], state=str(state), now=now,
                           result_json=None if result is None else canonical_json(result), decided_by=f"human:{who}",
                           evidence=canonical_json(evidence))
                self._event(tx, run_id, "attempt_state", now=now, step_id=step_id, attempt_no=latest["attempt_no"],
                            worker=who, from_state=latest["state"], to_state=state, decision=f"human:{decision}",
                            detail=evidence)
            elif decision != "failed":
                raise UsageError(f"step {step_id!r} of run {run_id} has no UNKNOWN attempt to resolve")
            if decision == "failed":
                self._exec(tx, "fail_reviewed", id=run_id, error=f"resolved as failed by {who}", now=now)
                to = RunState.FAILED
            else:
                self._exec(tx, "requeue_reviewed", id=run_id, now=now)
                to = RunState.QUEUED
            self._event(tx, run_id, "run_state", now=now, worker=who, from_state=RunState.NEEDS_REVIEW, to_state=to,
                        decision=f"resolved:{decision}", detail=evidence)
        resolved = self.get_run(run_id)
        assert resolved is not None
        return resolved

    def register_worker(self, owner: Owner, queues: Sequence[str], concurrency: int) -> None:
        with self._transaction() as tx:
            self._exec(tx, "register_worker", id=owner.worker, host=owner.host, pid=owner.pid,
                       queues=canonical_json(list(queues)), concurrency=concurrency, now=self.now())

    def worker_heartbeat(self, worker_id: str) -> None:
        with self._transaction() as tx:
            self._exec(tx, "worker_heartbeat", id=worker_id, now=self.now())

    def mark_worker(self, worker_id: str, health: str) -> None:
        with self._transaction() as tx:
            self._exec(tx, "mark_worker", id=worker_id, health=health, now=self.now())

    @read_only
    def workers(self) -> list[WorkerRecord]:
        return [WorkerRecord.from_row(r) for r in self._read(self.queries["list_workers"], {})]

    @read_only
    def runs_needing_review(self, limit: int = 100) -> list[RunRecord]:
        return [RunRecord.from_row(r) for r in self._read(self.queries["runs_needing_review"], {"limit": limit})]
