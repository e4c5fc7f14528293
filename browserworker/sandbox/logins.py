"""Who logged in how often, and server-side invalidation of a user's sessions.

Each successful ``POST /login`` counts one login for its user and stamps the session cookie
with the user's *session generation*; ``POST /api/sessions/revoke?user=NAME`` bumps the
generation, so every cookie issued before is treated as logged out (a site that signs
everyone out, or expires sessions on its side). ``GET /api/logins`` reports both per user.
Kept in the sandbox's database (table ``logins``); the generations are cached in memory,
as this process is the only one that changes them.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["Logins", "api_logins", "api_revoke_sessions"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS logins (
    username   TEXT PRIMARY KEY,
    count      INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL DEFAULT 0
)
"""


class Logins:
    """The ``logins`` table of one sandbox database."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._generations: dict[str, int] = {}
        self._lock = threading.Lock()
        with self._connect() as conn:
            conn.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=10000")
        return conn

    def _write(self, sql: str, user: str) -> int:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT OR IGNORE INTO logins (username) VALUES (?)", (user,))
            conn.execute(sql, (user,))
            (generation,) = conn.execute("SELECT generation FROM logins WHERE username = ?", (user,)).fetchone()
            conn.execute("COMMIT")
        finally:
            conn.close()
        with self._lock:
            self._generations[user] = int(generation)
        return int(generation)

    def logged_in(self, user: str) -> int:
        """Count a successful login of ``user``; the generation its session carries."""
        return self._write("UPDATE logins SET count = count + 1 WHERE username = ?", user)

    def revoke(self, user: str) -> int:
        """Sign ``user`` out everywhere: sessions issued before now are no longer valid."""
        return self._write("UPDATE logins SET generation = generation + 1 WHERE username = ?", user)

    def generation(self, user: str) -> int:
        with self._lock:
            known = self._generations.get(user)
        if known is not None:
            return known
        conn = self._connect()
        try:
            row = conn.execute("SELECT generation FROM logins WHERE username = ?", (user,)).fetchone()
        finally:
            conn.close()
        with self._lock:
            return self._generations.setdefault(user, 0 if row is None else int(row[0]))

    def counts(self) -> dict[str, dict[str, int]]:
        conn = self._connect()
        try:
            rows = conn.execute("SELECT username, count, generation FROM logins ORDER BY username").fetchall()
        finally:
            conn.close()
        return {user: {"logins": count, "generation": gen} for user, count, gen in rows}


def _logins(request: Request) -> Logins:
    logins: Logins = request.app.state.logins
    return logins


async def api_logins(request: Request) -> Response:
    """``GET /api/logins``: ``{"users": {NAME: {"logins": N, "generation": G}}}``."""
    return JSONResponse({"users": await run_in_threadpool(_logins(request).counts)})


async def api_revoke_sessions(request: Request) -> Response:
    """``POST /api/sessions/revoke?user=NAME``: every session of the user is logged out."""
    user = request.query_params.get("user")
    if not user:
        return JSONResponse({"error": "user= is required"}, status_code=400)
    generation = await run_in_threadpool(_logins(request).revoke, user)
    return JSONResponse({"user": user, "generation": generation})
