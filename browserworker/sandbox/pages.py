"""Plain server-rendered HTML for the sandbox shop (no JavaScript frameworks).

Every value that comes from a user or the database goes through
:func:`html.escape`.  Element ids and classes here are part of the sandbox's
contract with example flows; change them only together with the flows.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from html import escape

from .db import Order

__all__ = [
    "error_page",
    "forbidden_page",
    "home_page",
    "login_page",
    "order_detail_page",
    "order_form_page",
    "orders_list_page",
]

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem}
nav a,nav form{margin-right:1rem;display:inline}
label{display:block;margin-top:.8rem}
.error{color:#b00020}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25rem .5rem}
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _fmt_time(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def layout(title: str, body: str, *, user: str | None, csrf: str | None = None) -> str:
    """Wrap ``body`` in the common page chrome (navigation, login state)."""
    if user:
        account = (
            f'<span id="current-user">{_e(user)}</span> '
            '<form method="post" action="/logout" id="logout-form">'
            f'<input type="hidden" name="csrf_token" value="{_e(csrf or "")}">'
            '<button type="submit" id="logout">Log out</button></form>'
        )
    else:
        account = '<a href="/login" id="nav-login">Log in</a>'
    meta = f'<meta name="csrf-token" content="{_e(csrf)}">' if csrf else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)} - Sandbox Shop</title>{meta}<style>{_STYLE}</style></head>\n"
        '<body><nav><a href="/" id="nav-home">Sandbox Shop</a>'
        '<a href="/orders/new" id="nav-new-order">New order</a>'
        f'<a href="/orders" id="nav-orders">Orders</a>{account}</nav>\n'
        f"<main>\n<h1>{_e(title)}</h1>\n{body}\n</main></body></html>\n"
    )


def home_page(*, user: str | None, csrf: str | None) -> str:
    """The landing page with links to the main areas."""
    body = (
        "<p>A small shop that plays a downstream system for browser automations.</p>"
        "<ul>"
        '<li><a href="/login" id="link-login">Log in</a></li>'
        '<li><a href="/orders/new" id="link-new-order">Place an order</a></li>'
        '<li><a href="/orders" id="link-orders">List orders</a></li>'
        "</ul>"
    )
    return layout("Home", body, user=user, csrf=csrf)


def login_page(
    *,
    csrf: str,
    next_path: str = "",
    username: str = "",
    error: str | None = None,
    user: str | None = None,
) -> str:
    """The login form, optionally re-rendered with a single ``.error``."""
    err = f'<p class="error" id="login-error" role="alert">{_e(error)}</p>' if error else ""
    already = f'<p class="notice" id="already-logged-in">You are logged in as {_e(user)}.</p>' if user else ""
    body = (
        f"{already}{err}"
        '<form method="post" action="/login" id="login-form">'
        f'<input type="hidden" name="csrf_token" value="{_e(csrf)}">'
        f'<input type="hidden" name="next" value="{_e(next_path)}">'
        '<label for="username">Username</label>'
        f'<input id="username" name="username" autocomplete="username" value="{_e(username)}">'
        '<label for="password">Password</label>'
        '<input id="password" name="password" type="password" autocomplete="current-password">'
        '<p><button type="submit" id="login">Log in</button></p>'
        "</form>"
    )
    return layout("Log in", body, user=user, csrf=csrf)


def order_form_page(
    *,
    user: str,
    csrf: str,
    values: Mapping[str, str] | None = None,
    errors: Mapping[str, str] | None = None,
) -> str:
    """The new-order form; on re-render keeps ``values`` and shows one ``.error`` per problem.

    The form is ``novalidate`` and has no min/max/maxlength, so browsers always
    submit and validation failures come from the server (the "200 that is
    really a failure" case).
    """
    values = values or {}
    errors = errors or {}

    def field_error(name: str) -> str:
        if name not in errors:
            return ""
        return f'<p class="error" id="error-{name}" data-field="{name}" role="alert">{_e(errors[name])}</p>'

    def invalid(name: str) -> str:
        return ' aria-invalid="true"' if name in errors else ""

    summary = (
        f'<p class="form-status" id="form-status">Please fix {len(errors)} problem(s) below.</p>' if errors else ""
    )
    body = (
        f"{summary}"
        '<form method="post" action="/orders" id="order-form" novalidate>'
        f'<input type="hidden" name="csrf_token" value="{_e(csrf)}">'
        '<label for="item">Item</label>'
        f'<input id="item" name="item" value="{_e(values.get("item", ""))}"{invalid("item")}>'
        f"{field_error('item')}"
        '<label for="quantity">Quantity</label>'
        f'<input id="quantity" name="quantity" type="number" '
        f'value="{_e(values.get("quantity", "1"))}"{invalid("quantity")}>'
        f"{field_error('quantity')}"
        '<label for="reference">Reference</label>'
        f'<input id="reference" name="reference" '
        f'value="{_e(values.get("reference", ""))}"{invalid("reference")}>'
        f"{field_error('reference')}"
        '<p><button type="submit" id="submit">Place order</button></p>'
        "</form>"
    )
    return layout("New order", body, user=user, csrf=csrf)


def order_detail_page(order: Order, *, user: str, csrf: str) -> str:
    """One order's details."""
    body = (
        f'<dl class="order" id="order" data-id="{order.id}">'
        f'<dt>Order</dt><dd><span id="order-id">{order.id}</span></dd>'
        f'<dt>Item</dt><dd><span id="order-item">{_e(order.item)}</span></dd>'
        f'<dt>Quantity</dt><dd><span id="order-quantity">{order.quantity}</span></dd>'
        f'<dt>Reference</dt><dd><span id="order-reference">{_e(order.reference)}</span></dd>'
        f'<dt>Created</dt><dd><span id="order-created-at" data-ts="{order.created_at}">'
        f"{_fmt_time(order.created_at)}</span></dd>"
        "</dl>"
        '<p><a href="/orders" id="back-to-orders">All orders</a></p>'
    )
    return layout(f"Order {order.id}", body, user=user, csrf=csrf)


def orders_list_page(orders: Sequence[Order], *, user: str, csrf: str, ref: str | None = None) -> str:
    """The order list (``tr.order-row`` per order, ``.no-orders`` when empty)."""
    search = (
        '<form method="get" action="/orders" id="filter-form">'
        '<label for="ref">Reference</label>'
        f'<input id="ref" name="ref" value="{_e(ref or "")}">'
        '<button type="submit" id="filter">Filter</button></form>'
    )
    if not orders:
        table = '<p class="no-orders" id="no-orders">No orders found.</p>'
    else:
        rows = "".join(
            f'<tr class="order-row" data-id="{o.id}" data-reference="{_e(o.reference)}">'
            f'<td class="order-id"><a href="/orders/{o.id}">{o.id}</a></td>'
            f'<td class="order-reference">{_e(o.reference)}</td>'
            f'<td class="order-item">{_e(o.item)}</td>'
            f'<td class="order-quantity">{o.quantity}</td>'
            f'<td class="order-created-at">{_fmt_time(o.created_at)}</td></tr>'
            for o in orders
        )
        table = (
            '<table id="orders"><thead><tr><th>Id</th><th>Reference</th><th>Item</th>'
            f"<th>Quantity</th><th>Created</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return layout("Orders", search + table, user=user, csrf=csrf)


def error_page(status: int, title: str, message: str, *, user: str | None = None) -> str:
    """A generic error page carrying one ``.error`` element."""
    body = f'<p class="error" id="error" data-status="{status}">{_e(message)}</p>'
    return layout(title, body, user=user)


def forbidden_page(message: str, *, user: str | None = None) -> str:
    """The 403 page shown for a missing/invalid CSRF token."""
    return error_page(403, "Forbidden", message, user=user)
