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
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog
from playwright.async_api import Request, Response, Route

from . import faults
from .errors import LeaseLost, StoreError
from .flow import Effect
from .detection import Detector
from .extensions import Extensions
from .gate_channels import NOT_APPROVED, api_call, approved, socket_message
from .gate_outbox import GateOutbox
from .journal import RunJournal
from .routes import ContextRoute
from .store.records import AttemptRecord

if TYPE_CHECKING:
    from .approval_gate import ApprovalCheck

__all__ = ["DispatchGate"]

log = structlog.get_logger("browserworker.gate")

SETTLE_WAIT = 60.0
"""Seconds :meth:`DispatchGate.remove` waits for the dispatches it claimed to be decided
(each may wait out the store's busy timeout for its commit)."""

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
HELD = "held"


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
        self._api: object = None; self._socket: object = None  # noqa: E702  (hooks on the route, see remove)
        self._settled = asyncio.Event()
        self._settled.set()
        self.approval: ApprovalCheck | None = None  # an approve= effect's check, before each dispatch commit

    def arm(self, attempt: AttemptRecord) -> None:
        """Start gating for ``attempt`` (its intent is committed). Until then an installed gate
        hands every request to the gap between steps (:class:`~browserworker.guard.StepGap`)."""
        self.attempt = attempt
        self.detector.arm()
        if self.shared_workers_allowed:
            self.detector.detect("SHAREDWORKER", "*", "shared workers are allowed in this browser: what they send "
                                                      "passes no gate")

    @property
    def dispatched(self) -> bool:
        """Whether anything passed the gate (so ``dispatched_at`` is committed), or may have
        left without it (detected: the outcome sets ``dispatched_at`` if its own write failed)."""
        return bool(self.released) or self.sent > 0 or bool(self.detector.detected)

    def install(self, route: ContextRoute) -> asyncio.Future[object]:
        """Take the context's route (putting it in if need be); the future is done when it is in place."""
        self.route_in = route
        context = route.context
        for event, listener in self._listeners():
            context.on(event, listener)
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
            await asyncio.wait_for(self._settled.wait(), timeout=SETTLE_WAIT)
        except asyncio.TimeoutError:
            log.warning("dispatches the gate never saw decided; they will be aborted if they turn up",
                        step_id=self.effect.id, requests=[f"{r.method} {r.url}" for r in self.undecided])
        self._closed = True
        route.hand_back(self._route, self._api, self._socket)
        await self.flush()
        if self.detector.unjournaled:
            await self.detector.journal_late()
        for event, listener in self._listeners():
            route.context.remove_listener(event, listener)
        self.detector.detach()

    def _listeners(self) -> list[tuple[str, Callable[..., None]]]:
        return [("request", self._on_request), ("requestfinished", self._on_finished),
                ("requestfailed", self._on_failed), ("response", self._on_response), ("close", self._on_close),
                ("page", self.detector.on_page)]

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
        self.extensions.notify("dispatched", self.attempt, request.method, request.url)
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
        log.warning("dispatch refused by the gate", run_id=a.run_id, step_id=self.effect.id, attempt_no=a.attempt_no,
                    request_key=a.request_key, fingerprint=a.request_fingerprint, state=str(a.state),
                    worker_id=a.worker, lease_epoch=self.epoch, method=method, url=url, reason=str(why))

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
        self.extensions.notify("response", self.attempt, response.status, response.url)
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
