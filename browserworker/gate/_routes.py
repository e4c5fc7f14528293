"""A browser context's one route, shared by the dispatch gate and the action guard, and the
kit's hooks on the two channels a route never sees: Playwright's API request context
(``page.request`` / ``context.request``) and the WebSocket messages a page sends.

Whoever holds the context now (an effect's :class:`~browserworker.gate._gate.DispatchGate`, an
action's :class:`~browserworker.gate._guard.ActionGuard`) sets the handlers; while nobody does,
requests, API calls and messages go on untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlencode, urlsplit

from playwright.async_api import APIResponse, BrowserContext, Page, Request, Route, WebSocketRoute

from ..logs import get_logger

__all__ = [
    "SOCKET",
    "ApiCall",
    "ApiHandler",
    "ApiListener",
    "ContextRoute",
    "SocketHandler",
    "api_call_of",
    "observe_api",
    "stop_renderer",
]

log = get_logger("browserworker.gate")

RouteHandler = Callable[[Route, Request], Awaitable[None]]
ApiSend = Callable[[], Awaitable[APIResponse]]
ApiHandler = Callable[[str, str, ApiSend], Awaitable[APIResponse]]
"""``(method, url, send)``: decide a ``page.request`` call; ``send()`` makes it."""
SocketHandler = Callable[[str, "str | bytes", Callable[[], None]], Awaitable[None]]
"""``(socket url, message, forward)``: decide a message the page sends; ``forward()`` sends it on."""

SOCKET = "WEBSOCKET"
"""The method a WebSocket message the page sends is journaled and matched with (``dispatch=``, ``sends=``)."""

SHUT_TIMEOUT = 5.0
"""Seconds :meth:`ContextRoute.shut` gives each page's renderer to be seen stopped."""

_EXIT = {"url": "chrome://kill", "transitionType": "typed"}
"""A typed navigation to ``chrome://kill``: Chromium starts no navigation for it but has the
frame's renderer process exit at once (a debug URL, honoured only as if typed)."""

_EXIT_WAIT = 2.0
"""Seconds a renderer told to exit has before it is made to crash instead."""

