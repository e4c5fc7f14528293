"""Login sessions reused across runs and hosts: ``Flow(session=KEY)`` with a ``@flow.login`` step.

A flow with a session key signs in once and keeps the browser context's storage state
(cookies, local storage, IndexedDB) in the store under that key, sealed (AES-256-GCM, the
key as associated data). Every later pass of any run of any flow with that key, on any
worker, creates its browser context from the saved state; its ``login`` step then only asks
``@login.check`` whether the page is signed in (journaled ``session_reused``). When there is
no usable saved state (none, expired, sealed with another key) or the check says no, the
login runs and its state replaces the saved one (``session_saved``).

Two runs needing a login for one key at once: the first takes the row's login claim, the
other waits for its save (``session_waited``) and takes a new pass from it, or takes over the
claim once it expires. The sealing key: :data:`ENV_KEY` (32 random bytes, URL-safe base64:
:func:`generate_key`), else, for SQLite, a key file beside the database created on first use.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import os
import secrets
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SessionKeyError, UsageError
from ..flow import Action, Flow, Login, StepContext
from ..store.base import Store
from ..store.records import LoginSession
from ._actions import run_action
from ._passes import Again, Pass, RunScope
from ._settings import ENV_SESSION_KEY, ENV_SESSION_MAX_AGE, SessionSettings

if TYPE_CHECKING:  # pragma: no cover
    from ..store.connector import Connector

__all__ = [
    "DEFAULT_MAX_AGE",
    "ENV_KEY",
    "ENV_MAX_AGE",
    "LOGIN_CLAIM_TTL",
    "Sealer",
    "SessionInfo",
    "SessionKeyError",
    "SessionRun",
    "SessionUnreadable",
    "drop_session",
    "generate_key",
    "list_sessions",
    "replay_seed",
    "sealer_for",
    "session_key",
]

ENV_KEY = ENV_SESSION_KEY
ENV_MAX_AGE = ENV_SESSION_MAX_AGE
DEFAULT_MAX_AGE = 12 * 3600.0
LOGIN_CLAIM_TTL = 120.0
"""Seconds a run's claim on a key's login holds; another run may take it over after that."""
_POLL = 0.2
_MAGIC = b"bws1"


class SessionUnreadable(Exception):
    """A saved state that this key cannot open (sealed with another key, or damaged)."""


def generate_key() -> str:
    """A new sealing key, as :data:`ENV_KEY` takes it: 32 random bytes in URL-safe base64."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def _parse_key(text: str, where: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise SessionKeyError(
            f"{where} must be 32 bytes in URL-safe base64 (make one with: browserworker sessions new-key)"
        )
    return raw


class Sealer:
    """Seals and opens storage states with one AES-256-GCM key; ``key_id`` names the key, never reveals it."""

    def __init__(self, key: bytes) -> None:
        # imported here, not with the module: every run loads this module, few seal anything
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)
        self.key_id = hashlib.sha256(b"browserworker-session-key\0" + key).hexdigest()[:16]

    def seal(self, state: Mapping[str, Any], session_key: str) -> bytes:
        plain = zlib.compress(json.dumps(state, separators=(",", ":")).encode())
        nonce = os.urandom(12)
        return _MAGIC + nonce + self._aead.encrypt(nonce, plain, session_key.encode())

    def open(self, sealed: bytes, session_key: str) -> dict[str, Any]:
        """The storage state; :class:`SessionUnreadable` if this key did not seal it (for this session key)."""
        if not sealed.startswith(_MAGIC) or len(sealed) < len(_MAGIC) + 12 + 16:
            raise SessionUnreadable("not a sealed session")
        nonce, body = sealed[len(_MAGIC) : len(_MAGIC) + 12], sealed[len(_MAGIC) + 12 :]
        from cryptography.exceptions import InvalidTag

        try:
            state = json.loads(zlib.decompress(self._aead.decrypt(nonce, body, session_key.encode())))
        except (InvalidTag, zlib.error, ValueError) as exc:
            raise SessionUnreadable("sealed with another key") from exc
        if not isinstance(state, dict):
            raise SessionUnreadable("not a storage state")
        return state

    def readable(self, row: LoginSession) -> bool:
        if row.state is None:
            return False
        try:
            self.open(row.state, row.key)
        except SessionUnreadable:
            return False
        return True


def _key_file(path: Path) -> bytes:
    """The key in ``path``, created (0600, atomically, never overwritten) if there is none."""
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(generate_key() + "\n")
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, path)  # fails if another process made it first: theirs is kept
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    return _parse_key(path.read_text(), f"the session key file {path}")


