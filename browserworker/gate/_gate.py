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

Shared and service workers are blocked by the browser session (see :mod:`browserworker.runtime._browser`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from playwright.async_api import APIResponse, Page, Request, Response, Route

from .. import _faults as faults
from ..errors import LeaseLost, StoreError
from ..flow import ChannelRequest, Effect, Extensions
from ..journal import RunJournal
from ..logs import get_logger
from ..store.records import AttemptRecord
from ._outbox import DETECTED, LATE, PAGE_LEFT, POPUP, GateOutbox
from ._routes import SOCKET, ApiSend, ContextRoute, safe_url

if TYPE_CHECKING:
    from ._approval import ApprovalCheck

__all__ = ["API", "NOT_APPROVED", "WEBSOCKET", "Detector", "DispatchGate", "api_call", "approved", "socket_message"]

log = get_logger("browserworker.gate")

SETTLE_WAIT = 60.0
"""Seconds :meth:`DispatchGate.remove` waits for the dispatches it claimed to be decided
(each may wait out the store's busy timeout for its commit)."""

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
HELD = "held"


class DispatchGate:
    """Gates one effect attempt's channels; see the module docstring."""

    def __init__(
        self, journal: RunJournal, effect: Effect, extensions: Extensions, *, shared_workers_allowed: bool = False
    ) -> None:
        self.journal = journal
        self.attempt: AttemptRecord | None = None  # set by arm()
        self.effect = effect
        self.epoch = journal.epoch
        self.extensions = extensions
        self.shared_workers_allowed = shared_workers_allowed
        self.released: dict[Request, int] = {}  # browser requests let go, and their outbox rows
        self._chains: dict[Request, int] = {}  # redirect legs of released requests, by their chain's row
        self.outbox = GateOutbox(journal)  # the rows this gate wrote, as committed
        self.detector = Detector(self)
        self.sent = 0  # API calls and socket messages let go
        self.blocked: list[str] = []
        self.refusal: BaseException | None = None
        self._writes: set[asyncio.Future[None]] = set()
        self.route_in: ContextRoute | None = None
        self._closed = False  # after remove(): what it claimed and still meets is aborted
        self.undecided: set[Request] = set()  # dispatches seen, not yet released or aborted
        self.deciding: set[Request] = set()  # of those, the ones in _decide now
        self._decided: set[Request] = set()
        self._api: object = None
        self._socket: object = None  # noqa: E702  (hooks on the route, see remove)
        self._settled = asyncio.Event()
        self._settled.set()
        self.approval: ApprovalCheck | None = None  # an approve= effect's check, before each dispatch commit

    def arm(self, attempt: AttemptRecord) -> None:
        """Start gating for ``attempt`` (its intent is committed). Until then an installed gate
        hands every request to the gap between steps (:class:`~browserworker.gate._guard.StepGap`)."""
        self.attempt = attempt
        self.detector.arm()
        if self.shared_workers_allowed:
            self.detector.detect(
                "SHAREDWORKER", "*", "shared workers are allowed in this browser: what they send passes no gate"
            )

    @property
    def dispatched(self) -> bool:
        """Whether anything passed the gate (so ``dispatched_at`` is committed), or may have
        left without it (detected: the outcome sets ``dispatched_at`` if its own write failed)."""
        return bool(self.released) or self.sent > 0 or bool(self.detector.detected)

    def install(self, route: ContextRoute) -> asyncio.Future[object]:
        """Take the context's route (putting it in if need be); the future is done when it is in place."""
        self.route_in = route
        context = route.context
        for event, listener in self._network_listeners():
            route.listen(event, listener)
        for event, listener in self._listeners():
            context.on(event, listener)  # type: ignore[call-overload]  # (event, listener) pairs of one list
        for page in context.pages:
            self.detector.watch(page)
        route.handler = self._route
        route.api = self._api = partial(api_call, self)
        route.socket = self._socket = partial(socket_message, self)
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
        route = self.route_in
        if route is None or self._closed:
            return
        try:
            async with asyncio.timeout(SETTLE_WAIT):
                await self._settled.wait()
        except TimeoutError:
            log.warning(
                "dispatches the gate never saw decided; they will be aborted if they turn up",
                step_id=self.effect.id,
                requests=[f"{r.method} {r.url}" for r in self.undecided],
            )
        self._closed = True
        route.hand_back(self._route, self._api, self._socket)
        await self.flush()
        if self.detector.unjournaled:
            await self.detector.journal_late()
        for event, listener in self._network_listeners():
            route.unlisten(event, listener)
        for event, listener in self._listeners():
            route.context.remove_listener(event, listener)
        self.detector.detach()

    def _network_listeners(self) -> list[tuple[str, Callable[..., None]]]:
        """The context's request events, heard through the route (see :meth:`ContextRoute.listen`)."""
        return [
            ("request", self._on_request),
            ("requestfinished", self._on_finished),
            ("requestfailed", self._on_failed),
            ("response", self._on_response),
        ]

    def _listeners(self) -> list[tuple[str, Callable[..., None]]]:
        return [("close", self._on_close), ("page", self.detector.on_page)]

    async def flush(self) -> None:
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    def track(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(work)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        return task

    def holds(self) -> bool:
        """The lease holds with half the dispatch margin left: a release may still go out."""
        return self.journal.holds(self.journal.settings.margin / 2)

    @property
    def armed(self) -> bool:
        return self.attempt is not None and not self._closed

    # -- browser requests ---------------------------------------------------------------

    async def _route(self, route: Route, request: Request) -> None:
        if self._closed:  # claimed while armed, met only now: the attempt is already decided
            await self._abort(route, request, RuntimeError("the effect had ended before its dispatch reached the gate"))
            return
        if self.attempt is None:  # not armed yet: the gap before this effect still watches
            assert self.route_in is not None
            await self.route_in.unheld(route, request)
            return
        if not self.effect.is_dispatch(request.method, request.url, request):
            if not await self.detector.may_navigate(request):
                await self._abort(route, request, self.refusal or LeaseLost("the run's lease is lost"))
                return
            await route.fallback()
            return
        self.undecided.add(request)
        self.deciding.add(request)
        self._settled.clear()
        try:
            await self._decide(route, request)
        finally:
            self.deciding.discard(request)
            self.settle(request)

    def _on_request(self, request: Request) -> None:
        """Claim a dispatch the browser reports while armed: this gate decides it. A redirect
        leg of a released dispatch is that dispatch's chain (Chromium follows it without asking
        any route)."""
        if not self.armed or request in self._decided:
            return
        first = _chain_root(request)
        if first is not request:
            row = self.released.get(first, self._chains.get(first))
            if row is not None:
                self._chains[request] = row
                return
            if self.effect.is_dispatch(request.method, request.url, request):  # left on a redirect, ungated
                self.detector.detect(request.method, request.url, f"a redirect of {first.method} {first.url} sent it")
            return
        if not self.effect.is_dispatch(request.method, request.url, request):
            return
        self.undecided.add(request)
        self._settled.clear()
        assert self.route_in is not None
        self.route_in.claimed[request] = self._route

    def settle(self, request: Request) -> None:
        """``request`` is decided (released, aborted, or ended without the gate)."""
        self._decided.add(request)
        self.undecided.discard(request)
        if self.route_in is not None:
            self.route_in.claimed.pop(request, None)
        if not self.undecided:
            self._settled.set()

    def _on_finished(self, request: Request, failure: str | None = None) -> None:
        if request in self.undecided and request not in self.deciding:  # ended without reaching the gate
            self.deciding.add(request)
            self.track(self.detector.unrouted(request, failure))

    def _on_failed(self, request: Request) -> None:
        self._on_finished(request, request.failure or "failed")
        outbox_id = self.released.get(request)
        if outbox_id is not None:
            self.track(self.outbox.failed(outbox_id, request.failure or "failed"))

    def _on_close(self, _: object) -> None:
        """Nothing more leaves a closed context."""
        for request in list(self.undecided):
            self.settle(request)

    async def _decide(self, route: Route, request: Request) -> None:
        assert self.attempt is not None
        if self.refusal is not None or not self.journal.alive:
            await self._abort(route, request, self.refusal or LeaseLost("the run's lease is lost"))
            return
        faults.hit("dispatch_held", self.effect.id)  # the request waits in the browser until we answer
        faults.hit("lease_expired_while_alive", self.effect.id)  # chaos pauses here past the lease
        if not await approved(self, request.method, request.url, _post_data(request), request.headers):
            return await self._abort(route, request, self.refusal or NOT_APPROVED)
        outbox_id = await self.commit(request.method, request.url, HELD)
        if outbox_id is None:
            await self._abort(route, request, self.refusal or LeaseLost("the run's lease is lost"))
            return
        self.released[request] = outbox_id
        faults.hit("after_dispatch_commit", self.effect.id)
        if not self.holds():
            # paused (GC, SIGSTOP) between the commit and here past the lease: do not send. The
            # journal says dispatched, so recovery verifies before any replay: safe either way.
            self.refusal = LeaseLost("the lease ran out between the dispatch commit and the release")
            del self.released[request]
            await self._abort(route, request, self.refusal)
            return
        self.extensions.later.dispatched(self.attempt, request.method, request.url)
        await route.fallback()  # to the network, or to a replay router registered before the gate
        faults.hit("after_dispatch", self.effect.id)

    async def commit(self, method: str, url: str, channel: str) -> int | None:
        """The fenced dispatch commit; None (and ``refusal`` set) if it failed: nothing may leave."""
        a = self.attempt
        assert a is not None
        try:
            outbox_id = await self.journal.dispatch(a, method, url, channel=channel)
        except (LeaseLost, StoreError) as exc:
            self.refusal = exc
            return None
        self.outbox.keep(a, outbox_id, method, url, channel)
        return outbox_id

    async def _abort(self, route: Route, request: Request, why: BaseException) -> None:
        self.refused(request.method, request.url, why)
        try:
            await route.abort("blockedbyclient")
        except Exception:  # pragma: no cover - context closing
            pass

    def refused(self, method: str, url: str, why: BaseException) -> None:
        self.blocked.append(f"{method} {url}")
        a = self.attempt
        assert a is not None  # only an armed gate refuses
        log.warning(
            "dispatch refused by the gate",
            run_id=a.run_id,
            step_id=self.effect.id,
            attempt_no=a.attempt_no,
            request_key=a.request_key,
            fingerprint=a.request_fingerprint,
            state=str(a.state),
            worker_id=a.worker,
            lease_epoch=self.epoch,
            method=method,
            url=url,
            reason=str(why),
        )

    def _on_response(self, response: Response) -> None:
        request = response.request
        outbox_id = self.released.get(request)
        if outbox_id is None:
            chain = self._chains.get(request)
            if chain is not None and response.status not in _REDIRECTS:
                self.track(self.outbox.final(chain, response.status, response.url))
            return
        faults.hit("reply_lost", self.effect.id)  # the target has answered; nothing of it is journaled yet
        self.track(self._record_response(outbox_id, response))

    async def _record_response(self, outbox_id: int, response: Response) -> None:
        await self.outbox.answered(outbox_id, response.status, response.url, response.headers)
        assert self.attempt is not None  # only an armed gate releases requests
        self.extensions.later.response(self.attempt, response.status, response.url)
        faults.hit("after_response", self.effect.id)


def _post_data(request: Request) -> str | None:
    try:
        return request.post_data
    except Exception:  # a binary body: its fingerprint is of the method and URL, it is shown as absent
        return None


def _chain_root(request: Request) -> Request:
    while request.redirected_from is not None:
        request = request.redirected_from
    return request


# -- the channels a route never sees ----------------------------------------
#
# The dispatch gate on the two channels a route never sees: ``page.request`` / ``context.request``
# calls and the WebSocket messages a page sends. Each is journaled like a held request (the
# fenced dispatch commit) before it goes on; if that commit fails it never leaves. Before that
# commit, every channel asks :func:`approved` (an ``approve=`` effect's person, see
# :mod:`browserworker.gate._approval`).

API, WEBSOCKET = "api", "websocket"
NOT_APPROVED = RuntimeError("the request waits for approval: not sent")  # why the gate refused it


async def api_call(gate: DispatchGate, method: str, url: str, send: ApiSend) -> APIResponse:
    """A ``page.request`` call: journaled like a held request before it is sent."""
    if not gate.armed or not gate.effect.is_dispatch(method, url):
        return await send()
    if gate.refusal is not None or not gate.journal.alive:
        why = gate.refusal or LeaseLost("the run's lease is lost")
        gate.refused(method, url, why)
        raise why
    faults.hit("dispatch_held", gate.effect.id)
    faults.hit("lease_expired_while_alive", gate.effect.id)
    if not await approved(gate, method, url, None, {}):
        why = gate.refusal or RuntimeError(str(NOT_APPROVED))  # raised into the effect: its own instance
        gate.refused(method, url, why)
        raise why
    outbox_id = await gate.commit(method, url, API)
    if outbox_id is not None:
        faults.hit("after_dispatch_commit", gate.effect.id)
    if outbox_id is None or not gate.holds():
        why = gate.refusal or LeaseLost("the lease ran out between the dispatch commit and the send")
        gate.refusal = why
        gate.refused(method, url, why)
        raise why
    gate.sent += 1
    assert gate.attempt is not None
    gate.extensions.later.dispatched(gate.attempt, method, url)
    try:
        response = await send()
    except Exception as exc:
        await gate.outbox.failed(outbox_id, f"{type(exc).__name__}: {exc}")
        raise
    faults.hit("reply_lost", gate.effect.id)  # the target has answered; nothing of it is journaled yet
    await gate.outbox.answered(outbox_id, response.status, response.url, response.headers)
    faults.hit("after_response", gate.effect.id)
    gate.extensions.later.response(gate.attempt, response.status, response.url)
    return response


async def socket_message(gate: DispatchGate, url: str, message: str | bytes, forward: Callable[[], None]) -> None:
    """A WebSocket message the page sends: journaled like a held request before it goes on."""
    if not gate.armed or not gate.effect.is_dispatch(SOCKET, url, ChannelRequest(SOCKET, url, message)):
        forward()
        return
    if gate.refusal is not None or not gate.journal.alive:
        gate.refused(SOCKET, url, gate.refusal or LeaseLost("the run's lease is lost"))
        return
    faults.hit("dispatch_held", gate.effect.id)
    faults.hit("lease_expired_while_alive", gate.effect.id)
    if not await approved(gate, SOCKET, url, message if isinstance(message, str) else None, {}):
        gate.refused(SOCKET, url, gate.refusal or NOT_APPROVED)  # dropped: the page's socket stays open
        return
    outbox_id = await gate.commit(SOCKET, url, WEBSOCKET)
    if outbox_id is not None:
        faults.hit("after_dispatch_commit", gate.effect.id)
    if outbox_id is None or not gate.holds():
        gate.refusal = gate.refusal or LeaseLost("the lease ran out between the dispatch commit and the send")
        gate.refused(SOCKET, url, gate.refusal)
        return
    gate.sent += 1
    assert gate.attempt is not None
    gate.extensions.later.dispatched(gate.attempt, SOCKET, url)
    forward()
    faults.hit("after_dispatch", gate.effect.id)  # handed to the socket: it may or may not reach the site


async def approved(gate: DispatchGate, method: str, url: str, body: str | None, headers: dict[str, str]) -> bool:
    """An approve= effect's request may go on: approved with this fingerprint (True), or held
    for a person and then refused (False: parked, rejected or expired; nothing leaves)."""
    if gate.approval is None:
        return True
    try:
        return await gate.approval.allow(method, url, body, headers)
    except (LeaseLost, StoreError) as exc:
        gate.refusal = exc
        return False


# -- what may leave without asking ------------------------------------------
#
# What may leave without asking the dispatch gate: journaled as possibly dispatched when seen.
#
# Chromium lets some traffic out without asking any route: a page's ``pagehide`` beacons as
# it closes or navigates away, what a popup sends before Playwright routes it, a request
# that finishes without reaching the route. The :class:`Detector` of an effect's gate
# journals each as possibly dispatched at once (outbox ``channel="detected"``), so recovery
# reconciles the attempt (verifier, idempotent replay or review) instead of replaying it;
# and it holds a navigation until what it opens the door to is journaled.

_POPUP = "a page opened while the effect ran (what it sends before it is routed, or as it closes, passes no gate)"


class Detector:
    """The detecting half of one :class:`~browserworker.gate._gate.DispatchGate`."""

    def __init__(self, gate: DispatchGate) -> None:
        self.gate = gate
        self.detected: list[str] = []  # what may have left without passing the gate
        self.unjournaled: list[str] = []  # ... of which the journal write failed
        self.pages: set[Page] = set()  # watched for closing
        self.own_pages: set[Page] = set()  # the pages there were when the gate was armed
        self.popup_write: asyncio.Future[None] | None = None  # journaling the first page opened since

    # -- journaling ----------------------------------------------------------------------

    def detect(self, method: str, url: str, why: str) -> asyncio.Future[None] | None:
        """Something may have left without passing the gate: journal the attempt as possibly
        dispatched at once (in the background; the outcome waits for it). Returns the write."""
        gate = self.gate
        if not gate.armed:
            return None
        self.detected.append(f"{method} {url}: {why}")
        a = gate.attempt
        assert a is not None
        log.warning(
            "possible dispatch the gate did not hold; the attempt counts as dispatched",
            run_id=a.run_id,
            step_id=gate.effect.id,
            attempt_no=a.attempt_no,
            request_key=a.request_key,
            method=method,
            url=url,
            reason=why,
        )
        return gate.track(self._journal(method, url, why))

    async def _journal(self, method: str, url: str, why: str) -> None:
        gate = self.gate
        a = gate.attempt
        assert a is not None
        try:
            outbox_id = await gate.journal.dispatch(a, method, url, channel=DETECTED, margin=0.0)
        except (LeaseLost, StoreError) as exc:
            # the outcome's commit sets dispatched_at instead (the attempt never ends as "nothing left")
            self.unjournaled.append(f"{method} {url}: {exc}")
            log.error(
                "a possible dispatch could not be journaled",
                run_id=a.run_id,
                step_id=gate.effect.id,
                method=method,
                url=url,
                reason=why,
                error=str(exc),
            )
            return
        gate.outbox.keep(a, outbox_id, method, url, DETECTED)

    async def journal_late(self) -> None:
        """Possible dispatches whose journal write failed (the store was locked or down): try
        again, backing off, while the lease holds, so that the attempt is never left looking as
        if nothing had left. The outcome's own commit sets ``dispatched_at`` too."""
        gate = self.gate
        a = gate.attempt
        assert a is not None
        pause = 0.05
        while self.unjournaled and gate.holds():
            try:
                outbox_id = await gate.journal.dispatch(
                    a,
                    LATE,
                    f"{len(self.unjournaled)} possible dispatch(es) journaled late",
                    channel=DETECTED,
                    margin=0.0,
                )
            except StoreError:
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            except LeaseLost:
                return
            gate.outbox.keep(a, outbox_id, LATE, "", DETECTED)
            self.unjournaled = [f"{item} (journaled late)" for item in self.unjournaled]
            return

    async def journal_now(self, request: Request, why: str) -> bool:
        """Journal a possible dispatch before letting ``request`` go; False if that failed."""
        self.detected.append(f"{request.method} {request.url}: {why}")
        outbox_id = await self.gate.commit(PAGE_LEFT, departing_url(request), DETECTED)
        return outbox_id is not None

    async def unrouted(self, request: Request, failure: str | None) -> None:
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
            self.detect(
                request.method,
                request.url,
                "the browser sent it without asking the gate" + (f" ({failure})" if failure else ""),
            )
        self.gate.deciding.discard(request)
        self.gate.settle(request)

    # -- pages ---------------------------------------------------------------------------

    def arm(self) -> None:
        route = self.gate.route_in
        if route is not None:
            self.own_pages = set(route.context.pages)

    def watch(self, page: Page) -> None:
        if page not in self.pages:
            self.pages.add(page)
            page.on("close", self.on_page_close)

    def on_page(self, page: Page) -> None:
        self.watch(page)
        if page not in self.own_pages:
            self.popup(safe_url(page) or "about:blank")

    def popup(self, url: str) -> asyncio.Future[None] | None:
        """A page opened while the effect ran: journaled as a possible dispatch (what it sends
        before Playwright routes it, or as it closes, passes no gate). One row is enough: every
        later popup awaits the same write. Returns it (None when not armed)."""
        if self.popup_write is None and self.gate.armed:
            self.popup_write = self.detect(POPUP, url, _POPUP)
        return self.popup_write

    def on_page_close(self, page: Page) -> None:
        gate = self.gate
        if not gate.armed:
            return
        self.detect(
            PAGE_LEFT,
            safe_url(page) or "",
            "a page closed while the effect ran (what it sends as it closes passes no gate)",
        )
        for request in list(gate.undecided):
            if request not in gate.deciding and page_of(request) is page:
                self.detect(request.method, request.url, "its page closed before the gate decided it")
                gate.settle(request)

    def detach(self) -> None:
        for page in self.pages:
            page.remove_listener("close", self.on_page_close)
        self.pages.clear()

    async def may_navigate(self, request: Request) -> bool:
        """Hold a navigation until what it opens the door to is journaled: a popup's first
        document (its script could send and close before it is routed) and a document leaving
        (it may send on pagehide without asking any route). False: that write failed."""
        gate = self.gate
        if gate.dispatched and self.popup_write is None:
            return True  # the attempt counts as dispatched already
        try:
            navigation = request.is_navigation_request()
        except Exception:  # a request with no frame (a worker's)
            return True
        if not navigation:
            return True
        faults.hit("dispatch_held", gate.effect.id)  # the navigation waits in the browser until we answer
        page = page_of(request)  # None: the frame does not exist yet, a new page's first document
        if page is None or page not in self.own_pages:  # a popup's
            write = self.popup(request.url)
            if write is not None:
                await asyncio.shield(write)
            return not self.unjournaled
        if gate.dispatched or departing_url(request) in ("", "about:blank"):
            return True
        return await self.journal_now(
            request,
            "the page navigated away while the effect ran (its departing "
            "document may send on pagehide without asking any route)",
        )


def departing_url(request: Request) -> str:
    try:
        return request.frame.url
    except Exception:
        return ""


def page_of(request: Request) -> Page | None:
    try:
        return request.frame.page
    except Exception:
        return None
