"""The replay router: answers every request of a replay from a recording; nothing leaves the machine.

Matching (not Playwright's first-match ``route_from_har``):

- a request's key is its method, its URL (secret query parameters redacted, query sorted,
  no fragment) and its body (redacted like the recording; forms and JSON normalized);
- a request a step makes (not an effect's dispatch, nor a page a verifier saw) is answered from
  what the same step got for that key in the recording, in order, counted afresh in each pass
  (each browser context): a pass resumed after a crash starts as a fresh session did, so a page
  the flow opened before signing in is the sign-in page again, not the page the recording got
  there after signing in;
- other entries with the same key are served in recorded order, each once;
- once a key's entries are used up, its last answer is served again, unless that entry
  was a *dispatch* of a non-idempotent effect: a further dispatch is refused, never
  answered twice, since an answer would hide a duplicate;
- the pages a verifier saw in the recording's self-tests ("before" and "after" the
  effect) are served by the state of the replayed "server": the "after" page once the
  effect's dispatch was answered in this replay (or the crashed run it resumes), else
  the "before" page;
- a WebSocket is refused: a recording holds none of a socket's messages (the recorder says so
  as it records one);
- the browser's own request for a site's ``/favicon.ico`` (Chromium sends it when it gets round
  to it, so a recording may lack it) is answered ``404`` when the recording has none;
- anything else is aborted, with an error naming the request and the closest recorded one.

What the replayed server has answered is kept in a :class:`~.files.Ledger`, written before
each answer is given, so a crashed replay and its resume share it.

Redirects: Playwright does not route the requests a browser makes to follow a redirect,
so a fulfilled ``303`` would let the follow-up ``GET`` go to the network. The replay
context therefore uses a local proxy (:class:`ReplayProxy`, loopback only) that answers
those hops from the same recording: the browser sees the real ``303`` (the dispatch gate
records it in the outbox) and then the recorded page at the ``Location``. For HTTPS hops
the proxy terminates TLS with a throw-away certificate (made with ``openssl``; the replay
context ignores certificate errors).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from playwright.async_api import BrowserContext, Page, Request, Route

from .._redact import Redactor
from ..logs import get_logger
from .files import NO_SOCKETS, VERIFY_PHASES, Ledger, Recording, Segment

__all__ = ["Answer", "Entry", "ReplayProxy", "ReplayRouter", "request_key", "tls_context"]

log = get_logger("browserworker.replay")

_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
# Chromium asks a site for its icon by itself, when it gets round to it after a load; a recording
# may or may not hold that request, so a replay's unrecorded one is not the page's doing.
_FAVICON = "/favicon.ico"
_DROP_RESPONSE_HEADERS = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"}
)


def _norm_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:  # a host no parser takes (a secret value scrubbed out of it): matched as it is
        return url
    query = urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True)))
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", query, ""))


def _norm_body(text: str, mime: str | None) -> str:
    kind = (mime or "").split(";")[0].strip().lower()
    if not text:
        return ""
    if kind == "application/x-www-form-urlencoded":
        return urlencode(sorted(parse_qsl(text, keep_blank_values=True)))
    if kind.endswith("json"):
        try:
            return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except ValueError:
            return text
    if kind == "multipart/form-data":
        return _norm_multipart(text)
    return text


_DISPOSITION = re.compile(r'\bname="([^"]*)"(?:;\s*filename="([^"]*)")?', re.I)


def _norm_multipart(text: str) -> str:
    """A multipart form's fields as a JSON object (a file as its name and content), whatever its
    boundary: the browser draws a new one for every submission, so two posts of the same form
    never have the same bytes. A body that is not such a form is left as it is."""
    first, newline, _ = text.partition("\n")
    delimiter = first.rstrip("\r")
    if not newline or not delimiter.startswith("--"):
        return text
    fields: dict[str, list[Any]] = {}
    for part in text.split(delimiter)[1:]:
        if part.startswith("--"):  # the closing delimiter
            break
        head, sep, value = part.lstrip("\r\n").partition("\r\n\r\n")
        found = _DISPOSITION.search(head) if sep else None
        if found is None:
            return text
        value = value.removesuffix("\r\n")
        name, filename = found.groups()
        fields.setdefault(name, []).append(value if filename is None else {"file": filename, "content": value})
    one = {name: values[0] if len(values) == 1 else values for name, values in fields.items()}
    return json.dumps(one, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,}")


def _segments(url: str) -> dict[str, str]:
    """An address's path, segment by segment (a page's made-up value may be one: Gradio's
    ``/gradio_api/heartbeat/<session id>``)."""
    return {f"/{i}": part for i, part in enumerate(urlsplit(url).path.split("/"))}


def _made_up(live: str, recorded: str) -> bool:
    """Two values shaped like one a page draws itself: tokens of 8 or more letters, digits, ``-``
    and ``_``, with a digit in one of them (a session id, a UUID, a time in milliseconds: not
    words), of about the same length (a random number written in base 36 has 10 to 12 digits),
    with ``-`` and ``_`` at the same places."""
    if not (_TOKEN.fullmatch(live) and _TOKEN.fullmatch(recorded)) or abs(len(live) - len(recorded)) > 2:
        return False
    if not any(c.isdigit() for c in live + recorded):
        return False
    return [i for i, c in enumerate(live) if c in "-_"] == [i for i, c in enumerate(recorded) if c in "-_"]


def _page_of(request: Request) -> Page | None:
    try:
        return request.frame.page
    except Exception:  # a service worker's request, or its frame is gone
        return None


def _host_port(url: str) -> str:
    parts = urlsplit(url if "//" in url else f"//{url}")
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 443)
    return f"{(parts.hostname or '').lower()}:{port}"


def request_key(
    method: str, url: str, body: bytes | str | None, mime: str | None, redactor: Redactor
) -> tuple[str, str, str]:
    """The matching key of a request, after the recording's redaction rules."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else (body or "")
    return (method.upper(), _norm_url(redactor.url(url)), _norm_body(redactor.body(text, mime) if text else "", mime))