def session_key(connector: Connector, given: str | None, *, create: bool = True) -> bytes | None:
    """The sealing key for a store: ``given`` (:data:`ENV_KEY`), else the store's key file (SQLite;
    made if missing with ``create``, else None), else :class:`SessionKeyError` naming the variable."""
    if given:
        return _parse_key(given, ENV_KEY)
    path: Path | None = getattr(connector, "session_key_file", None)
    if path is None:
        raise SessionKeyError(
            f"saved login sessions need a key: set {ENV_KEY} (32 bytes in URL-safe base64, the "
            f"same on every worker) for the store at {connector.location}"
        )
    if not create and not path.exists():
        return None
    return _key_file(path)


def sealer_for(store: Store, settings: SessionSettings, *, create: bool = True) -> Sealer | None:
    """The :class:`Sealer` of ``store`` with ``settings.key`` (see :func:`session_key`)."""
    key = session_key(store.connector, settings.key, create=create)  # type: ignore[attr-defined]
    return None if key is None else Sealer(key)


def max_age_of(flow: Flow[Any] | None, settings: SessionSettings) -> float:
    """How old a saved session of ``flow`` may be and still be reused, in seconds: its
    ``session_max_age``, else ``settings.max_age`` (:data:`ENV_MAX_AGE`), else
    :data:`DEFAULT_MAX_AGE`."""
    if flow is not None and flow.session_max_age is not None:
        return flow.session_max_age
    return settings.max_age if settings.max_age is not None else DEFAULT_MAX_AGE


class SessionRun:
    """One run's use of its flow's session: the state each pass starts from, and its login step."""

    def __init__(self, scope: RunScope) -> None:
        self.scope = scope
        self.flow = scope.flow
        self.store = scope.journal.store
        self.call = scope.journal.astore.call
        key = self.flow.session_key(scope.inputs)
        assert key is not None
        self.key = key
        self.settings = scope.sessions
        self.max_age = max_age_of(self.flow, self.settings)
        self.owner = scope.run.id  # a run resumed after a crash takes its own claim back at once
        self.sealer: Sealer | None = None
        self.loaded: LoginSession | None = None  # the row this pass's context was created from
        self.seen = 0  # the version this pass found (0: none saved)
        self.waited = False

    def _open(self, row: LoginSession | None) -> dict[str, Any] | None:
        """The storage state of ``row`` if it may be reused now."""
        if row is None or row.state is None or row.saved_at is None:
            return None
        if row.saved_at + self.max_age < self.store.now():
            return None
        assert self.sealer is not None
        try:
            return self.sealer.open(row.state, self.key)
        except SessionUnreadable:
            return None

    async def context_options(self) -> dict[str, Any]:
        """What a pass's context starts from: the saved state (``storage_state``), or nothing.

        With no usable state while another run holds the key's login, wait for its save first."""
        if self.sealer is None:
            self.sealer = await asyncio.to_thread(sealer_for, self.store, self.settings)
        row = await self.call(self.store.login_sessions.get, self.key)
        state = self._open(row)
        if state is None and row is not None and row.claimed(self.store.now()) and row.login_owner != self.owner:
            row = await self._wait(row.version)
            state = self._open(row)
        self.loaded = row if state is not None else None
        self.seen = row.version if row is not None else 0
        return {} if state is None else {"storage_state": state}

    async def _wait(self, version: int) -> LoginSession | None:
        """Poll the row until a save newer than ``version`` or the claim is free or expired."""
        deadline = time.monotonic() + LOGIN_CLAIM_TTL + 5
        row = None
        while time.monotonic() < deadline:
            self.scope.journal.check()
            row = await self.call(self.store.login_sessions.get, self.key)
            if row is None or row.version > version or not row.claimed(self.store.now()):
                return row
            await asyncio.sleep(_POLL)
        return row

    async def run(self, step: Login, p: Pass, *, save_now: bool = False) -> Any:
        """The login step: reuse the pass's state if the check agrees, else log in (once per key) and save.

        ``save_now``: the pass has signed in already (an agent's ``save_login``): its state is
        saved, over whatever is saved under the key (the state this pass started from may be a
        login the site has since ended); answers ``{"session": "saved"}`` or ``"not_saved"``."""
        self.waited = False

        async def body(ctx: StepContext[Any]) -> Any:
            return await self._body(step, p, ctx, save_now)

        value = await run_action(self.scope, Action(id=step.id, fn=body, retries=step.retries, sends=step.sends), p)
        if self.waited:
            raise Again("another run logged in for this session: a new pass starts from its saved state")
        return value

    async def _decide(self, ctx: StepContext[Any], decision: str, row: LoginSession | None, **detail: Any) -> None:
        info: dict[str, Any] = {"version": row.version if row else None, **detail}
        if row is not None and row.saved_at is not None:
            info["age_s"] = round(self.store.now() - row.saved_at, 1)
        await self.scope.journal.decide_step(ctx.step_id, ctx.attempt_no, decision, info)
        ctx.log.info("login session", decision=decision, **info)

    async def _body(self, step: Login, p: Pass, ctx: StepContext[Any], save_now: bool) -> Any:
        loaded = self.loaded
        if loaded is not None and not save_now:
            signed_in = True if step.checker is None else bool(await step.checker(ctx))
            if signed_in:
                await self.call(self.store.login_sessions.used, self.key)
                await self._decide(ctx, "session_reused", loaded)
                return {"session": "reused"}
            await self._decide(ctx, "session_check_failed", loaded)
        seen = self.seen
        if save_now:  # what this pass holds replaces what is saved now, whoever saved it
            row = await self.call(self.store.login_sessions.get, self.key)
            seen = row.version if row is not None else 0
        while not await self.call(
            self.store.login_sessions.claim, self.key, self.flow.name, self.owner, LOGIN_CLAIM_TTL, seen
        ):
            row = await self.call(self.store.login_sessions.get, self.key)
            if row is not None and row.version > seen:
                if self._open(row) is not None and not save_now:  # another run's login: a new pass starts from it
                    self.waited = True
                    await self._decide(ctx, "session_waited", row)
                    return {"session": "waited"}
                seen = row.version  # newer, but not usable here (expired, another key): replace it
                continue
            await self._wait(seen)  # another run is logging in: until it saves or its claim ends
        try:
            value = await step.fn(ctx)
            state = await p.context.storage_state(indexed_db=True)
        except BaseException:
            await self.call(self.store.login_sessions.release, self.key, self.owner)
            raise
        assert self.sealer is not None
        version = await self.call(
            self.store.login_sessions.save,
            self.key,
            self.flow.name,
            self.owner,
            self.sealer.seal(state, self.key),
            self.sealer.key_id,
            self.store.now(),
            self.max_age,
        )
        await self._decide(
            ctx,
            "session_saved" if version is not None else "session_not_saved",
            None,
            **({"version": version} if version is not None else {"reason": "a newer login was saved meanwhile"}),
        )
        if save_now:
            return {"session": "saved" if version is not None else "not_saved"}
        return value


