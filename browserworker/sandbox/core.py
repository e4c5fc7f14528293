"""Shared machinery of the sandbox app: state, sessions/CSRF, validation, faults.

The critical part of an order POST -- ``delay_before_commit`` and the commit
itself -- runs inside a *shielded* cancel scope (:func:`run_order`), so a
client that disconnects while the server sleeps cannot stop the order from
being committed later.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlsplit

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from .db import Order, SandboxDB
from .visits import TAG_HEADER

__all__ = [
    "DROP_EXTENSION",
    "ConnectionDropUnsupported",
    "InflightCounter",
    "Outcome",
    "SandboxState",
    "csrf_ok",
    "csrf_token",
    "current_user",
    "get_state",
    "html_response",
    "login_redirect",
    "run_order",
    "safe_next",
    "validate_order",
]

#: ASGI ``scope["extensions"]`` key under which the sandbox's uvicorn protocol
#: puts a zero-argument callable that aborts the TCP connection.
DROP_EXTENSION = "browserworker.sandbox.drop"
MAX_REFERENCE = 200
MAX_ITEM = 200


class ConnectionDropUnsupported(RuntimeError):
    """``drop_after_commit`` fired but the server cannot drop connections.

    Raised when the app runs outside :func:`browserworker.sandbox.serve` (e.g.
    under Starlette's TestClient); the order has been committed already.
    """


@dataclass
class InflightCounter:
    """In-memory count of order-creating POSTs received / not yet finished."""

    inflight: int = 0
    received: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def enter(self) -> Callable[[], None]:
        """Count one received request; return an idempotent ``finish`` callable."""
        with self._lock:
            self.inflight += 1
            self.received += 1
        done = False

        def finish() -> None:
            nonlocal done
            with self._lock:
                if not done:
                    done = True
                    self.inflight -= 1

        return finish

    def snapshot(self) -> dict[str, int]:
        """``{"inflight": N, "received": M}``."""
        with self._lock:
            return {"inflight": self.inflight, "received": self.received}


@dataclass
class SandboxState:
    """Per-app state stored on ``app.state.sandbox``."""

    db: SandboxDB
    dedupe: bool
    counter: InflightCounter = field(default_factory=InflightCounter)


@dataclass
class Outcome:
    """Result of running an order POST through the fault knobs and the commit."""

    kind: Literal["ok", "failed_before", "failed_after", "dropped", "throttled"]
    order: Order | None = None
    created: bool = False
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


# -- helpers ----------------------------------------------------------------
def get_state(request: Request) -> SandboxState:
    """The :class:`SandboxState` of the app serving ``request``."""
    state: SandboxState = request.app.state.sandbox
    return state


def current_user(request: Request) -> str | None:
    """The logged-in username, or ``None``."""
    user = request.session.get("user")
    if not isinstance(user, str):
        return None
    logins = getattr(request.app.state, "logins", None)
    if logins is not None and request.session.get("gen", 0) != logins.generation(user):
        return None  # signed out on the server's side (POST /api/sessions/revoke)
    return user


def csrf_token(request: Request) -> str:
    """The session's CSRF token, created on first use."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(24)
        request.session["csrf"] = token
    return token


def csrf_ok(request: Request, submitted: object) -> bool:
    """True when ``submitted`` equals the session's CSRF token (constant-time)."""
    expected = request.session.get("csrf")
    return (
        isinstance(expected, str)
        and isinstance(submitted, str)
        and bool(submitted)
        and hmac.compare_digest(expected.encode(), submitted.encode())
    )


def safe_next(value: object, default: str = "/orders/new") -> str:
    """Only allow a local absolute path (no scheme, no host, no ``//``)."""
    if not isinstance(value, str) or not value.startswith("/") or value.startswith("//"):
        return default
    if "\\" in value or any(ord(c) < 32 for c in value):
        return default
    parts = urlsplit(value)
    return default if parts.scheme or parts.netloc else value


def login_redirect(request: Request) -> RedirectResponse:
    """303 to ``/login?next=<this page>``."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)


def html_response(body: str, status: int = 200) -> HTMLResponse:
    """An uncacheable HTML response."""
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def validate_order(item: object, quantity: object, reference: object) -> tuple[dict[str, Any], dict[str, str]]:
    """Validate order fields; return ``(clean_values, errors_by_field)``."""
    errors: dict[str, str] = {}
    clean: dict[str, Any] = {}
    if not isinstance(item, str) or not item.strip():
        errors["item"] = "Item is required."
    elif len(item) > MAX_ITEM:
        errors["item"] = f"Item must be at most {MAX_ITEM} characters."
    else:
        clean["item"] = item.strip()
    qty: int | None = None
    if isinstance(quantity, int) and not isinstance(quantity, bool):
        qty = quantity
    elif isinstance(quantity, str) and quantity.strip().lstrip("+-").isdecimal():
        qty = int(quantity.strip())
    if qty is None or not 1 <= qty <= 100:
        errors["quantity"] = "Quantity must be a whole number between 1 and 100."
    else:
        clean["quantity"] = qty
    if not isinstance(reference, str) or not reference.strip():
        errors["reference"] = "Reference is required."
    elif len(reference) > MAX_REFERENCE:
        errors["reference"] = f"Reference must be at most {MAX_REFERENCE} characters."
    else:
        clean["reference"] = reference
    return clean, errors


async def drop_connection(request: Request) -> None:
    """Close the client's TCP connection without sending any HTTP response.

    Uses the callable that :class:`~browserworker.sandbox.server.DroppingH11Protocol`
    puts into ``scope["extensions"]``; anything sent afterwards is discarded.
    """
    drop = request.scope.get("extensions", {}).get(DROP_EXTENSION)
    if drop is None:
        raise ConnectionDropUnsupported("drop_after_commit needs browserworker.sandbox.serve()")
    drop()
    await anyio.sleep(0)  # let the transport's connection_lost run


async def run_order(
    request: Request,
    finish: Callable[[], None],
    clean: Mapping[str, Any],
    *,
    dedupe: bool,
    idempotency_key: str | None = None,
) -> Outcome:
    """Apply the fault knobs around committing one order.

    Order of events: answer ``throttle`` (nothing committed, ``times`` untouched), consume
    the knobs (counting down ``times``), sleep
    ``delay_before_commit``, maybe fail before committing, commit (insert, or
    find the existing order for ``idempotency_key``/``dedupe``), sleep
    ``delay_after_commit``, then maybe drop the connection or fail after commit.
    ``finish`` is called before a drop so ``/api/inflight`` is already
    accurate when the client sees the connection die.
    """
    state = get_state(request)
    throttle = await run_in_threadpool(state.db.consume_throttle, request.headers.get(TAG_HEADER))
    if throttle is not None:  # not taken: the client is told when to come back
        return Outcome("throttled", status=throttle.throttle_status, headers={"Retry-After": str(throttle.throttle)})
    faults = await run_in_threadpool(state.db.consume_faults)
    with anyio.CancelScope(shield=True):
        if faults.delay_before_commit > 0:
            await anyio.sleep(faults.delay_before_commit)
        if faults.fail_before_commit:
            return Outcome("failed_before")
        order, created = await run_in_threadpool(
            lambda: state.db.create_order(
                clean["item"],
                clean["quantity"],
                clean["reference"],
                idempotency_key=idempotency_key,
                dedupe=dedupe,
            )
        )
    if faults.delay_after_commit > 0:
        await anyio.sleep(faults.delay_after_commit)
    if faults.drop_after_commit:
        finish()
        await drop_connection(request)
        return Outcome("dropped", order, created)
    if faults.fail_after_commit:
        return Outcome("failed_after", order, created)
    return Outcome("ok", order, created)
