"""Who may use the console: login tokens, roles, the session cookie and CSRF checks.

Two roles: ``operator`` (sees and acts) and ``viewer`` (sees, cannot act). Each has a token:
``$BROWSERWORKER_CONSOLE_TOKEN`` / ``$BROWSERWORKER_CONSOLE_READONLY_TOKEN``, else one
generated at first start and printed once. Only SHA-256 hashes of generated tokens are kept,
with the key that signs session cookies, in a file readable by its owner alone (0600). A
login sets a signed, HttpOnly, SameSite=Strict cookie with the operator's name, the role and a
per-session CSRF token; a changed token ends the sessions made with the old one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request

from ..errors import UsageError

__all__ = ["COOKIE", "ENV_READONLY_TOKEN", "ENV_TOKEN", "Keys", "Login", "Tokens", "load_keys", "same_origin"]

ENV_TOKEN = "BROWSERWORKER_CONSOLE_TOKEN"
ENV_READONLY_TOKEN = "BROWSERWORKER_CONSOLE_READONLY_TOKEN"
COOKIE = "bw_console"
SESSION_SECONDS = 12 * 3600
NOTE_SECONDS = 120  # a note after an action is shown for this long
ROLES = ("operator", "viewer")
_ENV = {"operator": ENV_TOKEN, "viewer": ENV_READONLY_TOKEN}
_MIN_TOKEN = 16


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Tokens:
    """Tokens generated at this start, to be printed once (empty when none were)."""

    operator: str | None = None
    viewer: str | None = None


@dataclass(frozen=True)
class Login:
    """A signed-in person: name, role and the session's CSRF token."""

    name: str
    role: str
    csrf: str

    @property
    def can_act(self) -> bool:
        return self.role == "operator"


class Keys:
    """The token hashes of each role and the key that signs session cookies."""

    def __init__(self, hashes: dict[str, str], secret: str, *, explicit: bool) -> None:
        self.hashes = hashes
        self.explicit = explicit  # the operator token came from the environment
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

    def session_cookie(self, name: str, role: str) -> str:
        return self._cookies.dumps({"n": name, "r": role, "c": secrets.token_urlsafe(24),
                                    "k": self.hashes[role][:16]})

    def login(self, request: Request) -> Login | None:
        """The session of ``request``'s cookie, if it is signed, fresh and its token still current."""
        raw = request.cookies.get(COOKIE)
        if not raw:
            return None
        try:
            data: Any = self._cookies.loads(raw, max_age=SESSION_SECONDS)
        except BadSignature:
            return None
        role = data.get("r") if isinstance(data, dict) else None
        if role not in self.hashes or not hmac.compare_digest(str(data.get("k")), self.hashes[role][:16]):
            return None
        return Login(str(data["n"]), role, str(data["c"]))


def load_keys(path: Path, environ: dict[str, str] | None = None) -> tuple[Keys, Tokens]:
    """The console's keys: tokens from the environment, else the hashes kept in ``path``
    (created 0600 with fresh tokens when missing: those are returned, to print once)."""
    env = os.environ if environ is None else environ
    stored = _read(path)
    fresh: dict[str, str] = {}
    for role in ROLES:
        if not env.get(_ENV[role]) and role not in stored.get("hashes", {}):
            fresh[role] = secrets.token_urlsafe(24)
    if fresh or "secret" not in stored:
        stored.setdefault("hashes", {}).update({role: _hash(t) for role, t in fresh.items()})
        stored.setdefault("secret", secrets.token_urlsafe(32))
        _write(path, stored)
    hashes = dict(stored["hashes"])
    for role in ROLES:
        token = env.get(_ENV[role])
        if token:
            if len(token) < _MIN_TOKEN:
                raise UsageError(f"${_ENV[role]} is too short: use at least {_MIN_TOKEN} random characters")
            hashes[role] = _hash(token)
    if hashes.get("operator") == hashes.get("viewer"):
        raise UsageError(f"${ENV_TOKEN} and ${ENV_READONLY_TOKEN} must differ")
    return Keys(hashes, stored["secret"], explicit=bool(env.get(ENV_TOKEN))), \
        Tokens(fresh.get("operator"), fresh.get("viewer"))


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


def check_csrf(login: Login, submitted: object) -> bool:
    return isinstance(submitted, str) and hmac.compare_digest(submitted, login.csrf)
