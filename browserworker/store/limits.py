"""Budgets of limit keys (:mod:`browserworker.store.limit_rules`): setting them, pausing a key after a
``Retry-After``, and the admission a claim of a limited key makes under the key's lock."""

from __future__ import annotations

from ..errors import OverBudget, UsageError
from . import limit_rules
from .connector import Row, Tx
from .manager import Manager, read_only
from .records import KeyLimits

__all__ = ["LimitManager", "admit"]


def admit(tx: Tx, key: str, now: float) -> None:
    """Let one more run of ``key`` start now, in the claim's transaction, or raise
    :class:`OverBudget`. Locks the key's row first ({lock_row}): concurrent claimers of the key
    take turns, and the live count read after the lock sees every claim committed before it
    (SQLite's write transactions are serialised whole). Takes a rate token."""
    row = tx.one("lock_limit", {"key": key})
    if row is None:
        return
    if row["paused_until"] is not None and row["paused_until"] > now:
        raise OverBudget(key, f"paused ({row['pause_reason'] or 'by hand'})", row["paused_until"] - now)
    if row["concurrency"] is not None:
        live = tx.one("live_of_key", {"key": key})["n"]  # type: ignore[index]
        if live >= row["concurrency"]:
            raise OverBudget(key, f"at its concurrency ({live} of {row['concurrency']} running)", 1.0)
    if row["rate"] is not None:
        tokens = limit_rules.refill(row["rate"], row["tokens"], row["refilled_at"], now)
        if tokens < 1:
            raise OverBudget(key, f"out of its rate ({row['rate']:g}/min)", (1 - tokens) * 60.0 / row["rate"])
        tx.execute("take_limit_token", {"key": key, "tokens": tokens - 1, "now": now})


class LimitManager(Manager):
    """The ``limits`` table."""

    def set_limit(self, key: str, *, concurrency: int | None = None, rate: float | None = None) -> KeyLimits:
        """Give ``key`` a budget (replacing its concurrency and rate; a pause stays); its bucket starts full."""
        limit_rules.check_key(key, "limits set")
        if concurrency is not None and concurrency < 1:
            raise UsageError(f"limits set {key}: the concurrency must be at least 1, not {concurrency}")
        if rate is not None and rate <= 0:
            raise UsageError(f"limits set {key}: the rate must be positive, not {rate}")
        now = self.c.now()
        with self.c.transaction() as tx:
            self._row(tx, key, now)
            tx.execute(
                "set_limit",
                {
                    "key": key,
                    "concurrency": concurrency,
                    "rate": rate,
                    "now": now,
                    "tokens": None if rate is None else limit_rules.burst_of(rate),
                },
            )
        return self._budget(key)

    def clear_limit(self, key: str | None) -> int:
        """Remove ``key``'s budget and pause (``None``: every key's); how many keys it removed."""
        with self.c.transaction() as tx:
            return tx.execute("delete_limits", {}) if key is None else tx.execute("delete_limit", {"key": key})

    def pause_limit(
        self,
        key: str,
        seconds: float,
        reason: str,
        *,
        run_id: str | None = None,
        detail: dict[str, object] | None = None,
        worker: str | None = None,
    ) -> float:
        """Pause ``key`` fleet-wide for ``seconds`` (at most :data:`~browserworker.store.limit_rules.MAX_PAUSE`;
        an existing longer pause stands), journaling ``limit_paused`` on ``run_id``. Returns
        when the pause ends."""
        now = self.c.now()
        until = now + min(limit_rules.MAX_PAUSE, max(0.0, seconds))
        with self.c.transaction() as tx:
            self._row(tx, key, now)
            tx.execute("pause_limit", {"key": key, "until": until, "reason": reason, "now": now})
            current = tx.one("lock_limit", {"key": key})
            assert current is not None
            if run_id is not None:
                self._event(
                    tx,
                    run_id,
                    "limit_paused",
                    now=now,
                    worker=worker,
                    decision="paused",
                    detail={
                        "key": key,
                        "until": current["paused_until"],
                        "seconds": until - now,
                        "reason": reason,
                        **(detail or {}),
                    },
                )
        return float(current["paused_until"])

    @read_only
    def limits(self) -> list[KeyLimits]:
        """Every key with a budget or a pause, with its live runs and claims in the last minute."""
        now = self.c.now()
        return [_budget(row, now) for row in self.c.read("list_limits", {"since": now - 60.0})]

    @read_only
    def limit_pauses(self) -> dict[str, int]:
        """Pauses from a ``Retry-After`` so far, by key."""
        return {row["key"]: row["n"] for row in self.c.read("limit_pauses", {})}

    def _row(self, tx: Tx, key: str, now: float) -> None:
        """The key's row exists (inserted if need be) and is locked by ``tx``."""
        if tx.one("lock_limit", {"key": key}) is None:
            tx.execute("insert_limit", {"key": key, "now": now})
            tx.one("lock_limit", {"key": key})

    def _budget(self, key: str) -> KeyLimits:
        return next(b for b in self.limits() if b.key == key)


def _budget(row: Row, now: float) -> KeyLimits:
    rate, paused_until = row["rate"], row["paused_until"]
    return KeyLimits(
        key=row["key"],
        concurrency=row["concurrency"],
        rate=rate,
        tokens=None if rate is None else limit_rules.refill(rate, row["tokens"], row["refilled_at"], now),
        paused_until=paused_until,
        pause_reason=row["pause_reason"],
        live=int(row["live"]),
        claims_last_minute=int(row["claims"]),
        paused=paused_until is not None and paused_until > now,
    )
