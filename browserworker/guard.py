"""The action guard: watches an action step for undeclared side effects.

A request that would count as a dispatch (any method but GET/HEAD/OPTIONS), a ``page.request``
call with such a method, or a WebSocket message the page sends, is an undeclared side effect
unless the action declared it with ``sends=``. ``mode="warn"`` reports it and lets it go;
``mode="fail"`` reports it and keeps it from the server (the request is aborted, the API call
raises :class:`~browserworker.errors.UndeclaredEffect` unsent, the message is dropped), and the
step then fails.
"""

from __future__ import annotations

from collections.abc import Callable

from playwright.async_api import APIResponse, Request, Route

from .errors import UndeclaredEffect
from .flow import Action, is_dispatch
from .routes import SOCKET, ApiSend, ContextRoute

__all__ = ["ActionGuard"]

class ActionGuard:
    """Watches one action step; see the module docstring."""

    def __init__(self, action: Action, *, mode: str, report: Callable[[str, str], None]) -> None:
        self.action = action
        self.mode = mode
        self.report = report
        self.seen: list[str] = []
        self._route_in: ContextRoute | None = None

    async def install(self, route: ContextRoute) -> None:
        """Start watching: the API request context and sockets always, the browser's requests
        by listening (warn) or by taking the context's route (fail)."""
        if self.action.sends is True:
            return
        self._route_in = route
        route.api = self._api
        route.socket = self._socket
        if self.mode == "fail":
            route.handler = self._route
            await route.install()
        else:
            route.context.on("request", self._on_request)

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
        if self.mode == "fail":
            if route.handler == self._route:
                route.handler = None
        else:
            route.context.remove_listener("request", self._on_request)

    def _note(self, method: str, url: str, request: object = None) -> bool:
        """Report an undeclared side effect; True if it is one."""
        if not is_dispatch(None, method, url, request) or self.action.declares(method, url, request):
            return False
        self.seen.append(f"{method} {url}")
        self.report(method, url)
        return True

    def _on_request(self, request: Request) -> None:
        self._note(request.method, request.url, request)

    async def _route(self, route: Route, request: Request) -> None:
        if self._note(request.method, request.url, request):
            await route.abort("blockedbyclient")
        else:
            await route.fallback()

    async def _api(self, method: str, url: str, send: ApiSend) -> APIResponse:
        if self._note(method, url) and self.mode == "fail":
            raise UndeclaredEffect(f"action {self.action.id!r} may not send {method} {url} (undeclared_effects='fail'; "
                                   "declare it with @flow.effect, or with sends= if it is safe to repeat)")
        return await send()

    async def _socket(self, url: str, message: str | bytes, forward: Callable[[], None]) -> None:
        if self._note(SOCKET, url) and self.mode == "fail":
            return  # refused: the message never reaches the server
        forward()
