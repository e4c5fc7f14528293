"""Who may use the console: login tokens, roles, the session cookie and CSRF checks.

Two roles: ``operator`` (sees and acts) and ``viewer`` (sees, cannot act). Each has a token:
``$BROWSERWORKER_CONSOLE_TOKEN`` / ``$BROWSERWORKER_CONSOLE_READONLY_TOKEN``, else one
generated at first start and printed once. Only SHA-256 hashes of generated tokens are kept,
with the key that signs session cookies, in a file readable by its owner alone (0600). A
login records a session in the store (``console_sessions``: name, role, which token, expiry)
and sets a signed, HttpOnly, SameSite=Strict cookie with the session's id and a per-session
CSRF token. A cookie counts only while its row is there: signing out deletes the row (or all
rows of one's name and role), and a changed token ends the sessions made with the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request

from ..errors import UsageError
from ..store.base import Store

__all__ = [
    "COOKIE",
    "ENV_READONLY_TOKEN",
    "ENV_TOKEN",
    "MIN_TOKEN",
    "ConsoleUser",
    "Keys",
    "Tokens",
    "check_tokens",
    "end_session",
    "load_keys",
    "same_origin",
    "session_of",
    "start_session",
]

ENV_TOKEN = "BROWSERWORKER_CONSOLE_TOKEN"
ENV_READONLY_TOKEN = "BROWSERWORKER_CONSOLE_READONLY_TOKEN"
COOKIE = "bw_console"
SESSION_SECONDS = 12 * 3600
NOTE_SECONDS = 120  # a note after an action is shown for this long
ROLES = ("operator", "viewer")
_ENV = {"operator": ENV_TOKEN, "viewer": ENV_READONLY_TOKEN}
MIN_TOKEN = 16  # characters of a token given in the environment, at least


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Tokens:
    """Tokens generated at this start, to be printed once (empty when none were)."""

    operator: str | None = None
    viewer: str | None = None


@dataclass(frozen=True)
class ConsoleUser:
    """A signed-in person: name, role, the session's CSRF token and its id (for signing out)."""

    name: str
    role: str
    csrf: str
    session: str

    @property
    def can_act(self) -> bool:
        return self.role == "operator"


class Keys:
    """The token hashes of each role and the key that signs session cookies."""

    def __init__(self, hashes: dict[str, str], secret: str, *, explicit: bool) -> None:
        self.hashes = hashes
        self.explicit = explicit  # both tokens came from the environment
        self._cookies = URLSafeTimedSerializer(secret, salt="browserworker-console-session")
        self._notes = URLSafeTimedSerializer(secret, salt="browserworker-console-note")

    def note(self, text: str) -> str:
        """``text`` signed, to show once after a redirect (a page shows no text it did not write)."""
        return self._notes.dumps(text)

    def read_note(self, signed: str | None) -> str | None:
        if not signed:
            return None
        try:
            text: Any = self._notes.loads(signed, max_age=NOTE_SECONDS)
        except BadSignature:
            return None
        return text if isinstance(text, str) else None

    def role_of(self, token: str) -> str | None:
        """The role whose token this is (compared in constant time), or None."""
        given = _hash(token)
        found = None
        for role in ROLES:
            if role in self.hashes and hmac.compare_digest(given, self.hashes[role]):
                found = role
        return found

    def token_key(self, role: str) -> str:
        """Which token ``role`` has now (the start of its hash): a session made with another ended."""
        return self.hashes[role][:16]

    def cookie(self, session_id: str, csrf: str) -> str:
        return self._cookies.dumps({"s": session_id, "c": csrf})

    def read_cookie(self, request: Request) -> tuple[str, str] | None:
        """The session id and CSRF token of ``request``'s cookie, if it is signed and fresh."""
        raw = request.cookies.get(COOKIE)
        if not raw:
            return None
        try:
            data: Any = self._cookies.loads(raw, max_age=SESSION_SECONDS)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("s"), str) or not isinstance(data.get("c"), str):
            return None
        return data["s"], data["c"]


