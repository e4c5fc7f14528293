"""Starlette app of the sandbox shop: HTML routes and :func:`create_app`.

The shop behaves like a real site (cookie sessions, per-session CSRF tokens,
303 redirects, forms that re-render with errors) and has fault knobs (see
:class:`~browserworker.sandbox.db.Faults`) that apply to order-creating POSTs.
"""

from __future__ import annotations

import secrets
from html import escape
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from . import pages
from .api import api_create_order, api_faults, api_inflight, api_orders, api_reset, healthz
from .core import (
    SandboxState,
    csrf_ok,
    csrf_token,
    current_user,
    get_state,
    html_response,
    login_redirect,
    run_order,
    safe_next,
    validate_order,
)
from .db import SandboxDB
from .logins import Logins, api_logins, api_revoke_sessions
from .visits import Visits, VisitsMiddleware, api_visits

__all__ = ["SESSION_COOKIE", "create_app"]

SESSION_COOKIE = "sandbox_session"


async def home(request: Request) -> Response:
    """``GET /``."""
    user = current_user(request)
    return html_response(pages.home_page(user=user, csrf=csrf_token(request) if user else None))


async def login_form(request: Request) -> Response:
    """``GET /login``."""
    next_path = safe_next(request.query_params.get("next"), default="")
    return html_response(pages.login_page(csrf=csrf_token(request), next_path=next_path, user=current_user(request)))


async def login_submit(request: Request) -> Response:
    """``POST /login``: 303 on success, form with ``.error`` (200) otherwise."""
    form = await request.form()
    username = str(form.get("username") or "")
    password = str(form.get("password") or "")
    next_raw = form.get("next")
    if not csrf_ok(request, form.get("csrf_token")):
        error = "Your session expired or the form was tampered with. Please try again."
    elif not await run_in_threadpool(get_state(request).db.check_user, username, password):
        error = "Invalid username or password."
    else:
        generation = await run_in_threadpool(request.app.state.logins.logged_in, username)
        request.session.clear()
        request.session["user"] = username
        request.session["gen"] = generation
        request.session["csrf"] = secrets.token_urlsafe(24)
        return RedirectResponse(safe_next(next_raw), status_code=303)
    return html_response(
        pages.login_page(
            csrf=csrf_token(request),
            next_path=safe_next(next_raw, default=""),
            username=username,
            error=error,
            user=current_user(request),
        )
    )


async def logout(request: Request) -> Response:
    """``POST /logout``: clear the session, 303 to ``/login``."""
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


async def order_form(request: Request) -> Response:
    """``GET /orders/new``."""
    user = current_user(request)
    if user is None:
        return login_redirect(request)
    return html_response(pages.order_form_page(user=user, csrf=csrf_token(request)))


async def order_submit(request: Request) -> Response:
    """``POST /orders``: validate, apply faults, commit, 303 to the order."""
    state = get_state(request)
    finish = state.counter.enter()
    try:
        form = await request.form()
        user = current_user(request)
        if user is None:
            return RedirectResponse("/login", status_code=303)
        if not csrf_ok(request, form.get("csrf_token")):
            return html_response(pages.forbidden_page("CSRF token missing or invalid.", user=user), 403)
        raw = {k: str(form.get(k) or "") for k in ("item", "quantity", "reference")}
        clean, errors = validate_order(raw["item"], raw["quantity"], raw["reference"])
        if errors:
            return html_response(pages.order_form_page(user=user, csrf=csrf_token(request), values=raw, errors=errors))
        dedupe = state.dedupe or (await run_in_threadpool(state.db.get_faults)).dedupe
        outcome = await run_order(request, finish, clean, dedupe=dedupe)
        if outcome.kind == "failed_before":
            return html_response(pages.error_page(500, "Server error", "Internal server error.", user=user), 500)
        if outcome.kind == "failed_after":
            return html_response(
                pages.error_page(503, "Service unavailable", "The service is temporarily unavailable.", user=user), 503
            )
        if outcome.kind == "throttled":
            page = html_response(
                pages.error_page(outcome.status, "Slow down", "Too many requests.", user=user), outcome.status
            )
            page.headers.update(outcome.headers)
            return page
        assert outcome.order is not None
        return RedirectResponse(f"/orders/{outcome.order.id}", status_code=303)
    finally:
        finish()


