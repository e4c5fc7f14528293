"""The dispatch gate's approval check: a request of an ``approve=`` effect waits for a person.

When such a request reaches the gate (before its dispatch commit), the gate asks here:
the request's fingerprint (method, URL, normalized body) is compared with the step's live
approval. Approved with the same fingerprint: it goes on. Otherwise an approval is asked
(once per fingerprint: a restarted worker finds its own), with a screenshot of the page and
the request summarized with its secrets masked, and the gate holds the request for up to
the hold (``ApprovalSettings.hold``, from ``BROWSERWORKER_APPROVAL_HOLD``), polling the store
for the decision while the lease heartbeats. No decision by then: the request is aborted
(nothing sent) and the run is parked AWAITING_APPROVAL; a later attempt rebuilds the page and
asks here again. The hold and the default expiry come with the run (the engine makes them
where the process starts); nothing here reads the environment.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from playwright.async_api import CDPSession, Page

from .._canonical import canonical_json
from ..errors import LeaseLost
from ..flow import Effect
from ..store.records import ApprovalRecord, AttemptRecord

if TYPE_CHECKING:  # the recording package imports the engine: imported where used
    from .._redact import Redactor

__all__ = [
    "VOLATILE_FIELDS",
    "ApprovalCheck",
    "approval_ttl",
    "describe_request",
    "needs_approval",
    "request_fingerprint",
]

_POLL = 0.2
_CDP_WAIT = 5.0
_BODY_MAX = 4000


def needs_approval(effect: Effect, inputs: Any) -> bool:
    """Whether a person must approve ``effect``'s dispatch for these (validated) inputs."""
    return bool(effect.approve(inputs)) if callable(effect.approve) else bool(effect.approve)


def approval_ttl(effect: Effect, default: float) -> float:
    """Seconds an approval of ``effect`` may wait: its ``approve_timeout=``, else ``default``
    (the run's ``ApprovalSettings.ttl``: ``BROWSERWORKER_APPROVAL_TTL``, else 24 h)."""
    return effect.approve_timeout if effect.approve_timeout is not None else default


VOLATILE_FIELDS = ("csrf", "xsrf", "authenticity_token", "_token", "nonce")
"""Form fields left out of a request's fingerprint (a name containing one of these): a page
rebuilt after a restart carries a new anti-forgery token, and is still the same request."""


def _volatile(name: str) -> bool:
    low = name.lower()
    return any(v in low for v in VOLATILE_FIELDS)


def _normal_body(body: str | None, content_type: str | None, *, keep_volatile: bool = False) -> Any:
    if not body:
        return None
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        return sorted((k, v) for k, v in parse_qsl(body, keep_blank_values=True) if keep_volatile or not _volatile(k))
    if kind == "multipart/form-data":
        fields = _multipart_fields(body, content_type or "")
        if fields is not None:
            return sorted(field for field in fields if keep_volatile or not _volatile(field[0]))
    if kind.endswith("json"):
        try:
            return json.loads(body)
        except ValueError:
            return body
    return body


_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_PARAM = re.compile(r'\b(name|filename)="([^"]*)"', re.IGNORECASE)


def _multipart_fields(body: str, content_type: str) -> list[tuple[str, str]] | None:
    """A ``multipart/form-data`` body's fields, ``(name, value)``; a file's value says its name,
    and its size and SHA-256 if the body holds its content (its content is not kept; Chromium
    shows the gate no content of a file chosen from disk). The browser draws a new boundary
    for every submission: without this, the same form sent again would be another request.
    ``None`` if the body is not one (no boundary)."""
    found = _BOUNDARY.search(content_type)
    if found is None:
        return None
    fields = []
    for part in body.split(f"--{found.group(1)}")[1:]:
        if part.startswith("--"):  # the closing delimiter
            break
        head, sep, content = part.removeprefix("\r\n").partition("\r\n\r\n")
        if not sep:
            continue
        content = content.removesuffix("\r\n")
        params = {key.lower(): value for key, value in _PARAM.findall(head)}
        if "filename" in params:
            data = content.encode()
            digest = f", {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}" if data else ""
            content = f"[file {params['filename']!r}{digest}]"
        fields.append((params.get("name", ""), content))
    return fields


def request_fingerprint(method: str, url: str, body: str | None, content_type: str | None = None) -> str:
    """sha256 of the method, the URL and the normalized body (form fields sorted, URL-encoded
    or multipart, anti-forgery tokens left out (:data:`VOLATILE_FIELDS`), JSON canonical)."""
    text = canonical_json([method.upper(), url, _normal_body(body, content_type)])
    return hashlib.sha256(text.encode()).hexdigest()


def describe_request(
    method: str, url: str, body: str | None, headers: dict[str, str], redactor: Redactor
) -> dict[str, Any]:
    """What a person is shown of a request: method, URL, form fields or body, headers, each with
    its secrets masked (secret inputs, password fields, cookies, authorization)."""
    from .._redact import REDACTED

    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    summary: dict[str, Any] = {"method": method.upper(), "url": redactor.url(url)}
    normal = _normal_body(body, content_type, keep_volatile=True)
    if isinstance(normal, list):
        summary["fields"] = [
            [k, REDACTED if redactor.is_secret(k) or _volatile(k) else redactor.scrub(v)] for k, v in normal
        ]
    elif isinstance(normal, dict | list) or (normal is not None and not isinstance(normal, str)):
        summary["json"] = redactor.json_data(normal)
    elif normal is not None:
        text = redactor.body(normal, content_type)
        summary["body"] = text[:_BODY_MAX] + ("…" if len(text) > _BODY_MAX else "")
    summary["headers"] = {k: redactor.header(k, v) for k, v in sorted(headers.items())}
    return summary


