"""What every page of the console shares: the console's state, rendering a page (whole, or
only its live part for a refresh), reading the store off the event loop, and the checks
every action passes (signed in, allowed to act, same origin, the session's CSRF token)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..ops import format_age
from ..store.base import Store
from .auth import ConsoleUser, Keys, check_csrf, same_origin

__all__ = ["Console", "act", "console", "login_of", "read", "redirect", "render", "write"]

T = TypeVar("T")


@dataclass
class Console:
    """The console's state: the store, the keys, where evidence and recordings are, the pages."""

    store: Store
    keys: Keys
    evidence_dir: Path
    recordings_dir: Path
    nav: list[tuple[str, str, str]] = field(default_factory=list)  # (name, title, path)
    env: Environment = field(init=False)

    def __post_init__(self) -> None:
        self.env = Environment(
            loader=PackageLoader("browserworker.console", "templates"),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(when=_when, age=format_age, query=_query, pretty=_pretty)


def _when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _pretty(value: Any) -> str:
    """JSON as a person reads it (the page escapes it: ``<`` shows as ``<``)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _query(params: dict[str, Any], **changes: Any) -> str:
    """A query string of ``params`` with ``changes`` (None and empty values left out)."""
    merged = {**params, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})


def console(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


def login_of(request: Request) -> ConsoleUser:
    found: ConsoleUser = request.state.login
    return found


async def read(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a (blocking) library function that only reads, in a worker thread: what a page view
    calls (a GET never writes)."""
    return await run_in_threadpool(fn, *args, **kwargs)


async def write(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a (blocking) library function that writes, in a worker thread: an operator's action
    (a POST that passed the checks of :func:`act`)."""
    return await run_in_threadpool(fn, *args, **kwargs)


def render(request: Request, page: str, template: str, status: int = 200, **context: Any) -> Response:
    """``template`` inside the layout, or alone for a live refresh (``X-Refresh: 1``)."""
    c = console(request)
    context.update(
        request=request,
        login=getattr(request.state, "login", None),
        nav=c.nav,
        page=page,
        flash=c.keys.read_note(request.query_params.get("done")),
    )
    if request.headers.get("x-refresh") == "1":
        return HTMLResponse(c.env.get_template(template).render(context), status)
    return HTMLResponse(c.env.get_template("layout.html").render(context, body=template), status)


async def act(request: Request) -> tuple[ConsoleUser, FormData]:
    """The form of an action, once its sender may act: 403 for a viewer, a cross-site sender
    or a missing or wrong CSRF token."""
    login = login_of(request)
    if not same_origin(request):
        raise HTTPException(403, "cross-site request refused")
    form = await request.form()
    if not check_csrf(login, form.get("csrf")):
        raise HTTPException(403, "the form's CSRF token is missing or wrong: reload the page")
    if not login.can_act:
        raise HTTPException(403, "read-only: this login cannot act")
    return login, form


def redirect(request: Request, path: str, message: str | None = None) -> RedirectResponse:
    """303 to ``path`` (one of the console's own), with a one-line ``message`` to show there
    (signed: a link made elsewhere cannot put words on a page)."""
    if not message:
        return RedirectResponse(path, 303)
    sep = "&" if "?" in path else "?"
    return RedirectResponse(f"{path}{sep}{urlencode({'done': console(request).keys.note(message)})}", 303)