async def order_detail(request: Request) -> Response:
    """``GET /orders/{id}``."""
    user = current_user(request)
    if user is None:
        return login_redirect(request)
    order = await run_in_threadpool(get_state(request).db.get_order, request.path_params["order_id"])
    if order is None:
        return html_response(pages.error_page(404, "Not found", "No such order.", user=user), 404)
    return html_response(pages.order_detail_page(order, user=user, csrf=csrf_token(request)))


async def orders_list(request: Request) -> Response:
    """``GET /orders[?ref=REFERENCE]``."""
    user = current_user(request)
    if user is None:
        return login_redirect(request)
    ref = request.query_params.get("ref") or None
    orders = await run_in_threadpool(get_state(request).db.list_orders, ref)
    return html_response(pages.orders_list_page(orders, user=user, csrf=csrf_token(request), ref=ref))


#: the staff area's HTTP Basic account (a site that asks the browser, not a form, for a login)
BASIC_USER, BASIC_PASSWORD = "staff", "basic-s3cret"


async def staff(request: Request) -> Response:
    """A page behind HTTP Basic auth; it shows the language the browser asked for."""
    import base64

    given = request.headers.get("authorization", "")
    expected = "Basic " + base64.b64encode(f"{BASIC_USER}:{BASIC_PASSWORD}".encode()).decode()
    if not secrets.compare_digest(given, expected):
        return Response("authentication required", status_code=401, headers={"WWW-Authenticate": 'Basic realm="staff"'})
    language = request.headers.get("accept-language", "")
    return HTMLResponse(f"<h1 id='staff'>staff area</h1><p id='language'>{escape(language)}</p>")


async def busy(request: Request) -> Response:
    """``GET /busy?after=N[&status=503]``: a page that asks the browser to come back in N seconds."""
    after = request.query_params.get("after", "1")
    status = 503 if request.query_params.get("status") == "503" else 429
    if not after.isdigit():
        raise HTTPException(400, "after must be a whole number of seconds")
    return HTMLResponse("<h1 id='busy'>busy</h1>", status_code=status, headers={"Retry-After": after})


async def http_error(request: Request, exc: Exception) -> Response:
    """JSON errors under ``/api``, HTML pages elsewhere."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=headers)
    return HTMLResponse(
        pages.error_page(exc.status_code, str(exc.detail), str(exc.detail)),
        status_code=exc.status_code,
        headers=headers,
    )


def create_app(db_path: str | Path, *, dedupe: bool = False) -> Starlette:
    """Build the sandbox app backed by the SQLite file ``db_path``.

    ``dedupe=True`` turns on dedupe-on-reference for form POSTs regardless of
    the persisted ``dedupe`` knob.
    """
    db = SandboxDB(db_path)
    routes = [
        Route("/", home, methods=["GET"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login_submit, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/orders/new", order_form, methods=["GET"]),
        Route("/orders/{order_id:int}", order_detail, methods=["GET"]),
        Route("/orders", orders_list, methods=["GET"]),
        Route("/orders", order_submit, methods=["POST"]),
        Route("/api/orders", api_orders, methods=["GET"]),
        Route("/api/orders", api_create_order, methods=["POST"]),
        Route("/api/inflight", api_inflight, methods=["GET"]),
        Route("/api/faults", api_faults, methods=["GET", "PUT", "DELETE"]),
        Route("/api/reset", api_reset, methods=["POST"]),
        Route("/api/logins", api_logins, methods=["GET"]),
        Route("/api/sessions/revoke", api_revoke_sessions, methods=["POST"]),
        Route("/api/visits", api_visits, methods=["GET", "DELETE"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/staff", staff, methods=["GET"]),
        Route("/busy", busy, methods=["GET"]),
    ]
    visits = Visits()
    middleware = [
        Middleware(VisitsMiddleware, visits=visits),
        Middleware(
            SessionMiddleware,
            secret_key=db.secret_key(),
            session_cookie=SESSION_COOKIE,
            same_site="lax",
            https_only=False,
        ),
    ]
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: http_error})
    app.state.sandbox = SandboxState(db=db, dedupe=dedupe)
    app.state.logins = Logins(db_path)
    app.state.visits = visits
    return app
