"""The journal: attempts of steps, the dispatch gate's outbox, and the event log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._canonical import canonical_json
from ..errors import LeaseLost
from ..states import AttemptState, check_attempt_transition
from .connector import Row, Tx
from .manager import Manager, read_only
from .records import AttemptRecord, EventRecord, OutboxRecord, _fields

__all__ = ["JournalManager"]


def _attempt_beside(row: Row, column: str) -> tuple[Any, AttemptRecord | None]:
    """A row of an attempt's columns plus one more (``column``), as ``(that value, the
    attempt)``; the attempt is None where a LEFT JOIN found none (its columns all NULL)."""
    data = _fields(row)
    value = data.pop(column)
    return value, None if data["id"] is None else AttemptRecord.from_row(data)


class JournalManager(Manager):
    """Journal writes (fenced by the run's epoch, see :mod:`.manager`) and reads."""

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
        now = self.c.now()
        state = AttemptState.INTENT if kind == "effect" else AttemptState.RUNNING
        with self.c.transaction() as tx:
            next_no = tx.one("next_attempt_no", {"run_id": run_id, "step_id": step_id})
            attempt_no = next_no["n"]  # type: ignore[index]
            attempt_id = tx.insert(
                "insert_attempt",
                {
                    "run_id": run_id,
                    "step_id": step_id,
                    "kind": kind,
                    "attempt_no": attempt_no,
                    "request_key": request_key,
                    "fingerprint": fingerprint,
                    "state": str(state),
                    "epoch": epoch,
                    "worker": worker,
                    "now": now,
                    "margin": margin,
                },
            )
            if attempt_id is None:  # the fence let nothing through
                raise self._lease_lost(run_id, epoch, margin, f"intent for {step_id}")
            attempt = AttemptRecord.new(
                id=attempt_id,
                run_id=run_id,
                step_id=step_id,
                kind=kind,
                attempt_no=attempt_no,
                request_key=request_key,
                request_fingerprint=fingerprint,
                state=state,
                lease_epoch=epoch,
                worker=worker,
                intent_at=now,
            )
            if kind == "effect":
                self._event(
                    tx,
                    run_id,
                    "intent",
                    now=now,
                    step_id=step_id,
                    attempt_no=attempt.attempt_no,
                    worker=worker,
                    epoch=epoch,
                    to_state=state,
                    detail={"request_key": request_key, "fingerprint": fingerprint},
                )
        return attempt

    def mark_dispatched(
        self, attempt: AttemptRecord, epoch: int, method: str, url: str, *, margin: float = 0.0, channel: str = "held"
    ) -> int:
        """The dispatch gate's commit: ``dispatched_at`` plus an outbox row, fenced. Returns the outbox id.

        ``channel="detected"`` journals what the browser let out (or may have) without asking the
        gate; it is written with no margin (it has left already), fenced by the epoch alone.
        """
        now = self.c.now()
        with self.c.transaction() as tx:
            if (
                tx.execute("mark_dispatched", {"attempt_id": attempt.id, "epoch": epoch, "now": now, "margin": margin})
                != 1
            ):
                raise self._lease_lost(attempt.run_id, epoch, margin, f"dispatch of {attempt.step_id}")
            outbox_id = tx.insert(
                "insert_outbox",
                {
                    "attempt_id": attempt.id,
                    "run_id": attempt.run_id,
                    "step_id": attempt.step_id,
                    "method": method,
                    "url": url,
                    "now": now,
                    "channel": channel,
                },
            )
            assert outbox_id is not None
            detail: dict[str, Any] = {"method": method, "url": url, "outbox_id": outbox_id}
            if channel != "held":
                detail["channel"] = channel
            self._event(
                tx,
                attempt.run_id,
                "dispatched",
                now=now,
                step_id=attempt.step_id,
                attempt_no=attempt.attempt_no,
                worker=attempt.worker,
                epoch=epoch,
                detail=detail,
            )
        return outbox_id

    def record_final(self, outbox_id: int, status: int, url: str) -> None:
        """Evidence: the last answer of a redirect chain, unfenced, in its own commit."""
        with self.c.transaction() as tx:
            tx.execute("record_final", {"id": outbox_id, "status": status, "url": url})

    def record_response(self, outbox_id: int, status: int, url: str, headers: Mapping[str, str]) -> None:
        """Evidence, not a decision: written unfenced, in its own commit."""
        with self.c.transaction() as tx:
            tx.execute(
                "record_response",
                {
                    "id": outbox_id,
                    "status": status,
                    "response_url": url,
                    "headers_json": canonical_json(dict(headers)),
                    "now": self.c.now(),
                },
            )

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
        check_attempt_transition(attempt.state, state)
        now = self.c.now()
        result_json = None if result is None else canonical_json(result)
        evidence_json = None if evidence is None else canonical_json(evidence)
        with self.c.transaction() as tx:
            changed = tx.execute(
                "finish_attempt",
                {
                    "attempt_id": attempt.id,
                    "from_state": str(attempt.state),
                    "state": str(state),
                    "now": now,
                    "epoch": epoch,
                    "result_json": result_json,
                    "decided_by": decided_by,
                    "evidence": evidence_json,
                    "error": error,
                    "dispatched": dispatched,
                },
            )
            if changed != 1:
                raise self._not_finished(tx, attempt, epoch)
            self._event(
                tx,
                attempt.run_id,
                "attempt_state",
                now=now,
                step_id=attempt.step_id,
                attempt_no=attempt.attempt_no,
                worker=worker,
                epoch=epoch,
                from_state=attempt.state,
                to_state=state,
                decision=decided_by,
                detail={"evidence": evidence, "error": error} if (evidence or error) else None,
            )
            # of the columns this update did not set, only dispatched_at may have changed since
            # the caller read ``attempt`` (the gate sets it); the others never change
            dispatched_at = tx.one("dispatched_at", {"id": attempt.id})["dispatched_at"]  # type: ignore[index]
        return attempt.finished(
            state=AttemptState(state),
            finished_at=now,
            result_json=result_json,
            decided_by=decided_by,
            evidence_json=evidence_json,
            error=error,
            dispatched_at=dispatched_at,
        )

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
    def effect_boundary(self, run_id: str, step_id: str) -> tuple[bool, AttemptRecord | None]:
        """What the executor reads at the boundary before an effect, in one call (one
        statement): whether a cancel was asked (:meth:`cancel_requested`) and the step's
        :meth:`latest_attempt`."""
        row = self.c.read_one("effect_boundary", {"run_id": run_id, "step_id": step_id})
        if row is None:
            return False, None
        cancelled, latest = _attempt_beside(row, "run_cancel_requested")
        return bool(cancelled), latest

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