def _flat(url: str, body: str) -> dict[str, str]:
    """Query and form/JSON fields of a key, flattened, for "differs in" messages."""
    out = {f"?{k}": v for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    try:
        data = json.loads(body) if body[:1] in "{[" else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        out.update({f"body.{k}": json.dumps(v) for k, v in data.items()})
    elif body and "=" in body and "\n" not in body:
        out.update({f"body.{k}": v for k, v in parse_qsl(body, keep_blank_values=True)})
    return out


@dataclass
class Entry:
    """One recorded request and its response."""

    id: str
    segment: Segment
    key: tuple[str, str, str]
    url: str
    status: int
    headers: list[dict[str, str]]
    content: dict[str, Any]
    dispatch: bool
    idempotent: bool

    @property
    def snapshot(self) -> bool:
        """A verifier self-test page: served by state, never used up."""
        return self.segment.phase in VERIFY_PHASES

    @property
    def repeatable(self) -> bool:
        return not self.dispatch or self.idempotent

    @property
    def label(self) -> str:
        where = self.segment.step or "between steps"
        if self.segment.phase in VERIFY_PHASES:
            where += f" ({self.segment.phase})"
        return f"{self.key[0]} {self.url} (recorded in {where}, entry {self.id})"


@dataclass
class Answer:
    """What the router answers: a recorded response, or a refusal (the request is aborted)."""

    entry: Entry | None = None
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    set_cookies: list[str] = field(default_factory=list)
    body: bytes = b""
    repeat: bool = False
    refusal: str | None = None

    @property
    def failed(self) -> bool:
        """The recorded request got no response (it failed while recording): fail it again."""
        return self.refusal is None and self.status <= 0


class ReplayRouter:
    """Serves a replay from a recording (see the module docstring)."""

    def __init__(
        self,
        recording: Recording,
        ledger: Ledger,
        redactor: Redactor,
        *,
        crash_on_dispatch: str | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.recording = recording
        self.ledger = ledger
        self.redactor = redactor
        self.crash_on_dispatch = crash_on_dispatch
        self.notify = notify or (lambda message: None)
        idempotent = {s["id"] for s in recording.meta["flow"]["steps"] if s.get("idempotent")}
        self.entries: list[Entry] = []
        for segment, har_entries in recording.segments():
            for raw in har_entries:
                req, resp = raw["request"], raw["response"]
                body = (req.get("postData") or {}).get("text")
                mime = (req.get("postData") or {}).get("mimeType")
                tag = raw.get("_browserworker", {})
                self.entries.append(
                    Entry(
                        id=tag.get("id", f"{segment.number:04d}.{len(self.entries)}"),
                        segment=segment,
                        key=request_key(req["method"], req["url"], body, mime, redactor),
                        url=req["url"],
                        status=int(resp.get("status") or 0),
                        headers=list(resp.get("headers") or []),
                        content=dict(resp.get("content") or {}),
                        dispatch=bool(tag.get("dispatch")),
                        idempotent=segment.step in idempotent,
                    )
                )
        self.by_key: dict[tuple[str, str, str], list[Entry]] = {}
        for entry in self.entries:
            self.by_key.setdefault(entry.key, []).append(entry)
        self.by_id = {e.id: e for e in self.entries}
        self.hosts = {_host_port(e.url) for e in self.entries}
        self.plain_hosts = {_host_port(e.url) for e in self.entries if e.url.lower().startswith("http:")} - {
            _host_port(e.url) for e in self.entries if e.url.lower().startswith("https:")
        }
        self.served: list[tuple[str, str]] = []  # (request, entry id or refusal)
        self.refusals: list[str] = []
        self.blocked: list[str] = []  # the browser's own traffic: to hosts the recording never saw, its icon
        self.duplicate: str | None = None  # set when a dispatch beyond the recorded ones was refused
        self.step: str | None = None  # the step the replayed flow runs now (the replayer sets it)
        self._verifying: str | None = None
        self._flow_pages: set[Page] = set()  # while verifying: the pages that are not the verifier's
        self._this_pass: dict[tuple[str, tuple[str, str, str]], int] = {}  # (step, key) -> served in this pass
        self.made_up: dict[str, str] = {}  # a value the page made up live -> the one it made up recording
        self.stood_in: list[str] = []  # each such pair, said once

    # -- state ------------------------------------------------------------------------

    def dispatches_served(self, step: str) -> int:
        return sum(1 for i in self.ledger.served if (e := self.by_id.get(i)) and e.dispatch and e.segment.step == step)

    @contextlib.contextmanager
    def verifying(self, step: str, flow_pages: Iterable[Page] = ()) -> Iterator[None]:
        """While a replayed self-test asks ``step``'s verifier: serve only its recorded verifier pages,
        but to the flow's own pages (``flow_pages``, open before the verifier's), which go on asking
        for what they ask for meanwhile (a stream a page keeps open)."""
        self._verifying, self._flow_pages = step, set(flow_pages)
        try:
            yield
        finally:
            self._verifying, self._flow_pages = None, set()

    def _snapshot(self, snaps: list[Entry], step: str | None = None) -> Entry | None:
        by_step: dict[str | None, list[Entry]] = {}
        for e in snaps:
            if step is None or e.segment.step == step:
                by_step.setdefault(e.segment.step, []).append(e)
        for step_id, candidates in by_step.items():
            served = self.dispatches_served(step_id or "")
            fitting = [e for e in candidates if e.segment.dispatches <= served] or candidates[:1]
            return max(fitting, key=lambda e: (e.segment.dispatches, e.segment.number))
        return None

    # -- answering ------------------------------------------------------------------------

    def answer(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        unrouted: bool = False,
        flow_page: bool = False,
    ) -> Answer:
        """The recorded answer to a live request (the ledger is written before this returns).
        ``unrouted``: the browser sent it past Playwright's routing (to the proxy), as it does a
        redirect's hop and what a page sends as it is left. ``flow_page``: a page of the flow's
        asked for it while a verifier is asked (see :meth:`verifying`)."""
        mime = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
        key = self._as_recorded(request_key(method, url, body, mime, self.redactor))
        pool = self.by_key.get(key, [])
        verifying = self._verifying if not flow_page else None
        if not pool and verifying is None and self._learn(key):
            key = self._as_recorded(key)
            pool = self.by_key.get(key, [])
        shown = f"{method} {url}"
        if verifying is not None:
            entry = self._snapshot([e for e in pool if e.snapshot], verifying)
            if entry is None:
                return self._refuse(shown, key, f"not among the pages {verifying}'s verifier saw while recording")
            return self._serve(shown, entry, repeat=True)
        main = [e for e in pool if not e.snapshot]
        step = self.step
        here = [e for e in main if e.segment.step == step and not e.dispatch]
        if step is not None and here and len(main) == len(pool):  # a page a verifier saw: by state (below)
            n = self._this_pass.get((step, key), 0)
            self._this_pass[(step, key)] = n + 1
            entry = here[min(n, len(here) - 1)]
            return self._serve(shown, entry, repeat=self.ledger.count(entry.id) > 0)
        fresh = [e for e in main if self.ledger.count(e.id) == 0]
        if fresh:
            return self._serve(shown, fresh[0])
        snapshot = self._snapshot([e for e in pool if e.snapshot])
        if snapshot is not None:
            return self._serve(shown, snapshot, repeat=True)
        if main:
            last = main[-1]
            if last.repeatable:
                return self._serve(shown, last, repeat=True)
            times = sum(self.ledger.count(e.id) for e in main)
            self.duplicate = shown
            return self._refuse(
                shown,
                key,
                f"the recording answered this dispatch {times} time(s) and this replay "
                "has used them up: another one would be a duplicate, so it is not "
                "answered",
                closest=False,
            )
        if any(k.lower() == "upgrade" and v.lower() == "websocket" for k, v in headers.items()):
            return self._refuse(shown, key, f"opens a WebSocket: {NO_SOCKETS}", closest=False)
        if method.upper() == "GET" and urlsplit(url).path.endswith(_FAVICON):
            self.blocked.append(f"{shown} (the browser's own icon request, not in the recording: answered 404)")
            self.served.append((shown, "404"))
            return Answer(status=404)
        if unrouted and method.upper() not in _SAFE:
            # a beacon a page sends as it is left (pagehide) passes no route while recording, so no
            # recording holds it; its answer is read by nothing
            self.blocked.append(f"{shown} (sent as its page was left, past any route: answered 204 offline)")
            self.served.append((shown, "204"))
            return Answer(status=204)
        return self._refuse(shown, key, "not in the recording")

    # -- values a page makes up --------------------------------------------------------------

    def _as_recorded(self, key: tuple[str, str, str]) -> tuple[str, str, str]:
        """``key`` with each value the page made up live replaced by the one it made up recording."""
        return self._as_recorded_with(key, self.made_up) if self.made_up else key

    def _learn(self, key: tuple[str, str, str]) -> bool:
        """Learn the values a page draws for itself from a request the recording lacks: a recorded
        request of the same method and site that differs from it only in such values, in its
        path, query or body (the session id a Gradio app draws at each load, in its posts, its
        stream's query and its heartbeat's path; a cache buster's time), makes each live one stand
        for the recorded one from now on. A field the flow fills is the same in a replay, so a
        value that differs is the page's own; only values of one shape are taken (:func:`_made_up`)."""
        live_fields = _flat(key[1], key[2]) | _segments(key[1])
        where = urlsplit(key[1])[:2]
        best: dict[str, str] | None = None
        for entry in self.entries:
            if entry.key[0] != key[0] or entry.snapshot or urlsplit(entry.key[1])[:2] != where:
                continue
            pairs = self._stand_ins(live_fields, _flat(entry.key[1], entry.key[2]) | _segments(entry.key[1]))
            if not pairs or self._as_recorded_with(key, pairs) != entry.key:
                continue
            if best is None or len(pairs) < len(best):
                best = pairs
        if not best:
            return False
        for live, recorded in best.items():
            if live not in self.made_up:
                self.made_up[live] = recorded
                message = (
                    f"replay: the page made up {live!r} where the recording has {recorded!r} (a value it draws "
                    "itself, such as a session id): answered as the recorded one"
                )
                self.stood_in.append(message)
                log.info("replay matched a value the page made up", live=live, recorded=recorded)
        return True

    def _stand_ins(self, live: Mapping[str, str], recorded: Mapping[str, str]) -> dict[str, str] | None:
        """The made-up values by which fields ``live`` differs from ``recorded`` (live -> recorded),
        or None if they differ otherwise."""
        if set(live) != set(recorded):
            return None
        pairs: dict[str, str] = {}
        for name, value in live.items():
            a, b = value.strip('"'), recorded[name].strip('"')
            if a == b:
                continue
            if not _made_up(a, b) or self.made_up.get(a, b) != b:
                return None
            pairs[a] = b
        return pairs

    @staticmethod
    def _as_recorded_with(key: tuple[str, str, str], pairs: Mapping[str, str]) -> tuple[str, str, str]:
        method, url, body = key
        for live, recorded in pairs.items():
            url, body = url.replace(live, recorded), body.replace(live, recorded)
        return method, url, body

    def _serve(self, shown: str, entry: Entry, repeat: bool = False) -> Answer:
        if entry.dispatch and not repeat and self.crash_on_dispatch == entry.segment.step:
            self.ledger.add(entry.id)  # the "server" committed it; the worker dies before the reply
            log.warning(
                "crashing on purpose: the dispatch reached the recorded server, the reply is lost", entry=entry.id
            )
            os.kill(os.getpid(), signal.SIGKILL)
        if not repeat or entry.dispatch:
            self.ledger.add(entry.id)
        self.served.append((shown, entry.id))
        headers: dict[str, str] = {}
        cookies: list[str] = []
        for h in entry.headers:
            name = h["name"].lower()
            if name in _DROP_RESPONSE_HEADERS:
                continue
            if name == "set-cookie":
                cookies.extend(h["value"].split("\n"))
            else:
                headers[name] = h["value"]
        body = self.recording.body(entry.content) if entry.status > 0 else b""
        return Answer(entry=entry, status=entry.status, headers=headers, set_cookies=cookies, body=body, repeat=repeat)

    def _refuse(self, shown: str, key: tuple[str, str, str], why: str, closest: bool = True) -> Answer:
        message = f"replay: {shown} {why}"
        if key[2]:
            message += f"\n  its body: {key[2][:300]}"
        if closest:
            near = self.closest(key)
            if near is not None:
                message += f"\n  closest recorded: {near.label}"
                differs = self._differs(key, near.key)
                if differs:
                    message += f"\n  differs in: {differs}"
        self.refusals.append(message)
        self.served.append((shown, "refused"))
        log.warning("replay refused a request", request=shown, reason=why)
        self.notify(message)
        return Answer(refusal=message)

    def closest(self, key: tuple[str, str, str]) -> Entry | None:
        if not self.entries:
            return None
        wanted = "\n".join(key)

        def score(e: Entry) -> tuple[bool, float]:
            return (e.key[0] == key[0], difflib.SequenceMatcher(None, wanted, "\n".join(e.key)).ratio())

        return max(self.entries, key=score)

    @staticmethod
    def _differs(live: tuple[str, str, str], recorded: tuple[str, str, str]) -> str:
        parts = []
        if live[0] != recorded[0]:
            parts.append(f"method {live[0]} (recorded {recorded[0]})")
        lu, ru = urlsplit(live[1]), urlsplit(recorded[1])
        if (lu.scheme, lu.netloc, lu.path) != (ru.scheme, ru.netloc, ru.path):
            parts.append(f"URL {lu.scheme}://{lu.netloc}{lu.path} (recorded {ru.scheme}://{ru.netloc}{ru.path})")
        a, b = _flat(live[1], live[2]), _flat(recorded[1], recorded[2])
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                parts.append(f"{name} {a.get(name)!r} (recorded {b.get(name)!r})")
        if not parts and live[2] != recorded[2]:
            parts.append("body")
        return "; ".join(parts[:8])

    # -- Playwright routing -------------------------------------------------------------------

    async def install(self, context: BrowserContext) -> None:
        """Answer every request of ``context`` (registered first, so the dispatch gate falls back to it);
        a new context is a new pass (:meth:`new_pass`)."""
        self.new_pass()
        await context.route("**/*", self._route)

    def new_pass(self) -> None:
        """A new pass begins: its steps' requests are answered from the recording's afresh."""
        self._this_pass.clear()

    async def _route(self, route: Route, request: Request) -> None:
        answer = self.answer(
            request.method,
            request.url,
            await request.all_headers(),
            request.post_data_buffer,
            flow_page=bool(self._flow_pages) and _page_of(request) in self._flow_pages,
        )
        try:
            if answer.refusal is not None:
                await route.abort("blockedbyclient")
            elif answer.failed:
                await route.abort("failed")
            else:
                headers = dict(answer.headers)
                if answer.set_cookies:
                    headers["set-cookie"] = "\n".join(answer.set_cookies)
                await route.fulfill(status=answer.status, headers=headers, body=answer.body)
        except Exception as exc:  # the page or context went away meanwhile
            log.debug("route not answered", url=request.url, error=str(exc))


def tls_context(hosts: list[str], directory: Path) -> ssl.SSLContext | None:
    """A server TLS context with a throw-away self-signed certificate for ``hosts`` (``openssl`` on
    PATH makes it; None without it). Replay contexts ignore certificate errors, so the browser
    accepts it for the redirect hops the proxy answers; nothing else ever sees it."""
    openssl = shutil.which("openssl")
    if not hosts or openssl is None:
        return None
    names = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
    key, cert = directory / "replay-key.pem", directory / "replay-cert.pem"
    done = subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=browserworker-replay",
            "-addext",
            f"subjectAltName={names}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        log.warning("no certificate for HTTPS redirect hops", error=done.stderr.strip()[-300:])
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return context


def _read_head(lines: list[bytes]) -> tuple[str, str, dict[str, str]]:
    method, target, _ = (lines[0].decode("latin-1").strip().split(" ", 2) + ["", ""])[:3]
    headers = {}
    for raw in lines[1:]:
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, target, headers


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]] | None:
    lines = []
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        lines.append(raw)
    return _read_head(lines) if lines else None


