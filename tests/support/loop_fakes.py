"""The step loop without Chromium: small typed fakes of the Playwright objects it touches, a
fake site behind them, and a harness that runs one leased run through the real executor, gate,
recovery and journal against a real SQLite store.

Only what the loop calls is faked (``grep`` of ``runtime/`` and ``gate/``): a context's
``route``, ``route_web_socket``, ``new_page``, ``pages``, ``new_cdp_session``, ``on`` /
``remove_listener``, ``close`` and its API request context's ``_inner_fetch``; a page's ``url``,
``context``, ``main_frame``, ``is_closed``, ``eval_on_selector_all`` and events (``crash``
and ``close`` among them); a request's ``method``, ``url``, ``headers``, ``post_data``, ``frame``,
``redirected_from``, ``failure``, ``is_navigation_request`` and ``response``; a route's
``fallback`` and ``abort``; a CDP session's ``send`` and ``detach``.

A step function sends with :meth:`FakePage.send`, which goes through the browser's request
lifecycle as Chromium and Playwright's driver report it: the ``request`` event, the context's
route (if one is in) deciding it, then the site (:class:`FakeSite`), then ``response`` and
``requestfinished``, or ``requestfailed``.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from browserworker.flow import Extension, Extensions, Flow, StepContext
from browserworker.journal import Lease, LeaseSettings, RunJournal
from browserworker.runtime import ApprovalSettings, BrowserSettings
from browserworker.runtime._browser import BrowserProcess
from browserworker.runtime._executor import Executor
from browserworker.store import open_store
from browserworker.store.aio import AsyncStore
from browserworker.store.base import Store
from browserworker.store.records import AttemptRecord, EventRecord, NewRun, Owner, RunRecord

SITE = "https://shop.test"
BLOCKED = "net::ERR_BLOCKED_BY_CLIENT"
RESET = "net::ERR_CONNECTION_RESET"

Listener = Callable[..., Any]


def spawn(work: Awaitable[Any]) -> None:
    """Run a listener's coroutine as Playwright's event emitter does: in the background."""
    task = asyncio.ensure_future(work)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


_TASKS: set[asyncio.Future[Any]] = set()


class Emitter:
    """``on`` / ``remove_listener`` / ``emit``, as Playwright's objects have them."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Listener]] = {}

    def on(self, event: str, listener: Listener) -> None:
        self._listeners.setdefault(event, []).append(listener)

    def remove_listener(self, event: str, listener: Listener) -> None:
        listeners = self._listeners.get(event, [])
        if listener in listeners:
            listeners.remove(listener)

    def emit(self, event: str, *args: Any) -> None:
        for listener in list(self._listeners.get(event, [])):
            result = listener(*args)
            if inspect.isawaitable(result):
                spawn(result)


class NetworkError(Exception):
    """What a page's send raises when its request failed (as ``fetch`` rejects)."""


@dataclass
class Answer:
    """What the site does with one request that reached it: answer ``status`` (with
    ``headers``), or reset the connection after receiving it (``reset=True``: it landed, its
    answer is lost)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    reset: bool = False


class FakeSite:
    """The other end of every request that leaves the fake browser: it keeps what reached it
    (``received``) and answers with ``respond`` if set, else from ``answers`` in turn (then 200)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str]] = []
        self.answers: list[Answer] = []
        self.respond: Callable[[str, str], Answer] | None = None

    def take(self, method: str, url: str) -> Answer:
        self.received.append((method, url))
        if self.respond is not None:
            return self.respond(method, url)
        return self.answers.pop(0) if self.answers else Answer()

    def sent(self, method: str = "POST") -> list[str]:
        """The URLs of the requests of ``method`` that reached the site."""
        return [url for m, url in self.received if m == method]


class FakeFrame:
    def __init__(self, page: FakePage) -> None:
        self.page = page
        self.parent_frame: FakeFrame | None = None

    @property
    def url(self) -> str:
        return self.page.url


class FakeRequest:
    """A browser request (hashable by identity, as the gate keys its dicts by request)."""

    def __init__(
        self, method: str, url: str, frame: FakeFrame, *, headers: Mapping[str, str] | None = None, body: str | None
    ) -> None:
        self.method = method
        self.url = url
        self.frame = frame
        self.headers = dict(headers or {})
        self.post_data = body
        self.post_data_buffer = None if body is None else body.encode()
        self.redirected_from: FakeRequest | None = None
        self.failure: str | None = None
        self._response: FakeResponse | None = None

    def is_navigation_request(self) -> bool:
        return False

    async def response(self) -> FakeResponse | None:
        return self._response