Listener = Callable[..., None]


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

    The context's API request context is hooked at once (``api``), and its WebSockets are routed
    by :meth:`route_sockets` (``socket``), which must run before the first page opens one.

    The gate, the guard and the gap between steps hear the context's request events through
    :meth:`listen` / :meth:`unlisten`, which keep the context's subscription once it is taken.
    """

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.handler: RouteHandler | None = None
        self.api: ApiHandler | None = None
        self.socket: SocketHandler | None = None
        self.between: RouteHandler | None = None  # the window between steps (guard.StepGap), while open
        self.claimed: dict[Request, RouteHandler] = {}
        self._installed: asyncio.Future[object] | None = None
        self._sockets: asyncio.Future[object] | None = None
        self.sealed = False  # set by shut(): every request that reaches the route is aborted
        self._api_calls: set[asyncio.Future[object]] = set()  # page.request calls the driver is making
        self._listeners: dict[str, list[Listener]] = {}  # by context event, see listen()
        _hook_api_requests(context, self)

    def listen(self, event: str, listener: Listener) -> None:
        """Call ``listener`` on each of the context's ``event`` (``"request"``, ``"response"``...)
        until :meth:`unlisten`.

        The context itself is listened to once per event, from the first :meth:`listen` of it
        until it closes. Playwright sends the driver a message (``updateSubscription``) each
        time an event gets its first listener or loses its last, and the holders take turns at
        every step (an action's guard, the gap after it, an effect's gate): listened to directly,
        each step would cost a few such messages for nothing."""
        listeners = self._listeners.get(event)
        if listeners is None:
            listeners = self._listeners[event] = []
            self.context.on(event, partial(self._emit, listeners))  # type: ignore[call-overload]
        listeners.append(listener)

    def unlisten(self, event: str, listener: Listener) -> None:
        """Stop calling ``listener`` on ``event`` (the context stays listened to)."""
        listeners = self._listeners.get(event)
        if listeners is not None and listener in listeners:
            listeners.remove(listener)

    @staticmethod
    def _emit(listeners: list[Listener], *args: Any) -> None:
        for listener in list(listeners):  # as Playwright's emitter: those in when the event came
            listener(*args)

    def hand_back(self, handler: object, api: object, socket: object) -> None:
        """Take off a holder's hooks, each only where nobody has put another since."""
        if self.handler == handler:
            self.handler = None
        if self.api is api:
            self.api = None
        if self.socket is socket:
            self.socket = None

    @property
    def installed(self) -> bool:
        """Whether the route is in (or being put in): the browser's requests reach it."""
        return self._installed is not None

    async def unheld(self, route: Route, request: Request) -> None:
        """A request no holder decides (an effect's gate not armed yet): the gap between steps
        sees it if open, else it goes on."""
        if self.between is None:
            await route.fallback()
        else:
            await self.between(route, request)

    def install(self) -> asyncio.Future[object]:
        """Put the route in, once; the future is done when the browser routes through it."""
        if self._installed is None:
            self._installed = _background(self._put_in())
        return self._installed

    async def _put_in(self) -> object:
        return await self.context.route("**/*", self._route)

    def route_sockets(self) -> asyncio.Future[object]:
        """Route every WebSocket the context's pages open from now on, once; the future is done
        when the browser does. Messages the page sends pass ``socket`` (while one is set)."""
        if self._sockets is None:
            self._sockets = _background(self.context.route_web_socket("**/*", self._socket_route))
        return self._sockets

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

        A stopped renderer runs no unload handlers either: closing a page or its context
        unloads its document, and what a document sends as it is unloaded (a ``pagehide``
        beacon, a ``keepalive`` fetch) reaches no route and no request event. Offline emulation
        (``context.set_offline``) does not keep those back; only a stopped renderer does.

        Stopping the renderers costs about 0.1 s; ``leave_pages=False`` only seals, for a
        context whose effects are all decided and will not be replayed and whose pages send
        nothing as they are unloaded (the executor never passes it).
        """
        self.sealed = True
        if self._api_calls:  # see _api
            await asyncio.wait(list(self._api_calls), timeout=SHUT_TIMEOUT)
        if not leave_pages:
            return
        await asyncio.gather(*(stop_renderer(self.context, page) for page in list(self.context.pages)))

    async def _route(self, route: Route, request: Request) -> None:
        if self.sealed:
            try:
                await route.abort("blockedbyclient")
            except Exception:  # pragma: no cover - the context is closing
                pass
            return
        handler = self.claimed.pop(request, None) or self.handler or self.between
        if handler is None:
            await route.fallback()
        else:
            await handler(route, request)

    async def _api(self, method: str, url: str, send: ApiSend) -> APIResponse:
        """Decide a ``page.request`` call. Once it is sent, it is tracked until Playwright's
        driver has finished it, even if its caller stops waiting, and :meth:`shut` lets it
        finish before the context may close: the driver follows a redirect by itself, and a
        context closed meanwhile kills the driver (an unhandled rejection reading the closed
        context's cookies), and with it every run of the process."""
        if self.sealed:
            raise RuntimeError(f"{method} {url}: this browser context is closing; nothing more may leave it")

        def tracked() -> asyncio.Future[APIResponse]:
            call = _background(send())
            self._api_calls.add(call)
            call.add_done_callback(self._api_calls.discard)
            return asyncio.shield(call)  # type: ignore[arg-type]

        handler = self.api
        return await (tracked() if handler is None else handler(method, url, tracked))

    def _socket_route(self, ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()
        order = asyncio.Lock()  # FIFO: the page's messages reach the server in the order it sent them

        def on_message(message: str | bytes) -> None:
            _background(self._socket_message(ws.url, message, lambda: server.send(message), order))

        ws.on_message(on_message)

    async def _socket_message(
        self, url: str, message: str | bytes, forward: Callable[[], None], order: asyncio.Lock
    ) -> None:
        async with order:
            if self.sealed:
                return  # nothing more leaves a context being shut
            handler = self.socket
            if handler is None:
                forward()
            else:
                await handler(url, message, forward)


@dataclass(frozen=True)
class ApiCall:
    """A ``page.request`` / ``context.request`` call as it is sent: the method, the URL with its
    ``params``, the body Playwright makes of ``data`` or ``form`` (None for ``multipart``, whose
    boundary is chosen by the driver) and its content type."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None
    mime: str | None
    multipart: bool = False


ApiListener = Callable[[ApiCall, "APIResponse | None", "str | None"], Awaitable[None]]
"""``(call, response, error)``: told of every API call a context made, once it is answered (or failed)."""


class _ApiHook:
    """The wrapper on one context's API request context (see :func:`_hook_api_requests`)."""

    def __init__(self, inner: Callable[..., Awaitable[APIResponse]]) -> None:
        self.inner = inner
        self.route: ContextRoute | None = None
        self.listeners: list[ApiListener] = []

    async def __call__(self, *args: Any, **kwargs: Any) -> APIResponse:
        call = api_call_of(kwargs)

        def send() -> Awaitable[APIResponse]:
            return self.inner(*args, **kwargs)

        try:
            response = await (send() if self.route is None else self.route._api(call.method, call.url, send))
        except Exception as exc:
            for listener in list(self.listeners):
                await listener(call, None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            raise
        for listener in list(self.listeners):
            await listener(call, response, None)
        return response


def api_call_of(kwargs: Mapping[str, Any]) -> ApiCall:
    """What an ``APIRequestContext._inner_fetch`` call will send (its keyword arguments)."""
    request = kwargs.get("request")
    method = (kwargs.get("method") or (request.method if request is not None else None) or "GET").upper()
    url = str(kwargs.get("url") or (request.url if request is not None else ""))
    params = kwargs.get("params")
    if params:
        query = params if isinstance(params, str) else urlencode([(k, _js_string(v)) for k, v in dict(params).items()])
        url = f"{url}{'&' if urlsplit(url).query else '?'}{query}"
    headers = {
        str(k): str(v)
        for k, v in dict(kwargs.get("headers") or (request.headers if request is not None else {}) or {}).items()
    }
    mime = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    data, form = kwargs.get("data"), kwargs.get("form")
    body: bytes | None = None
    if kwargs.get("multipart") is not None:
        return ApiCall(method, url, headers, None, mime, multipart=True)
    if isinstance(data, bytes):
        body = data
    elif isinstance(data, str):
        body = data.encode()
    elif data is not None:
        body, mime = json.dumps(data, separators=(",", ":")).encode(), mime or "application/json"
    elif form is not None:
        fields = getattr(form, "_fields", None)
        pairs = list(fields) if fields is not None else list(dict(form).items())
        body = urlencode([(k, _js_string(v)) for k, v in pairs]).encode()
        mime = mime or "application/x-www-form-urlencoded"
    elif request is not None:
        body = request.post_data_buffer
    return ApiCall(method, url, headers, body, mime)


def _js_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _hook(context: BrowserContext) -> _ApiHook:
    impl: Any = getattr(getattr(context, "_impl_obj", None), "request", None)
    hook = getattr(impl, "_inner_fetch", None)
    if isinstance(hook, _ApiHook):
        return hook
    if impl is None or hook is None:  # pragma: no cover - a Playwright whose internals moved
        raise RuntimeError(
            "this Playwright version's API request context cannot be gated by browserworker "
            "(no APIRequestContext._inner_fetch); pin the Playwright version browserworker supports"
        )
    impl._inner_fetch = hook = _ApiHook(hook)
    return hook


def _hook_api_requests(context: BrowserContext, route: ContextRoute) -> None:
    """Send the context's API requests (``page.request`` and ``context.request`` are the same
    object) through ``route._api``: they are made by Playwright's driver, not the browser, so no
    route sees them. Every verb (``get``, ``post``, ``fetch``...) ends in one private method of
    the implementation object, which is wrapped on that one instance."""
    _hook(context).route = route


def observe_api(context: BrowserContext, listener: ApiListener) -> Callable[[], None]:
    """Tell ``listener`` of every API call ``context`` makes from now on, once answered (the
    recorder keeps them, a verifier's evidence names them); returns what stops it."""
    hook = _hook(context)
    hook.listeners.append(listener)

    def stop() -> None:
        if listener in hook.listeners:
            hook.listeners.remove(listener)

    return stop


async def stop_renderer(context: BrowserContext, page: Page) -> None:
    """Stop ``page``'s renderer process and wait until the browser has seen it gone, at most
    :data:`SHUT_TIMEOUT` seconds; the page is left crashed, to be closed. Never raises: a page
    already closed or crashed has nothing left to stop.

    The renderer is told to exit (:data:`_EXIT`), not to crash: it runs no unload handler
    either way, but a crash (CDP ``Page.crash``) has Chromium's crash handler write a report of
    ~128 KB to disk for every pass, kept until someone deletes it. A renderer not gone after
    :data:`_EXIT_WAIT` (a Chromium that would not honour the exit) is made to crash."""
    if page.is_closed():
        return
    # heard by listeners, not page.wait_for_event: that one sends the driver three messages
    # of its own (for tracing), for every page of every pass
    gone: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def crashed(_: object) -> None:
        if not gone.done():
            gone.set_result("crash")

    def closed(_: object) -> None:
        if not gone.done():
            gone.set_exception(RuntimeError("the page closed before its renderer was seen stopped"))

    page.on("crash", crashed)
    page.on("close", closed)
    sent: list[asyncio.Future[object]] = []  # never answered: the renderer is gone
    try:
        session = await context.new_cdp_session(page)
        sent.append(_background(session.send("Page.navigate", _EXIT)))
        try:
            async with asyncio.timeout(_EXIT_WAIT):
                await asyncio.shield(gone)
        except TimeoutError:
            log.warning("a page's renderer did not exit when told to; making it crash", url=page.url, waited=_EXIT_WAIT)
            sent.append(_background(session.send("Page.crash")))
            async with asyncio.timeout(SHUT_TIMEOUT - _EXIT_WAIT):
                await gone
    except Exception as exc:  # closed, crashed by a page sharing its renderer, or stuck
        log.debug("page renderer not seen stopped before closing", error=str(exc) or type(exc).__name__)
    finally:
        page.remove_listener("crash", crashed)
        page.remove_listener("close", closed)
        if not gone.done():
            gone.cancel()
        elif not gone.cancelled():
            gone.exception()  # retrieved: a close after the wait gave up is no error of anyone's
        for future in sent:
            future.cancel()


def _background(work: Awaitable[object]) -> asyncio.Future[object]:
    """Start ``work``; its failure is retrieved even if nobody awaits it (a context that
    closed before its first effect)."""
    future = asyncio.ensure_future(work)
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future


def safe_url(page: Page) -> str | None:
    """The page's URL, or None once it cannot be read (a closed page)."""
    try:
        return page.url
    except Exception:  # pragma: no cover
        return None
