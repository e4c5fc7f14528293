"""Talking to the sandbox shop as a browser would, over HTTP: log in, read a form's CSRF token, post an order."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from starlette.testclient import TestClient

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = CSRF_RE.search(html)
    assert match, "no csrf_token in page"
    return match.group(1)


def login(client: httpx.Client | TestClient, next_path: str | None = None, password: str = "demo") -> httpx.Response:
    page = client.get("/login", params={"next": next_path} if next_path else None)
    data = {"username": "demo", "password": password, "csrf_token": csrf_of(page.text)}
    if next_path:
        data["next"] = next_path
    return client.post("/login", data=data)


def order_csrf(client: httpx.Client | TestClient) -> str:
    return csrf_of(client.get("/orders/new").text)


def post_order(
    client: httpx.Client | TestClient,
    reference: str = "REF-1",
    item: str = "widget",
    quantity: str = "2",
    csrf: str | None = None,
) -> httpx.Response:
    token = csrf if csrf is not None else order_csrf(client)
    return client.post(
        "/orders", data={"item": item, "quantity": quantity, "reference": reference, "csrf_token": token}
    )