class FakeResponse:
    def __init__(self, request: FakeRequest, answer: Answer) -> None:
        self.request = request
        self.status = answer.status
        self.url = request.url
        self.headers = dict(answer.headers)

    async def server_addr(self) -> dict[str, Any]:
        return {"ipAddress": "127.0.0.1", "port": 443}


class FakeRoute:
    """One routed request waiting for its handler's decision."""

    def __init__(self, request: FakeRequest) -> None:
        self.request = request
        self.decision: str | None = None

    async def fallback(self) -> None:
        self.decision = "fallback"

    async def abort(self, error_code: str = "failed") -> None:
        self.decision = "abort"


class FakeCDPSession:
    """The DevTools calls the loop makes: stop a renderer (a typed navigation to
    ``chrome://kill``), find unload listeners (none here), take a screenshot."""

    def __init__(self, page: FakePage) -> None:
        self.page = page

    async def send(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self.page.cdp.append(method)
        if method == "Page.navigate" and params is not None and params.get("url") == "chrome://kill":
            if self.page.exits_when_told:
                self.page.crash()
        if method == "Page.crash":
            self.page.crash()
        if method == "Runtime.evaluate":
            return {"result": {"type": "object"}}  # no objectId: nothing to disarm
        if method == "Page.captureScreenshot":
            return {"data": ""}
        return {}

    async def detach(self) -> None:
        pass


class FakeAPIResponse:
    def __init__(self, url: str, answer: Answer) -> None:
        self.url = url
        self.status = answer.status
        self.headers = dict(answer.headers)


class FakeAPIRequestImpl:
    """The implementation object of a context's API request context: every verb ends in
    ``_inner_fetch`` (which the gate's :class:`~browserworker.gate.ContextRoute` wraps)."""

    def __init__(self, site: FakeSite) -> None:
        self.site = site

    async def _inner_fetch(self, **kwargs: Any) -> FakeAPIResponse:
        url = str(kwargs["url"])
        answer = self.site.take(str(kwargs.get("method") or "GET").upper(), url)
        if answer.reset:
            raise NetworkError(f"{url}: {RESET}")
        return FakeAPIResponse(url, answer)


@dataclass
class FakeContextImpl:
    request: FakeAPIRequestImpl


class FakeAPIRequest:
    """``page.request``: a call goes through the (wrapped) ``_inner_fetch`` of its context."""

    def __init__(self, context: FakeContext) -> None:
        self.context = context

    async def get(self, url: str) -> FakeAPIResponse:
        return await self._fetch("GET", url)

    async def post(self, url: str) -> FakeAPIResponse:
        return await self._fetch("POST", url)

    async def _fetch(self, method: str, url: str) -> FakeAPIResponse:
        fetch = self.context._impl_obj.request._inner_fetch
        return cast(FakeAPIResponse, await fetch(method=method, url=url))


class FakePage(Emitter):
    def __init__(self, context: FakeContext) -> None:
        super().__init__()
        self.context = context
        self.url = "about:blank"
        self.main_frame = FakeFrame(self)
        self.request = FakeAPIRequest(context)
        self.cdp: list[str] = []  # the DevTools methods sent to this page
        self.exits_when_told = True  # its renderer exits on a typed chrome://kill
        self._closed = False
        self._crashed = asyncio.Event()

    def is_closed(self) -> bool:
        return self._closed

    def crash(self) -> None:
        self._crashed.set()
        self.emit("crash", self)

    @property
    def crashed(self) -> bool:
        return self._crashed.is_set()

    def close_now(self) -> None:
        if not self._closed:
            self._closed = True
            self.emit("close", self)

    async def eval_on_selector_all(self, selector: str, expression: str) -> list[str]:
        return []  # no password fields

    async def send(self, method: str, url: str, body: str | None = None) -> FakeResponse:
        """Send a request as the page's script would (a form post, a ``fetch``): the browser
        reports it, the context's route decides it if one is in, the site answers it."""
        request = FakeRequest(method, url, self.main_frame, body=body)
        context = self.context
        if context.closed or self._closed:
            raise NetworkError(f"{method} {url}: the page is closed")
        context.emit("request", request)
        self.emit("request", request)
        if context.route_handler is not None:
            route = FakeRoute(request)
            await context.route_handler(route, request)
            assert route.decision is not None, f"{method} {url}: the route left the request hanging"
            if route.decision == "abort":
                request.failure = BLOCKED
                context.emit("requestfailed", request)
                raise NetworkError(f"{method} {url}: {BLOCKED}")
        answer = context.site.take(method, url)
        if answer.reset:
            request.failure = RESET
            context.emit("requestfailed", request)
            raise NetworkError(f"{method} {url}: {RESET}")
        response = request._response = FakeResponse(request, answer)
        context.emit("response", response)
        self.emit("response", response)
        context.emit("requestfinished", request)
        return response


class FakeContext(Emitter):
    def __init__(self, site: FakeSite) -> None:
        super().__init__()
        self.site = site
        self._impl_obj = FakeContextImpl(FakeAPIRequestImpl(site))
        self._pages: list[FakePage] = []
        self.opened: list[FakePage] = []  # every page it ever had
        self.route_handler: Callable[[FakeRoute, FakeRequest], Awaitable[None]] | None = None
        self.closed = False
        self.cookies: list[dict[str, Any]] = []  # what the steps set, as the site's answers would
        self.started_from: dict[str, Any] | None = None  # the storage state it was created with

    async def storage_state(self, indexed_db: bool = False) -> dict[str, Any]:
        return {"cookies": [dict(c) for c in self.cookies], "origins": []}

    @property
    def pages(self) -> list[FakePage]:
        return list(self._pages)

    async def route(self, pattern: str, handler: Callable[[FakeRoute, FakeRequest], Awaitable[None]]) -> None:
        assert self.route_handler is None, "a context's route goes in once"
        self.route_handler = handler

    async def route_web_socket(self, pattern: str, handler: Callable[[Any], None]) -> None:
        pass  # the fake pages open no sockets

    async def new_page(self) -> FakePage:
        page = FakePage(self)
        self._pages.append(page)
        self.opened.append(page)
        self.emit("page", page)
        return page

    async def new_cdp_session(self, page: FakePage) -> FakeCDPSession:
        if page.is_closed():
            raise RuntimeError("Target page, context or browser has been closed")
        return FakeCDPSession(page)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for page in self._pages:
            page.close_now()
        self._pages.clear()
        self.emit("close", self)


class FakeBrowser:
    """Stands in for :class:`~browserworker.runtime._browser.BrowserProcess`: ``settings`` and
    ``context()``, each context a :class:`FakeContext` in front of one :class:`FakeSite`."""

    def __init__(self, site: FakeSite) -> None:
        self.site = site
        self.settings = BrowserSettings()  # never launched
        self.contexts: list[FakeContext] = []

    @asynccontextmanager
    async def context(self, **options: Any) -> AsyncIterator[FakeContext]:
        ctx = FakeContext(self.site)
        ctx.started_from = options.get("storage_state")
        ctx.cookies = [dict(c) for c in (ctx.started_from or {}).get("cookies", [])]
        self.contexts.append(ctx)
        try:
            yield ctx
        finally:
            await ctx.close()


def page(ctx: StepContext[Any]) -> FakePage:
    """The fake page a step was handed."""
    assert isinstance(ctx.page, FakePage)
    return ctx.page


class FakeClock:
    """The clock and sleep of the settle rule (``RunScope.clock`` / ``RunScope.sleep``): it
    stands still but for what the loop sleeps, which takes no time at all."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class Heard(Extension):
    """What the run's extensions heard: skipped steps, notices, the run's end, a lost lease."""

    def __init__(self) -> None:
        self.skipped: list[str] = []
        self.notices: list[str] = []
        self.finished: list[RunRecord] = []
        self.lost: list[str] = []

    def step_skipped(self, run: RunRecord, attempt: AttemptRecord) -> None:
        self.skipped.append(attempt.step_id)

    def notice(self, run: RunRecord, step_id: str | None, message: str, **fields: Any) -> None:
        self.notices.append(message)

    def run_finished(self, run: RunRecord) -> None:
        self.finished.append(run)

    def lease_lost(self, run_id: str, error: BaseException) -> None:
        self.lost.append(str(error))


@dataclass
class Loop:
    """A SQLite store, a fake browser and site, and the real executor to run runs with."""

    store: Store
    astore: AsyncStore
    site: FakeSite
    browser: FakeBrowser
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    me: Owner = field(default_factory=lambda: Owner(worker="me", host="test-host", pid=1))
    executors: list[Executor] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path) -> Loop:
        store = open_store(path)
        site = FakeSite()
        return cls(store=store, astore=AsyncStore(store), site=site, browser=FakeBrowser(site))

    def close(self) -> None:
        self.astore.close()
        self.store.close()

    # -- runs --------------------------------------------------------------------------

    def new_run(self, flow: Flow[Any], inputs: Mapping[str, Any] | None = None) -> RunRecord:
        run_id = f"loop-{uuid.uuid4().hex[:8]}"
        return self.store.create_run(NewRun(id=run_id, flow_name=flow.name, inputs=dict(inputs or {})))

    def claim(self, run_id: str, owner: Owner | None = None, *, takeover_epoch: int | None = None) -> RunRecord:
        claimed = self.store.claim_run(
            run_id, owner or self.me, self.lease.ttl, skew=self.lease.skew, takeover_epoch=takeover_epoch
        )
        assert claimed is not None, f"run {run_id} could not be claimed"
        return claimed

    def journal(self, run: RunRecord, owner: Owner | None = None, extensions: Extensions | None = None) -> RunJournal:
        """The journal of a claimed run, as its lease holder writes it (as ``LeasedRun`` builds it)."""
        lease = Lease(self.astore, run.id, run.lease_epoch, self.lease, extensions)
        return RunJournal(self.astore, run, owner or self.me, lease, self.lease)

    def executor(
        self, flow: Flow[Any], run: RunRecord, heard: Heard, clock: FakeClock | None = None
    ) -> tuple[Executor, Extensions]:
        """The executor of a claimed run, assembled as ``LeasedRun.execute`` does, with the fake
        browser in place of Chromium (and ``clock`` as the settle rule's clock)."""
        extensions = Extensions([heard])
        journal = self.journal(run, extensions=extensions)
        executor = Executor(
            flow, journal, cast(BrowserProcess, self.browser), extensions, approvals=ApprovalSettings(hold=0.0)
        )
        extensions.add(executor.closer)
        if clock is not None:
            executor.scope.clock, executor.scope.sleep = clock, clock.sleep
        self.executors.append(executor)
        return executor, extensions

    async def execute(
        self, flow: Flow[Any], run: RunRecord, heard: Heard | None = None, clock: FakeClock | None = None
    ) -> RunRecord:
        """Execute a claimed run to its end (heartbeating, as a leased run does)."""
        executor, extensions = self.executor(flow, run, heard or Heard(), clock)
        lease = executor.lease
        lease.start()
        try:
            return await executor.execute()
        finally:
            await lease.stop()
            await extensions.drain()

    def run_to_end(
        self,
        flow: Flow[Any],
        inputs: Mapping[str, Any] | None = None,
        heard: Heard | None = None,
        clock: FakeClock | None = None,
    ) -> RunRecord:
        """Create, claim and execute a run in one go; the run as it ended."""
        run = self.claim(self.new_run(flow, inputs).id)
        return asyncio.run(self.execute(flow, run, heard, clock))

    # -- what the store has --------------------------------------------------------------

    def attempts(self, run_id: str, step_id: str | None = None) -> list[AttemptRecord]:
        return [a for a in self.store.attempts(run_id) if step_id is None or a.step_id == step_id]

    def decisions(self, run_id: str) -> list[str]:
        return [e.decision for e in self.store.events(run_id) if e.decision is not None]

    def events(self, run_id: str, kinds: Iterable[str] = ()) -> list[EventRecord]:
        wanted = set(kinds)
        return [e for e in self.store.events(run_id) if not wanted or e.kind in wanted]


async def post(ctx: StepContext[Any], path: str = "/orders") -> FakeResponse:
    """The effect's POST, carrying its request key (as a flow's form would)."""
    return await page(ctx).send("POST", f"{SITE}{path}?key={ctx.request_key}")