@dataclass
class Parked:
    """Why the gate did not let an approval's request go: ``pending`` (the run waits),
    ``rejected`` or ``expired`` (the run fails)."""

    kind: str
    approval: ApprovalRecord


class ApprovalCheck:
    """One armed effect attempt's approval check (see the module docstring): ``hold`` seconds a
    request is held waiting for a decision before the run is parked, ``ttl`` seconds an
    approval may wait when the effect has no ``approve_timeout=``."""

    def __init__(self, scope: Any, effect: Effect, page: Page, gate: Any, *, hold: float, ttl: float) -> None:
        self.scope = scope
        self.gate = gate
        self.effect = effect
        self.page = page
        self.journal = scope.journal
        self.parked: Parked | None = None
        self.stopped = asyncio.Event()  # set once a request was refused for want of approval
        self.abandoned = False  # the effect function ended while a request was held: stop holding
        self.hold = hold
        self.ttl = approval_ttl(effect, ttl)
        self._session: CDPSession | None = None
        self.password_fields: list[str] = []

    @classmethod
    async def of(
        cls, scope: Any, effect: Effect, page: Page, gate: Any, *, hold: float, ttl: float
    ) -> ApprovalCheck | None:
        """The check for an attempt of ``effect``, if it needs approval for these inputs."""
        if not needs_approval(effect, scope.inputs):
            return None
        check = cls(scope, effect, page, gate, hold=hold, ttl=ttl)
        await check.look()
        return check

    async def _redactor(self) -> Redactor:
        from .._redact import Redactor

        inputs = self.scope.inputs
        red = Redactor.for_run(self.scope.flow.secret_fields(), dict(inputs))
        red.add_fields(self.password_fields)
        return red

    async def look(self) -> None:
        """Before the effect runs: the names of the page's password fields (masked in the
        request shown; while the page submits it runs no script to ask)."""
        try:
            async with asyncio.timeout(_CDP_WAIT):
                self.password_fields = await self.page.eval_on_selector_all(
                    "input[type=password]", "els => els.flatMap(e => [e.name, e.id]).filter(Boolean)"
                )
        except Exception:  # no page to look at: the secret inputs and the usual names still apply
            self.password_fields = []

    async def allow(self, method: str, url: str, body: str | None, headers: dict[str, str]) -> bool:
        """Whether the request may go on now; False (``parked`` set) if it must not be sent."""
        if self.parked is not None:
            return False
        attempt = self.journal_attempt()
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
        fp = request_fingerprint(method, url, body, content_type)
        store = self.journal.store
        run_id, step_id = self.journal.run_id, self.effect.id
        live: ApprovalRecord | None = await self.journal.astore.call(store.approvals.current, run_id, step_id)
        if live is None or live.fingerprint != fp:  # never asked, or asked about another request
            summary = describe_request(method, url, body, headers, await self._redactor())
            shot = await self._screenshot(f"{step_id}-{attempt.attempt_no}-approval")
            live = await self.journal.request_approval(attempt, fp, summary, shot, self.ttl)
            self.scope.extensions.later.notice(
                self.scope.run,
                step_id,
                f"effect {step_id} waits for approval: {summary['method']} {summary['url']}",
            )
        return await self._wait(live)

    async def _wait(self, approval: ApprovalRecord) -> bool:
        """Hold the request up to the hold time (and the approval's expiry), polling for the decision."""
        store = self.journal.store
        deadline = time.time() + min(self.hold, max(0.0, approval.expires_at - time.time()))
        while True:
            if approval.state == "APPROVED":
                await self.journal.decide_step(
                    self.effect.id,
                    self.journal_attempt().attempt_no,
                    "approval_used",
                    {"approval": approval.id, "fingerprint": approval.fingerprint, "by": approval.decided_by},
                )
                return True
            if approval.state in ("REJECTED", "EXPIRED"):
                return self._park("rejected" if approval.state == "REJECTED" else "expired", approval)
            if approval.state != "PENDING":  # superseded by a newer attempt: not ours to send
                return self._park("pending", approval)
            if not self.journal.alive:
                raise LeaseLost("the run's lease was lost while it waited for approval")
            if time.time() >= deadline or self.abandoned:
                return self._park("pending", approval)
            await asyncio.sleep(_POLL)
            again = await self.journal.astore.call(store.approvals.get, approval.id)
            assert again is not None
            approval = again

    async def _cdp(self, method: str, params: dict[str, Any]) -> Any:
        """One DevTools call on the page. Playwright's own page calls wait for the navigation
        the held request started; the page still shows the document that is about to send."""
        if self._session is None:
            self._session = await self.page.context.new_cdp_session(self.page)
        return await self._session.send(method, params)

    async def _screenshot(self, name: str) -> str | None:
        """The page as it is about to send, saved beside the run's other evidence (best effort)."""
        evidence = self.scope.evidence_dir
        if evidence is None:
            return None
        path = evidence / self.scope.run.id.replace(":", "_") / f"{name}.png"
        try:
            async with asyncio.timeout(_CDP_WAIT):
                shot = await self._cdp("Page.captureScreenshot", {"format": "png"})
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(shot["data"]))
        except Exception:  # evidence is best effort: the page may be gone
            return None
        return str(path)

    async def close(self) -> None:
        if self._session is not None:
            try:
                await self._session.detach()
            except Exception:  # the page is gone already
                pass
            self._session = None

    def _park(self, kind: str, approval: ApprovalRecord) -> bool:
        self.parked = Parked(kind, approval)
        self.stopped.set()
        return False

    def journal_attempt(self) -> AttemptRecord:
        attempt: AttemptRecord | None = self.gate.attempt  # the gate is armed
        assert attempt is not None
        return attempt
