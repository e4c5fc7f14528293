"""The dispatch gate: the journal proves what left the machine.

While an effect runs, every request of its browser context is routed through the gate.
A request that counts as a dispatch is held until the store has committed
``dispatched_at`` (fenced by the lease epoch and the dispatch margin) and an outbox row
for it; only then is it released. If that commit fails the request is aborted: it never
left. The response to a released request is written to the outbox in its own commit.

The gate's route is a :class:`ContextRoute`: put in once per context and never taken off,
because taking a route off makes Playwright's driver let go of whatever that route holds.

:class:`ActionGuard` watches action steps for undeclared side effects (non-GET requests).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import structlog
from playwright.async_api import BrowserContext, Page, Request, Response, Route

from . import faults
from .errors import LeaseLost, StoreError
from .flow import Action, Effect, is_dispatch
from .hooks import ExecutorHooks
from .store.aio import AsyncStore
from .store.records import AttemptRecord, OutboxRecord

__all__ = ["ActionGuard", "ContextRoute", "DispatchGate"]

log = structlog.get_logger("browserworker.gate")

RouteHandler = Callable[[Route, Request], Awaitable[None]]

SHUT_TIMEOUT = 5.0
"""Seconds :meth:`ContextRoute.shut` gives each page's renderer to be seen stopped."""

SETTLE_WAIT = 60.0
"""Seconds :meth:`DispatchGate.remove` waits for the dispatches it claimed to be decided
(each may wait out the store's busy timeout for its commit)."""


class ContextRoute:
    """One browser context's route for the gate and the guard: put in at the first step that
    needs it, never taken off (closing the context ends it).

    Taking a route off is not safe for a gate: Playwright's driver then continues every
    request that route is holding, and continues by itself any request the browser paused
    before it heard that interception is off. A dispatch held while its commit runs would
    leave unjournaled. So the route stays, and each request is decided by the gate that
    claimed it (see :meth:`DispatchGate.remove`), else by whoever holds the route now (an
    effect's :class:`DispatchGate`, a fail-mode :class:`ActionGuard`); while nobody does,
    requests go on untouched (to a replay router registered earlier, else the network).

    Closing the context is not safe either while a request may be on its way to the route:
    Playwright's client stalls a route that reaches it once closing has begun, and its driver
    continues by itself a request the browser paused after the page's frame went away, or
    paused without a network id (as Chromium does for what a page starts while it navigates
    away). So a context whose route is in is closed only after :meth:`shut`.
    """

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.handler: RouteHandler | None = None
        self.claimed: dict[Request, RouteHandler] = {}
        self._installed: asyncio.Future[object] | None = None
        self.sealed = False  # set by shut(): every request that reaches the route is aborted

    def install(self) -> asyncio.Future[object]:
        """Put the route in, once; the future is done when the browser routes through it."""
        if self._installed is None:
            self._installed = _background(self._put_in())
        return self._installed

    async def _put_in(self) -> object:
        return await self.context.route("**/*", self._route)

    async def shut(self, *, leave_pages: bool = True) -> None:
        """Let nothing more leave through this context; then it may be closed.

        Seals the route (every request that reaches it from now on is aborted), then stops
        each page's renderer (:func:`stop_renderer`): its document runs no more script and
        starts no more requests, and the browser drops what that renderer had started, held
        or not, before the context is closed.

        Taking the pages to ``about:blank`` instead is not enough: while a page navigates,
        Chromium pauses what the departing document still starts without a network id, and
        Playwright's driver continues such a request without asking any route (one context in
        two hundred let one out under a page POSTing every 2 ms).

        Stopping the renderers costs about 0.1 s; ``leave_pages=False`` only seals, for a
        context whose effects are all decided and will not be replayed. A context whose route
        was never put in intercepts nothing: only sealed.
        """
        self.sealed = True
        if not leave_pages or self._installed is None:
            return
        await asyncio.gather(*(stop_renderer(self.context, page) for page in list(self.context.pages)))

    async def _route(self, route: Route, request: Request) -> None:
        if self.sealed:
            try:
                await route.abort("blockedbyclient")
            except Exception:  # pragma: no cover - the context is closing
                pass
            return
        handler = self.claimed.pop(request, None) or self.handler
        if handler is None:
            await route.fallback()
        else:
            await handler(route, request)


async def stop_renderer(context: BrowserContext, page: Page) -> None:
    """Stop ``page``'s renderer process (CDP ``Page.crash``) and wait until the browser has
    seen it gone, at most :data:`SHUT_TIMEOUT` seconds; the page is left crashed, to be
    closed. Never raises: a page already closed or crashed has nothing left to stop."""
    if page.is_closed():
        return
    crashed = _background(page.wait_for_event("crash", timeout=SHUT_TIMEOUT * 1000))
    sent: asyncio.Future[object] | None = None
    try:
        session = await context.new_cdp_session(page)
        sent = _background(session.send("Page.crash"))  # never answered: its renderer is gone
        await crashed
    except Exception as exc:  # closed, crashed by a page sharing its renderer, or stuck
        log.debug("page renderer not seen stopped before closing", error=str(exc))
    finally:
        for future in (crashed, sent):
            if future is not None:
                future.cancel()


