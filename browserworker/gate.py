"""The dispatch gate: the journal proves what left the machine.

While an effect runs, every channel of its browser context passes the gate (see
``docs/channels.md`` for the table):

- **held**: a browser request that counts as a dispatch, a ``page.request`` call, a WebSocket
  message the page sends. Each waits until the store has committed ``dispatched_at`` (fenced
  by the lease epoch and the dispatch margin) and an outbox row for it; only then does it go
  on. If that commit fails it never leaves (aborted, raised, dropped). The response to a
  released request is written to the outbox in its own commit; a redirect chain's last
  answer beside its first.
- **detected**: what Chromium lets out without asking any route. The gate journals it as
  possibly dispatched as soon as it is seen, so recovery reconciles the attempt (verifier,
  idempotent replay or review) instead of replaying it: a dispatch the browser reported that
  never reached the route (and was not answered by a page route), a page closed while the
  effect ran, a popup opened while it ran. A page that navigates away while the effect runs
  (its departing document may send on ``pagehide`` without asking any route) is journaled
  before its navigation request is let go, so that one is held too.

Shared and service workers are blocked by the browser session (see :mod:`browserworker.browser`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

import structlog
from playwright.async_api import APIResponse, Page, Request, Response, Route

from . import faults
from .errors import LeaseLost, StoreError
from .flow import Effect
from .extensions import Extensions
from .journal import RunJournal
from .routes import SOCKET, ApiSend, ContextRoute
from .store.records import AttemptRecord, OutboxRecord

__all__ = ["DispatchGate"]

log = structlog.get_logger("browserworker.gate")

SETTLE_WAIT = 60.0
"""Seconds :meth:`DispatchGate.remove` waits for the dispatches it claimed to be decided
(each may wait out the store's busy timeout for its commit)."""

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_POPUP = "a page opened while the effect ran (what it sends before it is routed, or as it closes, passes no gate)"
HELD, API, DETECTED = "held", "api", "detected"
WEBSOCKET = "websocket"


class DispatchGate:
    """Gates one effect attempt's channels; see the module docstring."""

    def __init__(self, journal: RunJournal, effect: Effect, extensions: Extensions, *,
                 shared_workers_allowed: bool = False) -> None:
        self.journal = journal
        self.attempt: AttemptRecord | None = None  # set by arm()
        self.effect = effect
        self.epoch = journal.epoch
        self.extensions = extensions
        self.shared_workers_allowed = shared_workers_allowed
        self.released: dict[Request, int] = {}  # browser requests let go, and their outbox rows
        self._chains: dict[Request, int] = {}  # redirect legs of released requests, by their chain's row
        self._outbox: dict[int, OutboxRecord] = {}  # the rows this gate wrote, as committed
        self.sent = 0  # API calls and socket messages let go
        self.blocked: list[str] = []
        self.detected: list[str] = []  # what may have left without passing the gate
        self.unjournaled: list[str] = []  # ... of which the journal write failed
        self.refusal: BaseException | None = None
        self._writes: set[asyncio.Future[None]] = set()
        self._route_in: ContextRoute | None = None
        self._closed = False  # after remove(): what it claimed and still meets is aborted
        self._undecided: set[Request] = set()  # dispatches seen, not yet released or aborted
        self._deciding: set[Request] = set()  # of those, the ones in _decide now
        self._decided: set[Request] = set()
        self._pages: set[Page] = set()  # watched for closing
        self._own_pages: set[Page] = set()  # the pages there were when the gate was armed
        self._popup_write: asyncio.Future[None] | None = None  # journaling the first page opened since
        self._settled = asyncio.Event()
        self._settled.set()

    def arm(self, attempt: AttemptRecord) -> None:
        """Start gating for ``attempt`` (its intent is committed). Until then an installed gate
        lets every request through untouched: nothing of the effect has run yet."""
        self.attempt = attempt
        if self._route_in is not None:
            self._own_pages = set(self._route_in.context.pages)
        if self.shared_workers_allowed:
            self._detect("SHAREDWORKER", "*", "shared workers are allowed in this browser: what they send passes "
                                              "no gate")

    @property
    def outbox(self) -> list[OutboxRecord]:
        """This attempt's outbox rows as this gate committed them (it is the only writer of a
        new attempt's outbox), so the outcome is decided without reading them back."""
        return [self._outbox[key] for key in sorted(self._outbox)]

    @property
    def dispatched(self) -> bool:
        """Whether anything passed the gate (so ``dispatched_at`` is committed), or may have
        left without it (detected: the outcome sets ``dispatched_at`` if its own write failed)."""
        return bool(self.released) or self.sent > 0 or bool(self.detected)

    @property
    def dispatches(self) -> list[OutboxRecord]:
        """The requests and messages the gate let go (not the detected ones)."""
        return [row for row in self.outbox if row.channel != DETECTED]

    def install(self, route: ContextRoute) -> asyncio.Future[object]:
        """Take the context's route (putting it in if need be); the future is done when it is in place."""
        self._route_in = route
        context = route.context
        context.on("request", self._on_request)
        context.on("requestfinished", self._on_finished)
        context.on("requestfailed", self._on_failed)
        context.on("response", self._on_response)
        context.on("close", self._on_close)
        context.on("page", self._on_page)
        for page in context.pages:
            self._watch(page)
        route.handler = self._route
        route.api = self._api
        route.socket = self._socket
        return route.install()

    async def remove(self) -> None:
        """Stop gating, once every dispatch the browser has reported so far is decided.

        A dispatch the browser reported while the gate was armed is this gate's to decide,
        even if its route event reaches Python after the effect function has returned or
        raised (the page did not wait for it): ``remove`` waits until each is journaled and
        released, or aborted, or finished without the gate (then it is detected, unless a page
        route answered it), so the attempt's outcome is written knowing what left. Then it
        hands the route back and waits for the outbox writes. A claimed dispatch that still
        turns up later (after :data:`SETTLE_WAIT`, or a closed context) is aborted: the attempt
        is decided.
        """
        route = self._route_in
        if route is None or self._closed:
            return
        try:
            await asyncio.wait_for(self._settled.wait(), timeout=SETTLE_WAIT)
        except asyncio.TimeoutError:
            log.warning("dispatches the gate never saw decided; they will be aborted if they turn up",
                        step_id=self.effect.id, requests=[f"{r.method} {r.url}" for r in self._undecided])
        self._closed = True
        if route.handler == self._route:
            route.handler = None
        if route.api == self._api:
            route.api = None
        if route.socket == self._socket:
            route.socket = None
        await self.flush()
        if self.unjournaled:
            await self._journal_late()
        context = route.context
        context.remove_listener("request", self._on_request)
        context.remove_listener("requestfinished", self._on_finished)
        context.remove_listener("requestfailed", self._on_failed)
        context.remove_listener("response", self._on_response)
        context.remove_listener("close", self._on_close)
        context.remove_listener("page", self._on_page)
        for page in self._pages:
            page.remove_listener("close", self._on_page_close)
        self._pages.clear()

    async def flush(self) -> None:
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    def _track(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(work)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        return task

    def _holds(self) -> bool:
        """The lease holds with half the dispatch margin left: a release may still go out."""
        return self.journal.holds(self.journal.settings.margin / 2)

    @property
    def _armed(self) -> bool:
        return self.attempt is not None and not self._closed

    # -- browser requests ---------------------------------------------------------------

    async def _route(self, route: Route, request: Request) -> None:
        if self._closed:  # claimed while armed, met only now: the attempt is already decided
            await self._abort(route, request, RuntimeError("the effect had ended before its dispatch reached the gate"))
            return
        if self.attempt is None:
            await route.fallback()
            return
        if not self.effect.is_dispatch(request.method, request.url, request):
            if not await self._may_navigate(request):
                await self._abort(route, request, self.refusal or LeaseLost("the run's lease is lost"))
                return
            await route.fallback()
            return
        self._undecided.add(request)
        self._deciding.add(request)
        self._settled.clear()
        try:
            await self._decide(route, request)
        finally:
            self._deciding.discard(request)
            self._settle(request)

    def _on_request(self, request: Request) -> None:
        """Claim a dispatch the browser reports while armed: this gate decides it. A redirect
        leg of a released dispatch is that dispatch's chain (Chromium follows it without asking
        any route)."""
        if not self._armed or request in self._decided:
            return
        first = _chain_root(request)
        if first is not request:
            row = self.released.get(first)
            if row is None:
                row = self._chains.get(first)
            if row is not None:
                self._chains[request] = row
                return
            if self.effect.is_dispatch(request.method, request.url, request):  # left on a redirect, ungated
                self._detect(request.method, request.url, f"a redirect of {first.method} {first.url} sent it")
            return
        if not self.effect.is_dispatch(request.method, request.url, request):
            return
        self._undecided.add(request)
        self._settled.clear()
        assert self._route_in is not None
        self._route_in.claimed[request] = self._route

    def _settle(self, request: Request) -> None:
        self._decided.add(request)
        self._undecided.discard(request)
        if self._route_in is not None:
            self._route_in.claimed.pop(request, None)
        if not self._undecided:
            self._settled.set()

    def _on_finished(self, request: Request) -> None:
        if request in self._undecided and request not in self._deciding:  # done without reaching the gate
            self._deciding.add(request)
            self._track(self._unrouted(request, None))

    def _on_failed(self, request: Request) -> None:
        if request in self._undecided and request not in self._deciding:  # ended before it reached the gate
            self._deciding.add(request)
            self._track(self._unrouted(request, request.failure or "failed"))
        outbox_id = self.released.get(request)
        if outbox_id is None:
            return
        self._track(self._record_failure(outbox_id, request.failure or "failed"))

    async def _unrouted(self, request: Request, failure: str | None) -> None:
        """A claimed dispatch ended without reaching the gate: answered by a page route (nothing
        left), aborted by one (nothing left), or let out by Chromium or the driver (detected)."""
        try:
            if failure is not None:
                left = "ERR_BLOCKED_BY_CLIENT" not in failure
            else:
                response = await request.response()
                left = response is None or await response.server_addr() is not None
        except Exception:  # the page or context is gone: it may have left
            left = True
        if left:
            self._detect(request.method, request.url, "the browser sent it without asking the gate"
                         + (f" ({failure})" if failure else ""))
        self._deciding.discard(request)
        self._settle(request)

    def _on_close(self, _: object) -> None:
        """Nothing more leaves a closed context."""
        for request in list(self._undecided):
            self._settle(request)

    def _watch(self, page: Page) -> None:
        if page not in self._pages:
            self._pages.add(page)
            page.on("close", self._on_page_close)

    def _on_page(self, page: Page) -> None:
        self._watch(page)
        if page not in self._own_pages:
            self._popup(_safe_url(page) or "about:blank")

    def _popup(self, url: str) -> asyncio.Future[None] | None:
        """A page opened while the effect ran: journaled as a possible dispatch (what it sends
        before Playwright routes it, or as it closes, passes no gate). One row is enough: every
        later popup awaits the same write. Returns it (None when not armed)."""
        if self._popup_write is None and self._armed:
            self._popup_write = self._detect("POPUP", url, _POPUP)
        return self._popup_write

    async def _may_navigate(self, request: Request) -> bool:
        """Hold a navigation until what it opens the door to is journaled: a popup's first
        document (its script could send and close before it is routed) and a document leaving
        (it may send on pagehide without asking any route). False: that write failed."""
        if self.dispatched and self._popup_write is None:
            return True  # the attempt counts as dispatched already
        try:
            navigation = request.is_navigation_request()
        except Exception:  # a request with no frame (a worker's)
            return True
        if not navigation:
            return True
        faults.hit("dispatch_held", self.effect.id)  # the navigation waits in the browser until we answer
        page = _page_of(request)  # None: the frame does not exist yet, a new page's first document
        if page is None or page not in self._own_pages:  # a popup's
            write = self._popup(request.url)
            if write is not None:
                await asyncio.shield(write)
            return not self.unjournaled
        if self.dispatched or _departing_url(request) in ("", "about:blank"):
            return True
        return await self._journal_now(request, "the page navigated away while the effect ran (its departing "
                                                "document may send on pagehide without asking any route)")

    def _on_page_close(self, page: Page) -> None:
        if not self._armed:
            return
        self._detect("PAGEHIDE", _safe_url(page), "a page closed while the effect ran (what it sends as it closes "
                                                  "passes no gate)")
        for request in list(self._undecided):
            if request not in self._deciding and _page_of(request) is page:
                self._detect(request.method, request.url, "its page closed before the gate decided it")
                self._settle(request)

    async def _decide(self, route: Route, request: Request) -> None:
        assert self.attempt is not None
        if self.refusal is not None or not self.journal.alive:
            await self._abort(route, request, self.refusal or LeaseLost("the run's lease is lost"))
            return
        faults.hit("dispatch_held", self.effect.id)  # the request waits in the browser until we answer
        faults.hit("lease_expired_while_alive", self.effect.id)  # chaos pauses here past the lease
        outbox_id = await self._commit(request.method, request.url, HELD)
        if outbox_id is None:
            await self._abort(route, request, self.refusal or LeaseLost("the run's lease is lost"))
            return
        self.released[request] = outbox_id
        faults.hit("after_dispatch_commit", self.effect.id)
        if not self._holds():
            # paused (GC, SIGSTOP) between the commit and here past the lease: do not send. The
            # journal says dispatched, so recovery verifies before any replay: safe either way.
            self.refusal = LeaseLost("the lease ran out between the dispatch commit and the release")
            del self.released[request]
            await self._abort(route, request, self.refusal)
            return
        self.extensions.notify("dispatched", self.attempt, request.method, request.url)
        await route.fallback()  # to the network, or to a replay router registered before the gate
        faults.hit("after_dispatch", self.effect.id)

    def _keep(self, outbox_id: int, method: str, url: str, channel: str) -> None:
        """Keep the outbox row just committed, as the store has it."""
        a = self.attempt
        assert a is not None
        self._outbox[outbox_id] = OutboxRecord(
            id=outbox_id, attempt_id=a.id, run_id=a.run_id, step_id=a.step_id, method=method, url=url,
            released_at=time.time(), status=None, response_url=None, headers=None, response_at=None, failure=None,
            failed_at=None, channel=channel)

    async def _commit(self, method: str, url: str, channel: str) -> int | None:
        """The fenced dispatch commit; None (and ``refusal`` set) if it failed: nothing may leave."""
        a = self.attempt
        assert a is not None
        try:
            outbox_id = await self.journal.dispatch(a, method, url, channel=channel)
        except (LeaseLost, StoreError) as exc:
            self.refusal = exc
            return None
        self._keep(outbox_id, method, url, channel)
        return outbox_id

    async def _abort(self, route: Route, request: Request, why: BaseException) -> None:
        self._refused(request.method, request.url, why)
        try:
            await route.abort("blockedbyclient")
        except Exception:  # pragma: no cover - context closing
            pass

    def _refused(self, method: str, url: str, why: BaseException) -> None:
        self.blocked.append(f"{method} {url}")
        a = self.attempt
        assert a is not None  # only an armed gate refuses
        log.warning("dispatch refused by the gate", run_id=a.run_id, step_id=self.effect.id, attempt_no=a.attempt_no,
                    request_key=a.request_key, fingerprint=a.request_fingerprint, state=str(a.state),
                    worker_id=a.worker, lease_epoch=self.epoch, method=method, url=url, reason=str(why))

    def _on_response(self, response: Response) -> None:
        request = response.request
        outbox_id = self.released.get(request)
        if outbox_id is None:
            chain = self._chains.get(request)
            if chain is not None and response.status not in _REDIRECTS:
                self._track(self._record_final(chain, response.status, response.url))
            return
        faults.hit("reply_lost", self.effect.id)  # the target has answered; nothing of it is journaled yet
        self._track(self._record_response(outbox_id, response))

    async def _record_response(self, outbox_id: int, response: Response) -> None:
        headers = _key_headers(response.headers)
        await self.journal.answered(outbox_id, response.status, response.url, headers)
        self._answered(outbox_id, response.status, response.url, headers)
        assert self.attempt is not None  # only an armed gate releases requests
        self.extensions.notify("response", self.attempt, response.status, response.url)
        faults.hit("after_response", self.effect.id)

    def _answered(self, outbox_id: int, status: int, url: str, headers: dict[str, str]) -> None:
        row = self._outbox[outbox_id]
        if row.response_at is None:  # as the store's update: the first answer stands
            self._outbox[outbox_id] = replace(row, status=status, response_url=url, headers=headers,
                                              response_at=time.time())

    async def _record_final(self, outbox_id: int, status: int, url: str) -> None:
        await self.journal.final(outbox_id, status, url)
        self._outbox[outbox_id] = replace(self._outbox[outbox_id], final_status=status, final_url=url)

    async def _record_failure(self, outbox_id: int, failure: str) -> None:
        await self.journal.failed(outbox_id, failure)
        row = self._outbox[outbox_id]
        if row.response_at is None and row.failure is None:
            self._outbox[outbox_id] = replace(row, failure=failure, failed_at=time.time())

    # -- detection ----------------------------------------------------------------------

    def _detect(self, method: str, url: str, why: str) -> asyncio.Future[None] | None:
        """Something may have left without passing the gate: journal the attempt as possibly
        dispatched at once (in the background; the outcome waits for it). Returns the write."""
        if not self._armed:
            return None
        self.detected.append(f"{method} {url}: {why}")
        a = self.attempt
        assert a is not None
        log.warning("possible dispatch the gate did not hold; the attempt counts as dispatched", run_id=a.run_id,
                    step_id=self.effect.id, attempt_no=a.attempt_no, request_key=a.request_key, method=method,
                    url=url, reason=why)
        return self._track(self._journal_detected(method, url, why))

    async def _journal_detected(self, method: str, url: str, why: str) -> None:
        a = self.attempt
        assert a is not None
        try:
            outbox_id = await self.journal.dispatch(a, method, url, channel=DETECTED, margin=0.0)
        except (LeaseLost, StoreError) as exc:
            # the outcome's commit sets dispatched_at instead (the attempt never ends as "nothing left")
            self.unjournaled.append(f"{method} {url}: {exc}")
            log.error("a possible dispatch could not be journaled", run_id=a.run_id, step_id=self.effect.id,
                      method=method, url=url, reason=why, error=str(exc))
            return
        self._keep(outbox_id, method, url, DETECTED)

    async def _journal_late(self) -> None:
        """Possible dispatches whose journal write failed (the store was locked or down): try
        again, backing off, while the lease holds, so that the attempt is never left looking as
        if nothing had left. The outcome's own commit sets ``dispatched_at`` too."""
        a = self.attempt
        assert a is not None
        pause = 0.05
        while self.unjournaled and self._holds():
            try:
                outbox_id = await self.journal.dispatch(a, "DETECTED", f"{len(self.unjournaled)} possible "
                                                        "dispatch(es) journaled late", channel=DETECTED, margin=0.0)
            except StoreError:
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            except LeaseLost:
                return
            self._keep(outbox_id, "DETECTED", "", DETECTED)
            self.unjournaled = [f"{item} (journaled late)" for item in self.unjournaled]
            return

    async def _journal_now(self, request: Request, why: str) -> bool:
        """Journal a possible dispatch before letting ``request`` go; False if that failed."""
        self.detected.append(f"{request.method} {request.url}: {why}")
        outbox_id = await self._commit("PAGEHIDE", _departing_url(request), DETECTED)
        return outbox_id is not None

    # -- the API request context and sockets -------------------------------------------

    async def _api(self, method: str, url: str, send: ApiSend) -> APIResponse:
        """A ``page.request`` call: journaled like a held request before it is sent."""
        if not self._armed or not self.effect.is_dispatch(method, url):
            return await send()
        if self.refusal is not None or not self.journal.alive:
            why = self.refusal or LeaseLost("the run's lease is lost")
            self._refused(method, url, why)
            raise why
        faults.hit("dispatch_held", self.effect.id)
        outbox_id = await self._commit(method, url, API)
        if outbox_id is None or not self._holds():
            why = self.refusal or LeaseLost("the lease ran out between the dispatch commit and the send")
            self.refusal = why
            self._refused(method, url, why)
            raise why
        self.sent += 1
        assert self.attempt is not None
        self.extensions.notify("dispatched", self.attempt, method, url)
        try:
            response = await send()
        except Exception as exc:
            await self._record_failure(outbox_id, f"{type(exc).__name__}: {exc}")
            raise
        headers = _key_headers(response.headers)
        await self.journal.answered(outbox_id, response.status, response.url, headers)
        self._answered(outbox_id, response.status, response.url, headers)
        self.extensions.notify("response", self.attempt, response.status, response.url)
        return response

    async def _socket(self, url: str, message: str | bytes, forward: Callable[[], None]) -> None:
        """A WebSocket message the page sends: journaled like a held request before it goes on."""
        if not self._armed or not self.effect.is_dispatch(SOCKET, url):
            forward()
            return
        if self.refusal is not None or not self.journal.alive:
            self._refused(SOCKET, url, self.refusal or LeaseLost("the run's lease is lost"))
            return
        faults.hit("dispatch_held", self.effect.id)
        outbox_id = await self._commit(SOCKET, url, WEBSOCKET)
        if outbox_id is None or not self._holds():
            self.refusal = self.refusal or LeaseLost("the lease ran out between the dispatch commit and the send")
            self._refused(SOCKET, url, self.refusal)
            return
        self.sent += 1
        assert self.attempt is not None
        self.extensions.notify("dispatched", self.attempt, SOCKET, url)
        forward()


def _chain_root(request: Request) -> Request:
    while request.redirected_from is not None:
        request = request.redirected_from
    return request


def _departing_url(request: Request) -> str:
    try:
        return request.frame.url
    except Exception:
        return ""


def _page_of(request: Request) -> Page | None:
    try:
        return request.frame.page
    except Exception:
        return None


def _safe_url(page: Page) -> str:
    try:
        return page.url
    except Exception:  # pragma: no cover
        return ""


_KEY_HEADERS = ("location", "content-type", "content-length", "date", "etag", "x-request-id", "idempotency-key",
                "retry-after")


def _key_headers(headers: dict[str, str]) -> dict[str, str]:
    """The response headers worth keeping as evidence (never cookies or auth).

    ``response.headers`` needs no round trip to the browser (``all_headers()`` does); it
    leaves out only security-related headers such as Set-Cookie, which are never kept.
    """
    return {k: v for k, v in headers.items() if k.lower() in _KEY_HEADERS}
