"""The console's sign-ins (``console_sessions``): one row per session, until it expires or
is ended.

The console's cookie holds a session id, signed; a row keeps only that id's SHA-256, the
name and role signed in, which token it was made with (``token_key``) and when it expires.
Looking a session up is a read (a page view writes nothing); signing in, signing out and
ending the sessions of a changed token are writes.
"""

from __future__ import annotations

import hashlib

from .manager import Manager, read_only
from .records import ConsoleSession

__all__ = ["ConsoleSessionManager"]


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class ConsoleSessionManager(Manager):
    """The ``console_sessions`` table (see the module docstring)."""

    def create(self, session_id: str, name: str, role: str, token_key: str, seconds: float) -> None:
        """Record a new session of ``name`` in ``role``, live for ``seconds``."""
        with self.c.transaction() as tx:
            now = self.c.now()
            tx.execute(
                "console_session_create",
                {
                    "id_hash": _digest(session_id),
                    "name": name,
                    "role": role,
                    "token_key": token_key,
                    "now": now,
                    "expires_at": now + seconds,
                },
            )

    @read_only
    def get(self, session_id: str) -> ConsoleSession | None:
        """The live session ``session_id`` (None: unknown, ended or expired)."""
        row = self.c.read_one("console_session_get", {"id_hash": _digest(session_id), "now": self.c.now()})
        return None if row is None else ConsoleSession.from_row(row)

    def end(self, session_id: str) -> bool:
        """End one session (sign out); False if it was not there."""
        with self.c.transaction() as tx:
            return tx.execute("console_session_end", {"id_hash": _digest(session_id)}) == 1

    def end_all(self, name: str, role: str) -> int:
        """End every session of ``name`` in ``role`` (sign out everywhere); how many."""
        with self.c.transaction() as tx:
            return tx.execute("console_session_end_name", {"name": name, "role": role})

    def end_stale(self, token_keys: dict[str, str]) -> int:
        """End the sessions that expired or whose role's token is no longer the one they were
        made with (``token_keys``: role -> the current token's key); how many."""
        with self.c.transaction() as tx:
            return tx.execute(
                "console_session_end_stale",
                {
                    "now": self.c.now(),
                    "operator": token_keys.get("operator", ""),
                    "viewer": token_keys.get("viewer", ""),
                },
            )

    @read_only
    def count(self) -> int:
        """How many session rows there are (live or not yet cleared)."""
        row = self.c.read_one("console_session_count", {})
        return 0 if row is None else int(row["n"])