class ReplayProxy:
    """A loopback HTTP proxy that answers from the router what the browser sends outside routing
    (the hops of a redirect, and ``page.request`` calls, which Playwright's driver makes itself and
    tunnels through the proxy with ``CONNECT`` even for plain HTTP: a tunnel to a host the recording
    saw only over HTTP is read as plain HTTP). HTTPS hops arrive as ``CONNECT``: with a ``tls`` context the proxy
    terminates TLS itself and answers from the recording; without one it refuses them. Traffic to
    hosts the recording never saw (the browser's own: autofill, safe browsing) is blocked."""

    def __init__(self, router: ReplayRouter, tls: ssl.SSLContext | None = None) -> None:
        self.router = router
        self.tls = tls
        self._server: asyncio.AbstractServer | None = None
        self.url = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    @staticmethod
    def _bad_gateway(writer: asyncio.StreamWriter, text: str = "") -> None:
        data = text.encode()
        writer.write(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await _read_request(reader)
            if head is None:
                return
            method, target, headers = head
            unrouted = True
            if _host_port(target) not in self.router.hosts:
                self.router.blocked.append(f"{method} {target}")
                self._bad_gateway(writer)
                return
            if method.upper() == "CONNECT" and _host_port(target) in self.router.plain_hosts:
                # Playwright's API requests (page.request) tunnel even plain HTTP through a proxy
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                head = await _read_request(reader)
                if head is None:
                    return
                method, path, headers = head
                host = target[:-3] if target.endswith(":80") else target
                target = path if path.startswith("http") else f"http://{host}{path}"
                unrouted = False  # an API request (page.request), recorded as such
            elif method.upper() == "CONNECT":
                if self.tls is None:
                    self.router._refuse(
                        f"CONNECT {target}",
                        ("CONNECT", target, ""),
                        "is an HTTPS redirect hop (outside Playwright's routing); answering it "
                        "offline needs `openssl` on PATH",
                        closest=False,
                    )
                    self._bad_gateway(writer)
                    return
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await writer.start_tls(self.tls)
                head = await _read_request(reader)
                if head is None:
                    return
                method, path, headers = head
                host = target[:-4] if target.endswith(":443") else target
                target = f"https://{host}{path}"
            length = int(headers.get("content-length") or 0)
            body = await reader.readexactly(length) if length else None
            self._respond(writer, self.router.answer(method, target, headers, body, unrouted=unrouted))
        except Exception as exc:  # pragma: no cover - a broken connection from the browser
            log.debug("proxy connection failed", error=str(exc))
        finally:
            try:
                await writer.drain()
                writer.close()
            except Exception:  # pragma: no cover
                pass

    def _respond(self, writer: asyncio.StreamWriter, answer: Answer) -> None:
        if answer.refusal is not None or answer.failed:
            self._bad_gateway(writer, answer.refusal or "failed while recording")
            return
        try:
            reason = HTTPStatus(answer.status).phrase
        except ValueError:
            reason = "Recorded"
        out = [f"HTTP/1.1 {answer.status} {reason}"]
        out += [f"{k}: {v}" for k, v in answer.headers.items()]
        out += [f"set-cookie: {c}" for c in answer.set_cookies]
        out += [f"content-length: {len(answer.body)}", "connection: close", "", ""]
        writer.write("\r\n".join(out).encode("latin-1", errors="replace") + answer.body)
