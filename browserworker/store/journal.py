"""The journal: attempts of steps, the dispatch gate's outbox, and the event log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from .._canonical import canonical_json
from ..errors import LeaseLost
from ..states import AttemptState, check_attempt_transition
from .coalesce import coalesced
from .connector import Row, Tx
from .manager import Manager, read_only
from .records import AttemptRecord, EventRecord, OutboxRecord, _fields

__all__ = ["Boundary", "Dispatch", "Finish", "Intent", "JournalManager", "Response"]


class Intent(NamedTuple):
    """One call of :meth:`JournalManager.begin_attempt`."""

    run_id: str
    epoch: int
    step_id: str
    kind: str
    request_key: str
    fingerprint: str
    worker: str | None = None
    margin: float = 0.0


class Dispatch(NamedTuple):
    """One call of :meth:`JournalManager.mark_dispatched`."""

    attempt: AttemptRecord
    epoch: int
    method: str
    url: str
    margin: float = 0.0
    channel: str = "held"


class Response(NamedTuple):
    """One call of :meth:`JournalManager.record_response`."""

    outbox_id: int
    status: int
    url: str
    headers: Mapping[str, str]


class Finish(NamedTuple):
    """One call of :meth:`JournalManager.finish_attempt`."""

    attempt: AttemptRecord
    epoch: int
    state: AttemptState
    decided_by: str
    result: Any = None
    evidence: Any = None
    error: str | None = None
    worker: str | None = None
    dispatched: bool = False


class Boundary(NamedTuple):
    """One call of :meth:`JournalManager.effect_boundary`."""

    run_id: str
    step_id: str


def _run_of(call: Intent | Boundary) -> str:
    return call.run_id


def _attempt_run(call: Dispatch | Finish) -> str:
    return call.attempt.run_id


def _outbox_of(call: Response) -> tuple[str, int]:
    return ("outbox", call.outbox_id)


def _inserted(row_id: int | None) -> int:
    assert row_id is not None  # an insert of no fence always inserts
    return row_id


def _attempt_beside(row: Row, column: str) -> tuple[Any, AttemptRecord | None]:
    """A row of an attempt's columns plus one more (``column``), as ``(that value, the
    attempt)``; the attempt is None where a LEFT JOIN found none (its columns all NULL)."""
    data = _fields(row)
    value = data.pop(column)
    return value, None if data["id"] is None else AttemptRecord.from_row(data)


class JournalManager(Manager):
    """Journal writes (fenced by the run's epoch, see :mod:`.manager`) and reads."""

    @coalesced(Intent, "begin_attempts", key=_run_of)
    def begin_attempt(
        self,
        run_id: str,
        epoch: int,
        step_id: str,
        kind: str,
        request_key: str,
        fingerprint: str,
        *,
        worker: str | None = None,
        margin: float = 0.0,
    ) -> AttemptRecord:
        """Journal a new attempt (INTENT for effects, RUNNING for actions), fenced."""
        return self.begin_attempts([Intent(run_id, epoch, step_id, kind, request_key, fingerprint, worker, margin)])[0]

    def begin_attempts(self, intents: list[Intent]) -> list[AttemptRecord]:
        """:meth:`begin_attempt` of many runs in one transaction (raises for the first fenced out)."""
        now = self.c.now()
        with self.c.transaction() as tx:
            states = [AttemptState.INTENT if i.kind == "effect" else AttemptState.RUNNING for i in intents]
            inserted = tx.insert_numbered_each(
                "insert_attempt",
                [
                    {
                        "run_id": i.run_id,
                        "step_id": i.step_id,
                        "kind": i.kind,
                        "request_key": i.request_key,
                        "fingerprint": i.fingerprint,
                        "state": str(state),
                        "epoch": i.epoch,
                        "worker": i.worker,
                        "now": now,
                        "margin": i.margin,
                    }
                    for i, state in zip(intents, states, strict=True)
                ],
                "next_attempt_no",
                "attempt_no",
            )
            attempts = []
            for i, state, new in zip(intents, states, inserted, strict=True):
                if new is None:  # the fence let nothing through
                    raise self._lease_lost(i.run_id, i.epoch, i.margin, f"intent for {i.step_id}")
                attempt_id, attempt_no = new
                attempt = AttemptRecord.new(
                    id=attempt_id,
                    run_id=i.run_id,
                    step_id=i.step_id,
                    kind=i.kind,
                    attempt_no=attempt_no,
                    request_key=i.request_key,
                    request_fingerprint=i.fingerprint,
                    state=state,
                    lease_epoch=i.epoch,
                    worker=i.worker,
                    intent_at=now,
                )
                attempts.append(attempt)
                if i.kind == "effect":
                    self._event(
                        tx,
                        i.run_id,
                        "intent",
                        now=now,
                        step_id=i.step_id,
                        attempt_no=attempt.attempt_no,
                        worker=i.worker,
                        epoch=i.epoch,
                        to_state=state,
                        detail={"request_key": i.request_key, "fingerprint": i.fingerprint},
                    )
        return attempts

    @coalesced(Dispatch, "mark_dispatched_each", key=_attempt_run)
    def mark_dispatched(
        self, attempt: AttemptRecord, epoch: int, method: str, url: str, *, margin: float = 0.0, channel: str = "held"
    ) -> int:
        """The dispatch gate's commit: ``dispatched_at`` plus an outbox row, fenced. Returns the outbox id.

        ``channel="detected"`` journals what the browser let out (or may have) without asking the
        gate; it is written with no margin (it has left already), fenced by the epoch alone.
        """
        return self.mark_dispatched_each([Dispatch(attempt, epoch, method, url, margin, channel)])[0]

    def mark_dispatched_each(self, dispatches: list[Dispatch]) -> list[int]:
        """:meth:`mark_dispatched` of many attempts in one transaction (raises for the first fenced out)."""
        now = self.c.now()
        with self.c.transaction() as tx:
            marked = tx.execute_each(
                "mark_dispatched",
                [{"attempt_id": d.attempt.id, "epoch": d.epoch, "now": now, "margin": d.margin} for d in dispatches],
            )
            for d, n in zip(dispatches, marked, strict=True):
                if n != 1:
                    raise self._lease_lost(d.attempt.run_id, d.epoch, d.margin, f"dispatch of {d.attempt.step_id}")
            outbox_ids = tx.insert_each(
                "insert_outbox",
                [
                    {
                        "attempt_id": d.attempt.id,
                        "run_id": d.attempt.run_id,
                        "step_id": d.attempt.step_id,
                        "method": d.method,
                        "url": d.url,
                        "now": now,
                        "channel": d.channel,
                    }
                    for d in dispatches
                ],
            )
            for d, outbox_id in zip(dispatches, outbox_ids, strict=True):
                detail: dict[str, Any] = {"method": d.method, "url": d.url, "outbox_id": outbox_id}
                if d.channel != "held":
                    detail["channel"] = d.channel
                self._event(
                    tx,
                    d.attempt.run_id,
                    "dispatched",
                    now=now,
                    step_id=d.attempt.step_id,
                    attempt_no=d.attempt.attempt_no,
                    worker=d.attempt.worker,
                    epoch=d.epoch,
                    detail=detail,
                )
        return [_inserted(outbox_id) for outbox_id in outbox_ids]

    def record_final(self, outbox_id: int, status: int, url: str) -> None:
        """Evidence: the last answer of a redirect chain, unfenced, in its own commit."""
        with self.c.transaction() as tx:
            tx.execute("record_final", {"id": outbox_id, "status": status, "url": url})

    @coalesced(Response, "record_responses", key=_outbox_of)
    def record_response(self, outbox_id: int, status: int, url: str, headers: Mapping[str, str]) -> None:
        """Evidence, not a decision: written unfenced, in its own commit."""
        self.record_responses([Response(outbox_id, status, url, headers)])

    def record_responses(self, responses: list[Response]) -> list[None]:
        """:meth:`record_response` of many requests in one transaction."""
        now = self.c.now()
        with self.c.transaction() as tx:
            tx.execute_each(
                "record_response",
                [
                    {
                        "id": r.outbox_id,
                        "status": r.status,
                        "response_url": r.url,
                        "headers_json": canonical_json(dict(r.headers)),
                        "now": now,
                    }
                    for r in responses
                ],
            )
        return [None] * len(responses)

    def record_request_failed(self, outbox_id: int, failure: str) -> None:
        with self.c.transaction() as tx:
            tx.execute("record_request_failed", {"id": outbox_id, "failure": failure, "now": self.c.now()})

    def _not_finished(self, tx: Tx, attempt: AttemptRecord, epoch: int) -> LeaseLost:
        """Why a fenced outcome of ``attempt`` changed nothing: it moved on, or the lease did."""
        current = tx.one("get_attempt", {"id": attempt.id})
        if current is not None and current["state"] != attempt.state:
            return LeaseLost(
                f"attempt {attempt.request_key}#{attempt.attempt_no} is already {current['state']}, not {attempt.state}"
            )
        return self._lease_lost(attempt.run_id, epoch, 0.0, f"outcome of {attempt.step_id}")

    @coalesced(Finish, "finish_attempts", key=_attempt_run)
    def finish_attempt(
        self,
        attempt: AttemptRecord,
        epoch: int,
        state: AttemptState,
        *,
        decided_by: str,
        result: Any = None,
        evidence: Any = None,
        error: str | None = None,
        worker: str | None = None,
        dispatched: bool = False,
    ) -> AttemptRecord:
        """Move an attempt out of INTENT/RUNNING/UNKNOWN, fenced by the run's current epoch.

        ``dispatched=True`` also sets ``dispatched_at`` if nothing set it yet: something of the
        attempt left (the gate saw it) although its own journal write did not get through.

        Returns the attempt as it now reads, built from ``attempt`` and what this update wrote
        (result and evidence as they read back from their JSON) rather than read in full.
        """
        finish = Finish(attempt, epoch, state, decided_by, result, evidence, error, worker, dispatched)
        return self.finish_attempts([finish])[0]

    def finish_attempts(self, finishes: list[Finish]) -> list[AttemptRecord]:
        """:meth:`finish_attempt` of many attempts in one transaction (raises for the first that fails)."""
        for f in finishes:
            check_attempt_transition(f.attempt.state, f.state)
        now = self.c.now()
        results = [None if f.result is None else canonical_json(f.result) for f in finishes]
        evidences = [None if f.evidence is None else canonical_json(f.evidence) for f in finishes]
        with self.c.transaction() as tx:
            # of the columns this update did not set, only dispatched_at may have changed since
            # the caller read ``attempt`` (the gate sets it); the others never change
            changed = tx.changed_each(
                "finish_attempt",
                [
                    {
                        "attempt_id": f.attempt.id,
                        "from_state": str(f.attempt.state),
                        "state": str(f.state),
                        "now": now,
                        "epoch": f.epoch,
                        "result_json": result_json,
                        "decided_by": f.decided_by,
                        "evidence": evidence_json,
                        "error": f.error,
                        "dispatched": f.dispatched,
                    }
                    for f, result_json, evidence_json in zip(finishes, results, evidences, strict=True)
                ],
                "dispatched_at",
                key="attempt_id",
            )
            for f, row in zip(finishes, changed, strict=True):
                if row is None:
                    raise self._not_finished(tx, f.attempt, f.epoch)
                self._event(
                    tx,
                    f.attempt.run_id,
                    "attempt_state",
                    now=now,
                    step_id=f.attempt.step_id,
                    attempt_no=f.attempt.attempt_no,
                    worker=f.worker,
                    epoch=f.epoch,
                    from_state=f.attempt.state,
                    to_state=f.state,
                    decision=f.decided_by,
                    detail={"evidence": f.evidence, "error": f.error} if (f.evidence or f.error) else None,
                )
        return [
            f.attempt.finished(
                state=AttemptState(f.state),
                finished_at=now,
                result_json=result_json,
                decided_by=f.decided_by,
                evidence_json=evidence_json,
                error=f.error,
                dispatched_at=row["dispatched_at"],  # type: ignore[index]
            )
            for f, result_json, evidence_json, row in zip(finishes, results, evidences, changed, strict=True)
        ]

    @read_only
    def get_attempt(self, attempt_id: int) -> AttemptRecord:
        row = self.c.read_one("get_attempt", {"id": attempt_id})
        if row is None:
            raise KeyError(attempt_id)
        return AttemptRecord.from_row(row)

    @read_only
    def attempts(self, run_id: str) -> list[AttemptRecord]:
        return [AttemptRecord.from_row(r) for r in self.c.read("attempts_of_run", {"run_id": run_id})]

    @read_only
    def latest_attempt(self, run_id: str, step_id: str) -> AttemptRecord | None:
        row = self.c.read_one("latest_attempt", {"run_id": run_id, "step_id": step_id})
        return None if row is None else AttemptRecord.from_row(row)

    @read_only
    def outbox(self, attempt_id: int) -> list[OutboxRecord]:
        return [OutboxRecord.from_row(r) for r in self.c.read("outbox_of_attempt", {"attempt_id": attempt_id})]

    @read_only
    def events(self, run_id: str) -> list[EventRecord]:
        return [EventRecord.from_row(r) for r in self.c.read("events_of_run", {"run_id": run_id})]

    @read_only
    def restored_at(self, run_id: str) -> float | None:
        """When the run was last restored from a backup, or None (see :mod:`browserworker.ops._backup`)."""
        row = self.c.read_one("restored_at", {"run_id": run_id})
        return None if row is None or row["at"] is None else float(row["at"])

    @read_only
    def history(self, run_id: str) -> tuple[list[AttemptRecord], float | None, float | None]:
        """What a run's new pass starts from: :meth:`attempts`, :meth:`restored_at` and when a
        person last requeued it (None if never), in one call (one round trip to the store's
        thread) and one statement."""
        attempts: list[AttemptRecord] = []
        at = requeued = None
        for row in self.c.read("history", {"run_id": run_id}):
            data = _fields(row)
            requeued = data.pop("requeued_at")
            at, attempt = _attempt_beside(data, "restored_at")
            if attempt is not None:
                attempts.append(attempt)
        return attempts, None if at is None else float(at), None if requeued is None else float(requeued)

    @read_only
    @coalesced(Boundary, "effect_boundaries", key=_run_of)
    def effect_boundary(self, run_id: str, step_id: str) -> tuple[bool, AttemptRecord | None]:
        """What the executor reads at the boundary before an effect, in one call (one
        statement): whether a cancel was asked (:meth:`cancel_requested`) and the step's
        :meth:`latest_attempt`."""
        return self.effect_boundaries([Boundary(run_id, step_id)])[0]

    @read_only
    def effect_boundaries(self, boundaries: list[Boundary]) -> list[tuple[bool, AttemptRecord | None]]:
        """:meth:`effect_boundary` of many runs (one round trip)."""
        rows = self.c.read_each("effect_boundary", [{"run_id": b.run_id, "step_id": b.step_id} for b in boundaries])
        out: list[tuple[bool, AttemptRecord | None]] = []
        for row in rows:
            if row is None:
                out.append((False, None))
                continue
            cancelled, latest = _attempt_beside(row, "run_cancel_requested")
            out.append((bool(cancelled), latest))
        return out

    def record_event(
        self,
        run_id: str,
        kind: str,
        *,
        step_id: str | None = None,
        attempt_no: int | None = None,
        worker: str | None = None,
        epoch: int | None = None,
        decision: str | None = None,
        detail: Any = None,
    ) -> None:
        """Journal an event of run ``run_id``. Given ``epoch`` it is written for the holder of
        that lease, fenced as every such write is: :class:`LeaseLost` (nothing written) once
        another claim moved the run on."""
        if epoch is None:
            with self.c.transaction() as tx:
                self._event(
                    tx,
                    run_id,
                    kind,
                    now=self.c.now(),
                    step_id=step_id,
                    attempt_no=attempt_no,
                    worker=worker,
                    decision=decision,
                    detail=detail,
                )
            return
        params = {
            "at": self.c.now(),
            "run_id": run_id,
            "step_id": step_id,
            "attempt_no": attempt_no,
            "worker": worker,
            "epoch": epoch,
            "kind": kind,
            "decision": decision,
            "detail_json": None if detail is None else canonical_json(detail),
        }
        with self.c.transaction() as tx:
            written = tx.execute("insert_fenced_event", params)
        if written != 1:
            raise self._lease_lost(run_id, epoch, 0.0, f"{kind} event")
