"""The console's Starlette app: the pages, the login, the static files, and the gate every
request passes (a session for every page, security headers on every response)."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..store.base import Store
from .auth import COOKIE, SESSION_SECONDS, Keys, check_csrf, end_session, same_origin, session_of, start_session
from .pages import PAGES
from .web import Console, login_of, redirect, render

__all__ = ["create_app"]

STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
OPEN_PATHS = ("/login", "/static/")  # everything else needs a session
_NAME = re.compile(r"^[\w.@ -]{1,64}$")


class Guard:
    """ASGI middleware: security headers on every response, ``no-store`` on all but the static
    files, and a signed-in session for every path but the login and the static files (its
    row in the store looked up, a read)."""

    def __init__(self, app: ASGIApp, store: Store, keys: Keys) -> None:
        self.app = app
        self.store = store
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        static = path.startswith("/static/")

        async def headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    *HEADERS,
                    (b"cache-control", b"private, max-age=300" if static else b"no-store"),
                ]
            await send(message)

        request = Request(scope)
        login = (
            await run_in_threadpool(session_of, self.store, self.keys, request) if COOKIE in request.cookies else None
        )
        scope.setdefault("state", {})["login"] = login
        if login is None and not path.startswith(OPEN_PATHS):
            if scope["method"] in ("GET", "HEAD"):
                response: Response = RedirectResponse("/login", 303)
            else:
                response = PlainTextResponse("sign in first", 401)
            await response(scope, receive, headers)
            return
        await self.app(scope, receive, headers)


async def login_form(request: Request) -> Response:
    return render(request, "login", "login.html")


async def login(request: Request) -> Response:
    """Sign in with a name and a token: a session row in the store, and a cookie naming it."""
    c: Console = request.app.state.console
    if not same_origin(request):
        raise HTTPException(403, "cross-site request refused")
    form = await request.form()
    name, token = str(form.get("name", "")).strip(), str(form.get("token", ""))
    role = c.keys.role_of(token) if token else None
    if role is None or not _NAME.match(name):
        why = "unknown token" if role is None else "a name is 1-64 letters, digits, spaces, '.', '@', '_' or '-'"
        return render(request, "login", "login.html", status=403, error=why, name=name if _NAME.match(name) else "")
    response = RedirectResponse("/", 303)
    cookie = await run_in_threadpool(start_session, c.store, c.keys, name, role)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


async def logout(request: Request) -> Response:
    """Sign out: the session's row is deleted (with ``everywhere``, every session of this name
    and role), so the cookie is worth nothing wherever a copy of it is."""
    c: Console = request.app.state.console
    form = await request.form()
    login = login_of(request)
    if not same_origin(request) or not check_csrf(login, form.get("csrf")):
        raise HTTPException(403, "cross-site request refused")
    await run_in_threadpool(end_session, c.store, login, everywhere=form.get("everywhere") == "1")
    response = redirect(request, "/login")
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


async def error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    if getattr(request.state, "login", None) is None:
        return PlainTextResponse(str(detail), status)
    return render(request, "error", "error.html", status=status, status_code=status, detail=detail)


def create_app(store: Store, keys: Keys, *, evidence_dir: Path, recordings_dir: Path) -> ASGIApp:
    """The console over ``store`` (which the caller closes), signed in with ``keys``."""
    routes: list[BaseRoute] = [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    for page in PAGES:
        routes += page.routes
    app = Starlette(routes=routes, exception_handlers={HTTPException: error, 500: error})
    app.state.console = Console(
        store, keys, evidence_dir, recordings_dir, nav=[(p.name, p.title, p.path) for p in PAGES if p.in_nav]
    )
    return Guard(app, store, keys)
