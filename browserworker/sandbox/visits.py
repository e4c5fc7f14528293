"""Who is at the sandbox at once: requests tagged by their sender, and the visits they make up.

A client tags its requests with two headers: ``X-Sandbox-Tag`` (a group, e.g. a limit key)
and ``X-Sandbox-Visit`` (one visitor of that group, e.g. one run). The sandbox keeps, in
memory, each tagged request's method, path, status and start/end times; a *visit* lasts from
its first request's start to its last request's end. ``GET /api/visits`` reports each tag's
visits, its most visits overlapping at once and its most requests in flight at once;
``DELETE /api/visits`` forgets them (as does ``POST /api/reset``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["TAG_HEADER", "VISIT_HEADER", "TaggedRequest", "Visits", "VisitsMiddleware", "api_visits", "most_at_once"]

TAG_HEADER = "x-sandbox-tag"
VISIT_HEADER = "x-sandbox-visit"


@dataclass
class TaggedRequest:
    tag: str
    visit: str
    method: str
    path: str
    start: float
    end: float | None = None
    status: int | None = None


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most ``(start, end)`` spans that overlap at one moment (touching ends do not overlap)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


class Visits:
    """The tagged requests seen so far (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[TaggedRequest] = []

    def begin(self, tag: str, visit: str, method: str, path: str) -> TaggedRequest:
        seen = TaggedRequest(tag, visit, method, path, time.time())
        with self._lock:
            self.requests.append(seen)
        return seen

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def report(self) -> dict[str, Any]:
        """``{"tags": {tag: {"visits": {visit: {"first", "last", "requests"}}, "most_visits_at_once",
        "most_requests_at_once", "requests": [...]}}}``; a request still in flight ends now."""
        now = time.time()
        with self._lock:
            seen = list(self.requests)
        tags: dict[str, Any] = {}
        for tag in sorted({r.tag for r in seen}):
            mine = [r for r in seen if r.tag == tag]
            visits: dict[str, dict[str, Any]] = {}
            for r in mine:
                v = visits.setdefault(r.visit, {"first": r.start, "last": r.end or now, "requests": 0})
                v["first"], v["last"] = min(v["first"], r.start), max(v["last"], r.end or now)
                v["requests"] += 1
            tags[tag] = {
                "visits": visits,
                "most_visits_at_once": most_at_once([(v["first"], v["last"]) for v in visits.values()]),
                "most_requests_at_once": most_at_once([(r.start, r.end or now) for r in mine]),
                "requests": [asdict(r) for r in mine],
            }
        return {"tags": tags}


class VisitsMiddleware:
    """Records every request that carries ``X-Sandbox-Tag`` in the app's :class:`Visits`."""

    def __init__(self, app: ASGIApp, visits: Visits) -> None:
        self.app = app
        self.visits = visits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        tag = headers.get(TAG_HEADER)
        if not tag:
            await self.app(scope, receive, send)
            return
        seen = self.visits.begin(tag, headers.get(VISIT_HEADER, ""), scope.get("method", ""), scope.get("path", ""))

        async def tracking(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen.status = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                seen.end = time.time()

        try:
            await self.app(scope, receive, tracking)
        finally:
            if seen.end is None:
                seen.end = time.time()


async def api_visits(request: Request) -> Response:
    """``GET``/``DELETE /api/visits``."""
    visits: Visits = request.app.state.visits
    if request.method == "DELETE":
        visits.clear()
    return JSONResponse(visits.report())
