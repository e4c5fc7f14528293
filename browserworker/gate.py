"""The dispatch gate: the journal proves what left the machine.

While an effect runs, every request of its browser context is routed through the gate.
A request that counts as a dispatch is held until the store has committed
``dispatched_at`` (fenced by the lease epoch and the dispatch margin) and an outbox row
for it; only then is it released. If that commit fails the request is aborted: it never
left. The response to a released request is written to the outbox in its own commit.

:class:`ActionGuard` watches action steps for undeclared side effects (non-GET requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from playwright.async_api import BrowserContext, Request, Response, Route

from . import faults
from .errors import LeaseLost, StoreError
from .flow import Action, Effect, is_dispatch
from .hooks import ExecutorHooks
from .store.aio import AsyncStore
from .store.records import AttemptRecord

__all__ = ["ActionGuard", "DispatchGate"]

log = structlog.get_logger("browserworker.gate")


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
        self.blocked: list[str] = []
        self.refusal: BaseException | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._context: BrowserContext | None = None

    def arm(self, attempt: AttemptRecord) -> None:
        """Start gating for ``attempt`` (its intent is committed). Until then an installed gate
        lets every request through untouched: nothing of the effect has run yet."""
        self.attempt = attempt

    @property
    def dispatched(self) -> bool:
        """Whether any request passed the gate (so ``dispatched_at`` is committed)."""
        return bool(self.released)

    async def install(self, context: BrowserContext) -> None:
        self._context = context
        context.on("response", self._on_response)
        context.on("requestfailed", self._on_failed)
        await context.route("**/*", self._route)

    async def remove(self) -> None:
        """Stop gating and wait for the outbox writes of responses already received.

        The route comes off first, and that is awaited: a request intercepted before then reaches
        ``_route`` ahead of the unroute's reply (one connection, in order), so it is still gated
        (journaled, or aborted once the lease is gone) and never let through unjournaled.
        """
        context, self._context = self._context, None
        if context is None:
            return
        try:
            await context.unroute("**/*", self._route)
        except Exception:  # the context may be closed already (lease lost)
            pass
        await self.flush()
        context.remove_listener("response", self._on_response)
        context.remove_listener("requestfailed", self._on_failed)

    async def flush(self) -> None:
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def _route(self, route: Route, request: Request) -> None:
        if self.attempt is None or not self.effect.is_dispatch(request.method, request.url, request):
            await route.fallback()
            return
        if self.refusal is not None or not self.is_alive():
            await self._abort(route, request, self.refusal or LeaseLost("the run's lease is lost"))
            return
        faults.hit("lease_expired_while_alive", self.effect.id)  # chaos pauses here past the lease
        try:
            outbox_id = await self.store.call(self.store.store.mark_dispatched, self.attempt, self.epoch,
                                              request.method, request.url, margin=self.margin)
        except (LeaseLost, StoreError) as exc:
            self.refusal = exc
            await self._abort(route, request, exc)
            return
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
        assert self.attempt is not None  # only an armed gate releases requests
        self.hooks.response(self.attempt, response.status, response.url)
        faults.hit("after_response", self.effect.id)

    def _on_failed(self, request: Request) -> None:
        outbox_id = self.released.get(request)
        if outbox_id is None:
            return
        task = asyncio.ensure_future(
            self.store.call(self.store.store.record_request_failed, outbox_id, request.failure or "failed"))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)


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
        self._context: BrowserContext | None = None

    async def install(self, context: BrowserContext) -> None:
        if self.action.sends:
            return
        self._context = context
        if self.mode == "fail":
            await context.route("**/*", self._route)
        else:
            context.on("request", self._on_request)

    async def remove(self) -> None:
        ctx, self._context = self._context, None
        if ctx is None:
            return
        if self.mode == "fail":
            try:
                await ctx.unroute("**/*", self._route)
            except Exception:
                pass
        else:
            ctx.remove_listener("request", self._on_request)

    def _note(self, request: Request) -> bool:
        if not is_dispatch(None, request.method, request.url):
            return False
        self.seen.append(f"{request.method} {request.url}")
        self.report(request.method, request.url)
        return True

    def _on_request(self, request: Request) -> None:
        self._note(request)

    async def _route(self, route: Route, request: Request) -> Any:
        if self._note(request):
            await route.abort("blockedbyclient")
        else:
            await route.fallback()
