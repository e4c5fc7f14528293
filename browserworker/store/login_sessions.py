"""Saved login sessions: one row per session key (``login_sessions``), its sealed storage state,
the claim of the run logging in for it now, and a version per save.

The manager stores bytes it cannot read: sealing and opening the state is
:mod:`browserworker.runtime._login_sessions`' business. Two runs that need a login for one key at once race
for its claim (:meth:`LoginSessionManager.claim`, one conditional ``UPDATE``): the loser waits for
the winner's save or for the claim to expire. A save is taken from the claim's holder, or
from a run that logged in after the state it replaces was saved, never from a stale writer.
"""

from __future__ import annotations

from .manager import Manager, read_only
from .records import LoginSession

__all__ = ["LoginSessionManager"]


class LoginSessionManager(Manager):
    """The ``login_sessions`` table (see the module docstring)."""

    @read_only
    def get(self, key: str) -> LoginSession | None:
        row = self.c.read_one("session_get", {"key": key})
        return None if row is None else LoginSession.from_row(row)

    @read_only
    def list(self) -> list[LoginSession]:
        return [LoginSession.from_row(r) for r in self.c.read("session_list", {})]

    def claim(self, key: str, flow_name: str, owner: str, ttl: float, seen: int) -> bool:
        """Take the login claim of ``key`` for ``ttl`` seconds: True if ``owner`` holds it now.
        ``seen`` is the version the caller found unusable (0: none saved): if a newer one was
        saved meanwhile the claim is not taken (use that one)."""
        with self.c.transaction() as tx:
            now = self.c.now()
            tx.execute("session_create", {"key": key, "flow_name": flow_name, "now": now})
            return (
                tx.execute(
                    "session_claim",
                    {"key": key, "flow_name": flow_name, "owner": owner, "now": now, "ttl": ttl, "seen": seen},
                )
                == 1
            )

    def save(
        self, key: str, flow_name: str, owner: str, state: bytes, key_id: str, logged_in_at: float, max_age: float
    ) -> int | None:
        """Save a login's sealed state (reusable for ``max_age`` seconds) and free ``owner``'s claim;
        the new version, or None when a newer login was saved meanwhile (nothing written)."""
        with self.c.transaction() as tx:
            now = self.c.now()
            tx.execute("session_create", {"key": key, "flow_name": flow_name, "now": now})
            changed = tx.execute(
                "session_save",
                {
                    "key": key,
                    "flow_name": flow_name,
                    "owner": owner,
                    "state": state,
                    "key_id": key_id,
                    "now": now,
                    "logged_in_at": logged_in_at,
                    "max_age": max_age,
                },
            )
            if changed != 1:
                return None
            row = tx.one("session_get", {"key": key})
            assert row is not None
            return int(row["version"])

    def release(self, key: str, owner: str) -> None:
        """Give up ``owner``'s login claim (its login failed)."""
        with self.c.transaction() as tx:
            tx.execute("session_release", {"key": key, "owner": owner})

    def used(self, key: str) -> None:
        """A run reused the saved state."""
        with self.c.transaction() as tx:
            tx.execute("session_used", {"key": key, "now": self.c.now()})

    def drop(self, key: str) -> bool:
        """Forget ``key``'s session; False if there was none."""
        with self.c.transaction() as tx:
            return tx.execute("session_drop", {"key": key}) == 1
