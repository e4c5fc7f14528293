"""What may leave without asking the dispatch gate: journaled as possibly dispatched when seen.

Chromium lets some traffic out without asking any route: a page's ``pagehide`` beacons as
it closes or navigates away, what a popup sends before Playwright routes it, a request
that finishes without reaching the route. The :class:`Detector` of an effect's gate
journals each as possibly dispatched at once (outbox ``channel="detected"``), so recovery
reconciles the attempt (verifier, idempotent replay or review) instead of replaying it;
and it holds a navigation until what it opens the door to is journaled.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog
from playwright.async_api import Page, Request

from . import faults
from .errors import LeaseLost, StoreError
from .gate_outbox import DETECTED
from .passes import safe_url

if TYPE_CHECKING:  # pragma: no cover
    from .gate import DispatchGate

__all__ = ["Detector"]

log = structlog.get_logger("browserworker.gate")

_POPUP = "a page opened while the effect ran (what it sends before it is routed, or as it closes, passes no gate)"


class Detector:
    """The detecting half of one :class:`~browserworker.gate.DispatchGate`."""

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
        log.warning("possible dispatch the gate did not hold; the attempt counts as dispatched", run_id=a.run_id,
                    step_id=gate.effect.id, attempt_no=a.attempt_no, request_key=a.request_key, method=method,
                    url=url, reason=why)
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
            log.error("a possible dispatch could not be journaled", run_id=a.run_id, step_id=gate.effect.id,
                      method=method, url=url, reason=why, error=str(exc))
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
                outbox_id = await gate.journal.dispatch(a, "DETECTED", f"{len(self.unjournaled)} possible "
                                                        "dispatch(es) journaled late", channel=DETECTED, margin=0.0)
            except StoreError:
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            except LeaseLost:
                return
            gate.outbox.keep(a, outbox_id, "DETECTED", "", DETECTED)
            self.unjournaled = [f"{item} (journaled late)" for item in self.unjournaled]
            return

    async def journal_now(self, request: Request, why: str) -> bool:
        """Journal a possible dispatch before letting ``request`` go; False if that failed."""
        self.detected.append(f"{request.method} {request.url}: {why}")
        outbox_id = await self.gate.commit("PAGEHIDE", departing_url(request), DETECTED)
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
            self.detect(request.method, request.url, "the browser sent it without asking the gate"
                    + (f" ({failure})" if failure else ""))
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
            self.popup_write = self.detect("POPUP", url, _POPUP)
        return self.popup_write

    def on_page_close(self, page: Page) -> None:
        gate = self.gate
        if not gate.armed:
            return
        self.detect("PAGEHIDE", safe_url(page) or "",
                    "a page closed while the effect ran (what it sends as it closes passes no gate)")
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
        return await self.journal_now(request, "the page navigated away while the effect ran (its departing "
                                               "document may send on pagehide without asking any route)")


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
