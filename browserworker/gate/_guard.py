"""The action guard: watches an action step for undeclared side effects.

A request that would count as a dispatch (any method but GET/HEAD/OPTIONS), a ``page.request``
call with such a method, or a WebSocket message the page sends, is an undeclared side effect
unless the action declared it with ``sends=``. ``mode="warn"`` reports it and lets it go;
``mode="fail"`` reports it and keeps it from the server (the request is aborted, the API call
raises :class:`~browserworker.errors.UndeclaredEffect` unsent, the message is dropped), and the
step then fails. What the browser reports but never routes (a self-closing popup's
``keepalive`` fetch: Chromium lets it out once the popup's frame is gone) cannot be kept back:
fail mode sees it by the browser's request events, and the step fails all the same, saying it
may have been sent.
"""

from __future__ import annotations

from collections.abc import Callable

from playwright.async_api import APIResponse, Request, Route

from ..errors import UndeclaredEffect
from ..flow import Action, ChannelRequest, Effect, Step, is_dispatch
from ._routes import SOCKET, ApiSend, ContextRoute

__all__ = ["ActionGuard", "StepGap"]


class ActionGuard:
    """Watches one action step; see the module docstring."""

    def __init__(
        self, action: Action, *, mode: str, report: Callable[[str, str], None], keep_page: bool = False
    ) -> None:
        self.action = action
        self.mode = mode
        # fail mode: a refused navigation is answered 204 No Content, which leaves the page as it
        # was (what was typed stays), instead of aborted, which shows the browser's error page
        self.keep_page = keep_page
        self.report = report
        self.seen: list[str] = []
        self._route_in: ContextRoute | None = None
        self._noted: dict[Request, str] = {}  # browser requests reported, by what ``seen`` says of them
        self._refused: set[Request] = set()  # of those, the ones the route aborted

    async def install(self, route: ContextRoute) -> None:
        """Start watching: the API request context and sockets always, the browser's requests
        by listening (warn) or by taking the context's route (fail)."""
        if self.action.sends is True:
            return
        self._route_in = route
        route.api = self._api
        route.socket = self._socket
        route.listen("request", self._on_request)
        if self.mode == "fail":
            route.handler = self._route
            await route.install()

    def remove(self) -> None:
        route, self._route_in = self._route_in, None
        if route is None:
            return
        if route.api == self._api:
            route.api = None
        if route.socket == self._socket and self.mode != "fail":
            # in fail mode the guard keeps refusing messages that reach Python only after the
            # action has returned, until the next step takes the socket hook (they are the action's)
            route.socket = None
        if self.mode == "fail" and route.handler == self._route:
            route.handler = None
        route.unlisten("request", self._on_request)

    def unrefused(self) -> list[str]:
        """Fail mode: the undeclared browser requests the route never got to abort (the
        browser let them out without asking it), or aborted for a page that has closed since (a
        closing popup's keepalive may leave all the same): they may have reached the server."""
        return [
            label for request, label in self._noted.items() if request not in self._refused or _page_closed(request)
        ]

    def _note(self, method: str, url: str, request: object = None) -> bool:
        """Report an undeclared side effect; True if it is one."""
        if not is_dispatch(None, method, url, request) or self.action.declares(method, url, request):
            return False
        self.seen.append(f"{method} {url}")
        self.report(method, url)
        return True

    def _note_request(self, request: Request) -> bool:
        if request in self._noted:
            return True
        if not self._note(request.method, request.url, request):
            return False
        self._noted[request] = self.seen[-1]
        return True

    def _on_request(self, request: Request) -> None:
        self._note_request(request)

    async def _route(self, route: Route, request: Request) -> None:
        if self._note_request(request):
            if self.keep_page and request.is_navigation_request():
                await route.fulfill(status=204)
            else:
                await route.abort("blockedbyclient")
            self._refused.add(request)  # only once refused: a closing popup's may still leave
        else:
            await route.fallback()

    async def _api(self, method: str, url: str, send: ApiSend) -> APIResponse:
        if self._note(method, url) and self.mode == "fail":
            raise UndeclaredEffect(
                f"action {self.action.id!r} may not send {method} {url} (undeclared_effects='fail'; "
                "declare it with @flow.effect, or with sends= if it is safe to repeat)"
            )
        return await send()

    async def _socket(self, url: str, message: str | bytes, forward: Callable[[], None]) -> None:
        if self._note(SOCKET, url, ChannelRequest(SOCKET, url, message)) and self.mode == "fail":
            return  # refused: the message never reaches the server
        forward()


def _page_closed(request: Request) -> bool:
    """Whether the page that sent ``request`` is gone (or cannot be told: taken as gone)."""
    try:
        return request.frame.page.is_closed()
    except Exception:  # a detached frame, a worker's request
        return True


class StepGap:
    """Watches the window between two steps of a pass, when no step runs: a page's timer may
    still send then (a ``setTimeout`` an effect's click armed, an autosave). Such a send is
    no step's: while the gap is open, a request that counts as a dispatch (by the default
    rule, or by the ``dispatch=`` rule of the effect before the gap) is refused (aborted at
    the route) if the route is in, and reported either way, naming the step before the gap.
    A request the step before it declared with ``sends=`` goes on.

    :meth:`open` after a step, :meth:`close` when the next step starts (an action before its
    guard is in, an effect when its gate is armed) or the pass ends. ``seen`` keeps what every
    gap of the pass saw."""

    def __init__(
        self,
        route: ContextRoute,
        report: Callable[[str, str, str, bool], None],
        *,
        keep_page: bool = False,
        lets: Callable[[Request], bool] | None = None,
    ) -> None:
        self.route = route
        self.lets = lets
        self.report = report  # (after step, method, url, refused)
        self.keep_page = keep_page  # a refused navigation answered 204: the page stays as it was
        self.after: Step | None = None
        self.seen: list[str] = []
        self._noted: set[Request] = set()

    def open(self, after: Step) -> None:
        if self.after is None:
            self.route.listen("request", self._on_request)
            self.route.between = self._route
        self.after = after

    def close(self) -> None:
        """End the gap (what it saw stays in ``seen``: ``METHOD url (refused)`` / ``(let through)``)."""
        if self.after is not None:
            self.route.unlisten("request", self._on_request)
            if self.route.between == self._route:
                self.route.between = None
            self.after = None

    def _counts(self, request: Request) -> bool:
        step = self.after
        if step is None:
            return False
        method, url = request.method, request.url
        if self.lets is not None and self.lets(request):
            return False
        if isinstance(step, Action) and step.declares(method, url, request):
            return False
        if isinstance(step, Effect) and step.is_dispatch(method, url, request):
            return True
        return is_dispatch(None, method, url, request)

    def _note(self, request: Request, refused: bool) -> None:
        if request in self._noted:
            return
        self._noted.add(request)
        assert self.after is not None
        self.seen.append(f"{request.method} {request.url} ({'refused' if refused else 'let through'})")
        self.report(self.after.id, request.method, request.url, refused)

    def _on_request(self, request: Request) -> None:
        # with the route in, the route decides (and reports); without it, the request goes on
        if not self.route.installed and self._counts(request):
            self._note(request, refused=False)

    async def _route(self, route: Route, request: Request) -> None:
        if self._counts(request):
            self._note(request, refused=True)
            if self.keep_page and request.is_navigation_request():
                await route.fulfill(status=204)
            else:
                await route.abort("blockedbyclient")
        else:
            await route.fallback()