def _background(work: Awaitable[object]) -> asyncio.Future[object]:
    """Start ``work``; its failure is retrieved even if nobody awaits it (a context that
    closed before its first effect)."""
    future = asyncio.ensure_future(work)
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future


class DispatchGate:
    """Routes one effect attempt's requests; see the module docstring."""

    def __init__(self, store: AsyncStore, attempt: AttemptRecord | None, effect: Effect, *, epoch: int, margin: float,
                 hooks: ExecutorHooks, is_alive: Callable[[], bool],
                 holds_lease: Callable[[], bool] | None = None) -> None:
        self.store = store
        self.attempt = attempt
        self.effect = effect
        self.epoch = epoch
        self.margin = margin
        self.hooks = hooks
        self.is_alive = is_alive
        self.holds_lease = holds_lease or is_alive
        self.released: dict[Request, int] = {}
        self._outbox: dict[int, OutboxRecord] = {}  # the rows this gate wrote, as committed
        self.blocked: list[str] = []
        self.refusal: BaseException | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._route_in: ContextRoute | None = None
        self._closed = False  # after remove(): what it claimed and still meets is aborted
        self._undecided: set[Request] = set()  # dispatches seen, not yet released or aborted
        self._deciding: set[Request] = set()  # of those, the ones in _decide now
        self._decided: set[Request] = set()
        self._settled = asyncio.Event()
        self._settled.set()

    def arm(self, attempt: AttemptRecord) -> None:
        """Start gating for ``attempt`` (its intent is committed). Until then an installed gate
        lets every request through untouched: nothing of the effect has run yet."""
        self.attempt = attempt

    @property
    def outbox(self) -> list[OutboxRecord]:
        """This attempt's outbox rows as this gate committed them (it is the only writer of a
        new attempt's outbox), so the outcome is decided without reading them back."""
        return [self._outbox[key] for key in sorted(self._outbox)]

    @property
    def dispatched(self) -> bool:
        """Whether any request passed the gate (so ``dispatched_at`` is committed)."""
        return bool(self.released)

    def install(self, route: ContextRoute) -> asyncio.Future[object]:
        """Take the context's route (putting it in if need be); the future is done when it is in place."""
        self._route_in = route
        context = route.context
        context.on("request", self._on_request)
        context.on("requestfinished", self._on_finished)
        context.on("requestfailed", self._on_failed)
        context.on("response", self._on_response)
        context.on("close", self._on_close)
        route.handler = self._route
        return route.install()

    async def remove(self) -> None:
        """Stop gating, once every dispatch the browser has reported so far is decided.

        A dispatch the browser reported while the gate was armed is this gate's to decide,
        even if its route event reaches Python after the effect function has returned or
        raised (the page did not wait for it): ``remove`` waits until each is journaled and
        released, or aborted, or finished without the gate (fulfilled by a page route), so
        the attempt's outcome is written knowing what left. Then it hands the route back and
        waits for the responses' outbox writes. A claimed dispatch that still turns up later
        (after :data:`SETTLE_WAIT`, or a closed context) is aborted: the attempt is decided.
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
        await self.flush()
        context = route.context
        context.remove_listener("request", self._on_request)
        context.remove_listener("requestfinished", self._on_finished)
        context.remove_listener("requestfailed", self._on_failed)
        context.remove_listener("response", self._on_response)
        context.remove_listener("close", self._on_close)

    async def flush(self) -> None:
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def _route(self, route: Route, request: Request) -> None:
        if self._closed:  # claimed while armed, met only now: the attempt is already decided
            await self._abort(route, request, RuntimeError("the effect had ended before its dispatch reached the gate"))
            return
        if self.attempt is None or not self.effect.is_dispatch(request.method, request.url, request):
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
        """Claim a dispatch the browser reports while armed: this gate decides it."""
        if (self.attempt is None or self._closed or request in self._decided
                or not self.effect.is_dispatch(request.method, request.url, request)):
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
        if request in self._undecided and request not in self._deciding:  # served without the gate (a page route)
            self._settle(request)

    def _on_close(self, _: object) -> None:
        """Nothing more leaves a closed context."""
        for request in list(self._undecided):
            self._settle(request)

    async def _decide(self, route: Route, request: Request) -> None:
        assert self.attempt is not None
        if self.refusal is not None or not self.is_alive():
            await self._abort(route, request, self.refusal or LeaseLost("the run's lease is lost"))
            return
        faults.hit("dispatch_held", self.effect.id)  # the request waits in the browser until we answer
        faults.hit("lease_expired_while_alive", self.effect.id)  # chaos pauses here past the lease
        try:
            outbox_id = await self.store.call(self.store.store.mark_dispatched, self.attempt, self.epoch,
                                              request.method, request.url, margin=self.margin)
        except (LeaseLost, StoreError) as exc:
            self.refusal = exc
            await self._abort(route, request, exc)
            return
        a = self.attempt
        self._outbox[outbox_id] = OutboxRecord(
            id=outbox_id, attempt_id=a.id, run_id=a.run_id, step_id=a.step_id, method=request.method, url=request.url,
            released_at=time.time(), status=None, response_url=None, headers=None, response_at=None, failure=None,
            failed_at=None)
        self.released[request] = outbox_id
        faults.hit("after_dispatch_commit", self.effect.id)
        if not self.holds_lease():
            # paused (GC, SIGSTOP) between the commit and here past the lease: do not send. The
            # journal says dispatched, so recovery verifies before any replay: safe either way.
            self.refusal = LeaseLost("the lease ran out between the dispatch commit and the release")
            del self.released[request]
            await self._abort(route, request, self.refusal)
            return
        self.hooks.dispatched(self.attempt, request.method, request.url)
        await route.fallback()  # to the network, or to a replay router registered before the gate
        faults.hit("after_dispatch", self.effect.id)

    async def _abort(self, route: Route, request: Request, why: BaseException) -> None:
        self.blocked.append(f"{request.method} {request.url}")
        a = self.attempt
        assert a is not None  # only an armed gate refuses
        log.warning("dispatch refused by the gate", run_id=a.run_id, step_id=self.effect.id, attempt_no=a.attempt_no,
                    request_key=a.request_key, fingerprint=a.request_fingerprint, state=str(a.state),
                    worker_id=a.worker, lease_epoch=self.epoch, method=request.method, url=request.url,
                    reason=str(why))
        try:
            await route.abort("blockedbyclient")
        except Exception:  # pragma: no cover - context closing
            pass

    def _on_response(self, response: Response) -> None:
        outbox_id = self.released.get(response.request)
        if outbox_id is None:
            return
        task = asyncio.ensure_future(self._record_response(outbox_id, response))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _record_response(self, outbox_id: int, response: Response) -> None:
        headers = _key_headers(response)
        await self.store.call(self.store.store.record_response, outbox_id, response.status, response.url, headers)
        row = self._outbox[outbox_id]
        if row.response_at is None:  # as the store's update: the first answer stands
            self._outbox[outbox_id] = replace(row, status=response.status, response_url=response.url,
                                              headers=headers, response_at=time.time())
        assert self.attempt is not None  # only an armed gate releases requests
        self.hooks.response(self.attempt, response.status, response.url)
        faults.hit("after_response", self.effect.id)

    def _on_failed(self, request: Request) -> None:
        if request in self._undecided and request not in self._deciding:  # cancelled before it reached the gate
            self._settle(request)
        outbox_id = self.released.get(request)
        if outbox_id is None:
            return
        task = asyncio.ensure_future(self._record_failure(outbox_id, request.failure or "failed"))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _record_failure(self, outbox_id: int, failure: str) -> None:
        await self.store.call(self.store.store.record_request_failed, outbox_id, failure)
        row = self._outbox[outbox_id]
        if row.response_at is None and row.failure is None:
            self._outbox[outbox_id] = replace(row, failure=failure, failed_at=time.time())


_KEY_HEADERS = ("location", "content-type", "content-length", "date", "etag", "x-request-id", "idempotency-key",
                "retry-after")


def _key_headers(response: Response) -> dict[str, str]:
    """The response headers worth keeping as evidence (never cookies or auth).

    ``response.headers`` needs no round trip to the browser (``all_headers()`` does); it
    leaves out only security-related headers such as Set-Cookie, which are never kept.
    """
    return {k: v for k, v in response.headers.items() if k.lower() in _KEY_HEADERS}


class ActionGuard:
    """Watches an action step for requests that look like side effects (non-GET).

    ``mode="warn"`` reports them; ``mode="fail"`` aborts them (the step then fails).
    """

    def __init__(self, action: Action, *, mode: str, report: Callable[[str, str], None]) -> None:
        self.action = action
        self.mode = mode
        self.report = report
        self.seen: list[str] = []
        self._route_in: ContextRoute | None = None

    async def install(self, route: ContextRoute) -> None:
        """Start watching; in ``fail`` mode by taking the context's route."""
        if self.action.sends:
            return
        self._route_in = route
        if self.mode == "fail":
            route.handler = self._route
            await route.install()
        else:
            route.context.on("request", self._on_request)

    def remove(self) -> None:
        route, self._route_in = self._route_in, None
        if route is None:
            return
        if self.mode == "fail":
            if route.handler == self._route:
                route.handler = None
        else:
            route.context.remove_listener("request", self._on_request)

    def _note(self, request: Request) -> bool:
        if not is_dispatch(None, request.method, request.url):
            return False
        self.seen.append(f"{request.method} {request.url}")
        self.report(request.method, request.url)
        return True

    def _on_request(self, request: Request) -> None:
        self._note(request)

    async def _route(self, route: Route, request: Request) -> None:
        if self._note(request):
            await route.abort("blockedbyclient")
        else:
            await route.fallback()