def replay_seed(store: Store, flow: Flow[Any], inputs: Any, decisions: list[str], settings: SessionSettings) -> bool:
    """For a replay in a fresh store: when the recorded run started from a saved session (its
    first session decision is ``session_reused`` or ``session_check_failed``), save an empty
    one under the run's key, so that the replay takes the same branch (the recorded answers
    decide the check). Whether a session was seeded."""
    key = flow.session_key(inputs) if flow.login_step is not None else None
    first = next((d for d in decisions if d.startswith("session_")), None)
    if key is None or first not in ("session_reused", "session_check_failed"):
        return False
    sealer = sealer_for(store, settings)
    assert sealer is not None
    owner = "replay"
    store.login_sessions.claim(key, flow.name, owner, LOGIN_CLAIM_TTL, 0)
    store.login_sessions.save(
        key,
        flow.name,
        owner,
        sealer.seal({"cookies": [], "origins": []}, key),
        sealer.key_id,
        store.now(),
        max_age_of(flow, settings),
    )
    return True


# -- listing and dropping (the CLI's `browserworker sessions`) ------------------------------


@dataclass(frozen=True)
class SessionInfo:
    """What ``browserworker sessions`` shows of a saved session: never its state."""

    key: str
    flow: str | None
    saved_at: float | None
    used_at: float | None
    uses: int
    version: int
    age_s: float | None
    expired: bool
    readable: bool | None  # None: no key to tell with
    login_in_progress: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "flow": self.flow,
            "saved_at": self.saved_at,
            "used_at": self.used_at,
            "uses": self.uses,
            "version": self.version,
            "age_s": self.age_s,
            "expired": self.expired,
            "readable": self.readable,
            "login_in_progress": self.login_in_progress,
        }


def list_sessions(store: Store, settings: SessionSettings) -> tuple[list[SessionInfo], str | None]:
    """Every saved session, and why readability could not be told (no key), if so. A session
    is expired past the max age of the flow that saved it (``settings.max_age``, if set, wins)."""
    try:
        sealer = sealer_for(store, settings, create=False)
        problem = None
    except SessionKeyError as exc:
        sealer, problem = None, str(exc)
    forced = settings.max_age is not None
    now = store.now()
    out = []
    for row in store.login_sessions.list():
        age = None if row.saved_at is None else now - row.saved_at
        limit = max_age_of(None, settings) if forced or row.max_age is None else row.max_age
        out.append(
            SessionInfo(
                key=row.key,
                flow=row.flow_name,
                saved_at=row.saved_at,
                used_at=row.used_at,
                uses=row.uses,
                version=row.version,
                age_s=None if age is None else round(age, 1),
                expired=age is None or age > limit,
                readable=None if problem else sealer is not None and sealer.readable(row),
                login_in_progress=row.claimed(now),
            )
        )
    return out, problem


def drop_session(store: Store, key: str) -> None:
    """Forget the saved session ``key`` (its next run logs in); :class:`UsageError` if there is none."""
    if not store.login_sessions.drop(key):
        raise UsageError(f"no saved login session with key {key!r} (see: browserworker sessions)")
