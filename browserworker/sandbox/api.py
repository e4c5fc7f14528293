"""JSON routes of the sandbox (the test/ops API and the in-page-fetch order API)."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from .core import csrf_ok, current_user, get_state, run_order, validate_order
from .db import FaultError

__all__ = ["api_create_order", "api_faults", "api_inflight", "api_orders", "api_reset", "healthz"]


def _json_error(message: str, status: int, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


async def api_orders(request: Request) -> Response:
    """``GET /api/orders[?reference=X]`` (no login needed)."""
    reference = request.query_params.get("reference")
    orders = await run_in_threadpool(get_state(request).db.list_orders, reference)
    return JSONResponse({"orders": [o.to_dict() for o in orders]})


async def api_create_order(request: Request) -> Response:
    """``POST /api/orders``: JSON create honouring ``Idempotency-Key`` (201 new / 200 existing)."""
    state = get_state(request)
    finish = state.counter.enter()
    try:
        body_bytes = await request.body()
        if current_user(request) is None:
            return _json_error("login required", 401)
        header_token = request.headers.get("x-csrf-token")
        if header_token is not None and not csrf_ok(request, header_token):
            return _json_error("CSRF token invalid", 403)
        try:
            body = json.loads(body_bytes or b"null")
        except ValueError:
            return _json_error("body must be JSON", 400)
        if not isinstance(body, dict):
            return _json_error("body must be a JSON object", 400)
        clean, errors = validate_order(body.get("item"), body.get("quantity"), body.get("reference"))
        if errors:
            return _json_error("validation failed", 422, errors=errors)
        key = (request.headers.get("idempotency-key") or "").strip() or None
        if key is not None and len(key) > 200:
            return _json_error("Idempotency-Key too long", 400)
        outcome = await run_order(request, finish, clean, dedupe=False, idempotency_key=key)
        if outcome.kind == "failed_before":
            return _json_error("internal server error", 500)
        if outcome.kind == "failed_after":
            return _json_error("service unavailable", 503)
        if outcome.kind == "throttled":
            return JSONResponse({"error": "too many requests"}, status_code=outcome.status, headers=outcome.headers)
        assert outcome.order is not None
        return JSONResponse(
            outcome.order.to_dict(),
            status_code=201 if outcome.created else 200,
            headers={"Location": f"/orders/{outcome.order.id}"},
        )
    finally:
        finish()


async def api_inflight(request: Request) -> Response:
    """``GET /api/inflight``."""
    return JSONResponse(get_state(request).counter.snapshot())


async def api_faults(request: Request) -> Response:
    """``GET``/``PUT``/``DELETE /api/faults``."""
    db = get_state(request).db
    if request.method == "DELETE":
        return JSONResponse((await run_in_threadpool(db.reset_faults)).to_dict())
    if request.method == "PUT":
        try:
            body = await request.json()
        except ValueError:
            return _json_error("body must be JSON", 400)
        if not isinstance(body, dict):
            return _json_error("body must be a JSON object", 400)
        try:
            faults = await run_in_threadpool(lambda: db.set_faults(**body))
        except FaultError as exc:
            return _json_error(str(exc), 400)
        return JSONResponse(faults.to_dict())
    return JSONResponse((await run_in_threadpool(db.get_faults)).to_dict())


async def api_reset(request: Request) -> Response:
    """``POST /api/reset``: delete all orders, reset faults and forget the tagged requests."""
    await run_in_threadpool(get_state(request).db.reset)
    request.app.state.visits.clear()
    return JSONResponse({"ok": True})


async def healthz(request: Request) -> Response:
    """``GET /healthz``."""
    return PlainTextResponse("ok")