def start_session(store: Store, keys: Keys, name: str, role: str) -> str:
    """Sign ``name`` in as ``role``: a new session row, and the cookie that names it."""
    store.console_sessions.end_stale({r: keys.token_key(r) for r in keys.hashes})
    session_id = secrets.token_urlsafe(32)
    store.console_sessions.create(session_id, name, role, keys.token_key(role), SESSION_SECONDS)
    return keys.cookie(session_id, secrets.token_urlsafe(24))


def session_of(store: Store, keys: Keys, request: Request) -> ConsoleUser | None:
    """Who ``request``'s cookie signs in: its session row must be there, unexpired, and made
    with its role's current token. A read: looking a session up writes nothing."""
    found = keys.read_cookie(request)
    if found is None:
        return None
    session_id, csrf = found
    row = store.console_sessions.get(session_id)
    if row is None or row.role not in keys.hashes or not hmac.compare_digest(row.token_key, keys.token_key(row.role)):
        return None
    return ConsoleUser(row.name, row.role, csrf, session_id)


def end_session(store: Store, login: ConsoleUser, *, everywhere: bool = False) -> int:
    """Sign ``login`` out: its session, or (``everywhere``) every session of its name and role."""
    if everywhere:
        return store.console_sessions.end_all(login.name, login.role)
    return int(store.console_sessions.end(login.session))


def check_tokens(environ: Mapping[str, str] | None = None) -> None:
    """Refuse tokens given in the environment that are too short, or the same for both roles
    (a :class:`UsageError`; nothing is read or written)."""
    env = os.environ if environ is None else environ
    for role in ROLES:
        token = env.get(_ENV[role])
        if token and len(token) < MIN_TOKEN:
            raise UsageError(f"${_ENV[role]} is too short: use at least {MIN_TOKEN} random characters")
    if env.get(ENV_TOKEN) and env.get(ENV_TOKEN) == env.get(ENV_READONLY_TOKEN):
        raise UsageError(f"${ENV_TOKEN} and ${ENV_READONLY_TOKEN} must differ")


def load_keys(path: Path, environ: Mapping[str, str] | None = None) -> tuple[Keys, Tokens]:
    """The console's keys: tokens from the environment, else the hashes kept in ``path``
    (created 0600 with fresh tokens when missing: those are returned, to print once). Tokens
    are checked before anything is written: a refused start leaves ``path`` as it was."""
    env = os.environ if environ is None else environ
    check_tokens(env)
    stored = _read(path)
    hashes = dict(stored.get("hashes", {}))
    fresh: dict[str, str] = {}
    for role in ROLES:
        token = env.get(_ENV[role])
        if token:
            hashes[role] = _hash(token)
        elif role not in hashes:
            fresh[role] = secrets.token_urlsafe(24)
            hashes[role] = _hash(fresh[role])
    if hashes.get("operator") == hashes.get("viewer"):
        raise UsageError(f"${ENV_TOKEN} and ${ENV_READONLY_TOKEN} must differ")
    if fresh or "secret" not in stored:
        stored.setdefault("hashes", {}).update({role: _hash(t) for role, t in fresh.items()})
        stored.setdefault("secret", secrets.token_urlsafe(32))
        _write(path, stored)
    return Keys(hashes, stored["secret"], explicit=bool(env.get(ENV_TOKEN) and env.get(ENV_READONLY_TOKEN))), Tokens(
        fresh.get("operator"), fresh.get("viewer")
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read the console's keys {path}: {exc} (remove it to make new tokens)") from exc
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
    os.chmod(path, 0o600)


def same_origin(request: Request) -> bool:
    """Whether a POST comes from the console's own pages: ``Sec-Fetch-Site`` (when the browser
    sends it) is same-origin, and ``Origin`` (when sent) is the console's own."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return hmac.compare_digest(origin.lower(), own.lower())


def check_csrf(login: ConsoleUser, submitted: object) -> bool:
    return isinstance(submitted, str) and hmac.compare_digest(submitted, login.csrf)
