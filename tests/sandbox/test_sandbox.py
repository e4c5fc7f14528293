"""Tests for browserworker.sandbox: route logic via TestClient, network faults via a real server."""

from __future__ import annotations

import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

with warnings.catch_warnings():  # starlette >= 1.x nags about httpx vs httpx2 on import
    warnings.filterwarnings("ignore", message=r".*httpx2")
    from starlette.testclient import TestClient  # noqa: E402

from browserworker.sandbox import SandboxDB, create_app  # noqa: E402
from browserworker.sandbox.core import ConnectionDropUnsupported  # noqa: E402
from browserworker.sandbox.testing import SandboxError, SandboxProcess, start_sandbox  # noqa: E402
from tests.support.shop import csrf_of, login, order_csrf, post_order  # noqa: E402


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sandbox.db"


@pytest.fixture
def client(db_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(db_path), follow_redirects=False) as c:
        yield c


@pytest.fixture
def authed(client: TestClient) -> TestClient:
    assert login(client).status_code == 303
    return client


# -- pages, login, CSRF --------------------------------------------------------
def test_home_health_and_unknown_routes(client: TestClient) -> None:
    """Home links to the main pages, /healthz says ok, unknown routes are 404 (JSON under /api)."""
    home = client.get("/")
    assert home.status_code == 200
    for href in ('href="/login"', 'href="/orders/new"', 'href="/orders"'):
        assert href in home.text
    assert client.get("/healthz").text == "ok"
    assert client.get("/nope").status_code == 404
    api = client.get("/api/nope")
    assert api.status_code == 404 and api.json()["error"]


def test_login_form_has_contract_selectors(client: TestClient) -> None:
    """The login form exposes the ids/names flows rely on and carries ?next through."""
    html = client.get("/login", params={"next": "/orders"}).text
    assert '<form method="post" action="/login"' in html
    assert 'id="username" name="username"' in html
    assert 'id="password" name="password" type="password"' in html
    assert 'type="submit" id="login"' in html
    assert 'name="next" value="/orders"' in html
    assert csrf_of(html)


def test_login_bad_password_rerenders_form_with_error(client: TestClient) -> None:
    """Wrong credentials give a 200 re-render with an .error element and no session."""
    resp = login(client, password="wrong")
    assert resp.status_code == 200
    assert 'class="error"' in resp.text and 'id="login"' in resp.text
    assert client.get("/orders/new").status_code == 303


def test_login_bad_csrf_rerenders_form_with_error(client: TestClient) -> None:
    """A login POST with a wrong CSRF token re-renders the form (200) with an .error."""
    client.get("/login")
    resp = client.post("/login", data={"username": "demo", "password": "demo", "csrf_token": "x"})
    assert resp.status_code == 200 and 'class="error"' in resp.text
    assert client.get("/orders/new").status_code == 303


def test_login_redirects_to_local_next_only(client: TestClient) -> None:
    """Successful login 303s to a local ?next, and to /orders/new for external targets."""
    resp = login(client, next_path="/orders?ref=A")
    assert resp.status_code == 303 and resp.headers["location"] == "/orders?ref=A"
    client.post("/logout")
    resp = login(client, next_path="//evil.example/x")
    assert resp.headers["location"] == "/orders/new"


def test_pages_require_login(client: TestClient) -> None:
    """Protected pages 303 to /login?next=..., and POST /orders 303s to /login."""
    resp = client.get("/orders/new")
    assert resp.status_code == 303 and resp.headers["location"] == "/login?next=/orders/new"
    assert client.get("/orders").headers["location"].startswith("/login?next=/orders")
    assert client.get("/orders/1").status_code == 303
    resp = client.post("/orders", data={"item": "a", "quantity": "1", "reference": "r"})
    assert resp.status_code == 303 and resp.headers["location"] == "/login"


def test_logout_clears_session(authed: TestClient) -> None:
    """POST /logout 303s to /login and the session no longer grants access."""
    resp = authed.post("/logout")
    assert resp.status_code == 303 and resp.headers["location"] == "/login"
    assert authed.get("/orders/new").status_code == 303


# -- orders via forms ----------------------------------------------------------
def test_order_form_has_contract_selectors(authed: TestClient) -> None:
    """The order form exposes #order-form, #item, #quantity (number, 1), #reference, #submit."""
    html = authed.get("/orders/new").text
    assert '<form method="post" action="/orders" id="order-form"' in html
    assert 'id="item" name="item"' in html
    assert 'id="quantity" name="quantity" type="number"' in html and 'value="1"' in html
    assert 'id="reference" name="reference"' in html
    assert 'type="submit" id="submit"' in html
    assert csrf_of(html)


def test_order_post_redirects_303_to_detail(authed: TestClient, db_path: Path) -> None:
    """A valid order POST commits and 303s to /orders/{id}, whose page shows the order."""
    resp = post_order(authed, reference="REF-303", item="bolt", quantity="7")
    assert resp.status_code == 303
    (order,) = SandboxDB(db_path).list_orders("REF-303")
    assert resp.headers["location"] == f"/orders/{order.id}"
    html = authed.get(resp.headers["location"]).text
    assert f'<span id="order-id">{order.id}</span>' in html
    assert '<span id="order-reference">REF-303</span>' in html
    assert "bolt" in html and '<span id="order-quantity">7</span>' in html


def test_order_post_with_bad_csrf_is_403(authed: TestClient, db_path: Path) -> None:
    """An order POST with a wrong CSRF token is a 403 page and inserts nothing."""
    resp = post_order(authed, reference="REF-CSRF", csrf="forged")
    assert resp.status_code == 403
    assert SandboxDB(db_path).list_orders() == []


def test_validation_errors_rerender_200_with_values(authed: TestClient, db_path: Path) -> None:
    """Invalid input re-renders the form with 200, one .error per problem, values kept."""
    resp = post_order(authed, reference="R" * 201, item="  ", quantity="0")
    assert resp.status_code == 200
    assert resp.text.count('class="error"') == 3
    assert 'value="0"' in resp.text and 'value="' + "R" * 201 + '"' in resp.text
    resp = post_order(authed, reference="REF-V", item="nut", quantity="abc")
    assert resp.status_code == 200 and resp.text.count('class="error"') == 1
    assert 'id="error-quantity"' in resp.text and 'value="nut"' in resp.text
    assert SandboxDB(db_path).list_orders() == []


def test_orders_list_and_filter(authed: TestClient) -> None:
    """/orders lists tr.order-row with data attributes; ?ref filters exactly; empty shows .no-orders."""
    post_order(authed, reference="A")
    post_order(authed, reference="B")
    html = authed.get("/orders").text
    assert html.count('class="order-row"') == 2
    html = authed.get("/orders", params={"ref": "A"}).text
    assert html.count('class="order-row"') == 1 and 'data-reference="A"' in html
    assert 'class="no-orders"' in authed.get("/orders", params={"ref": "Z"}).text


def test_missing_order_is_404(authed: TestClient) -> None:
    """/orders/{id} for an unknown id is a 404 page."""
    assert authed.get("/orders/999").status_code == 404


def test_dedupe_knob_returns_existing_order(authed: TestClient, db_path: Path) -> None:
    """With the dedupe knob on, a second form POST with the same reference 303s to the first order."""
    authed.put("/api/faults", json={"dedupe": True})
    first = post_order(authed, reference="DUP")
    second = post_order(authed, reference="DUP")
    assert first.headers["location"] == second.headers["location"]
    assert len(SandboxDB(db_path).list_orders("DUP")) == 1


def test_create_app_dedupe_flag(tmp_path: Path) -> None:
    """create_app(dedupe=True) dedupes form POSTs without touching the knob."""
    with TestClient(create_app(tmp_path / "d.db", dedupe=True), follow_redirects=False) as c:
        login(c)
        assert post_order(c, reference="X").headers["location"] == post_order(c, reference="X").headers["location"]
        assert len(c.get("/api/orders").json()["orders"]) == 1


# -- JSON API ------------------------------------------------------------------
def test_api_orders_lists_json(authed: TestClient) -> None:
    """GET /api/orders returns all orders, or exact matches for ?reference, without login."""
    post_order(authed, reference="J1", item="cog", quantity="3")
    post_order(authed, reference="J2")
    authed.post("/logout")
    assert len(authed.get("/api/orders").json()["orders"]) == 2
    (order,) = authed.get("/api/orders", params={"reference": "J1"}).json()["orders"]
    assert set(order) == {"id", "reference", "item", "quantity", "created_at"}
    assert (order["item"], order["quantity"]) == ("cog", 3)


def test_api_create_requires_login(client: TestClient) -> None:
    """POST /api/orders without a session cookie is a 401."""
    resp = client.post("/api/orders", json={"item": "a", "quantity": 1, "reference": "r"})
    assert resp.status_code == 401


def test_api_idempotency_key(authed: TestClient) -> None:
    """Idempotency-Key: first POST 201s, a repeat returns the same order with 200, no insert."""
    body = {"item": "gear", "quantity": 2, "reference": "IDEM"}
    first = authed.post("/api/orders", json=body, headers={"Idempotency-Key": "k1"})
    again = authed.post("/api/orders", json=body, headers={"Idempotency-Key": "k1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert authed.post("/api/orders", json=body).status_code == 201
    assert len(authed.get("/api/orders", params={"reference": "IDEM"}).json()["orders"]) == 2
    bad = authed.post("/api/orders", json={"item": "", "quantity": 0, "reference": "x"})
    assert bad.status_code == 422 and set(bad.json()["errors"]) == {"item", "quantity"}


# -- fault knobs -----------------------------------------------------------------
def test_fail_before_commit_is_500_without_insert(authed: TestClient, db_path: Path) -> None:
    """fail_before_commit answers 500 and commits nothing (form and API)."""
    authed.put("/api/faults", json={"fail_before_commit": True})
    assert post_order(authed, reference="FB").status_code == 500
    api = authed.post("/api/orders", json={"item": "a", "quantity": 1, "reference": "FB"})
    assert api.status_code == 500
    assert SandboxDB(db_path).list_orders("FB") == []


def test_fail_after_commit_is_503_with_insert(authed: TestClient, db_path: Path) -> None:
    """fail_after_commit commits the order and then answers 503 (form and API)."""
    authed.put("/api/faults", json={"fail_after_commit": True})
    assert post_order(authed, reference="FA").status_code == 503
    api = authed.post("/api/orders", json={"item": "a", "quantity": 1, "reference": "FA"})
    assert api.status_code == 503
    assert len(SandboxDB(db_path).list_orders("FA")) == 2


def test_times_knob_counts_down_and_resets(authed: TestClient) -> None:
    """times=N applies the fault knobs to the next N order POSTs only, then resets them (not dedupe)."""
    faults = authed.put("/api/faults", json={"fail_before_commit": True, "times": 2, "dedupe": True})
    assert faults.json()["times"] == 2
    assert post_order(authed, reference="T").status_code == 500
    assert authed.get("/api/faults").json()["times"] == 1
    assert post_order(authed, reference="T").status_code == 500
    after = authed.get("/api/faults").json()
    assert after["fail_before_commit"] is False and after["times"] is None and after["dedupe"] is True
    assert post_order(authed, reference="T").status_code == 303


def test_faults_api_validates_persists_and_resets(client: TestClient, db_path: Path) -> None:
    """PUT /api/faults validates knobs, persists them in the DB; DELETE resets them."""
    assert client.get("/api/faults").json()["delay_before_commit"] == 0.0
    assert client.put("/api/faults", json={"bogus": 1}).status_code == 400
    assert client.put("/api/faults", json={"drop_after_commit": "yes"}).status_code == 400
    assert client.put("/api/faults", json={"times": 0}).status_code == 400
    resp = client.put("/api/faults", json={"delay_after_commit": 0.5})
    assert resp.status_code == 200 and resp.json()["delay_after_commit"] == 0.5
    assert SandboxDB(db_path).get_faults().delay_after_commit == 0.5
    assert client.delete("/api/faults").json()["delay_after_commit"] == 0.0


def test_reset_api_clears_orders_and_faults(authed: TestClient) -> None:
    """POST /api/reset deletes every order and resets the faults."""
    post_order(authed, reference="R1")
    authed.put("/api/faults", json={"dedupe": True})
    assert authed.post("/api/reset").status_code == 200
    assert authed.get("/api/orders").json()["orders"] == []
    assert authed.get("/api/faults").json()["dedupe"] is False


def test_drop_without_uvicorn_raises_after_commit(db_path: Path) -> None:
    """Outside serve() a drop cannot happen: the app raises after committing."""
    with TestClient(create_app(db_path), follow_redirects=False) as c:
        login(c)
        c.put("/api/faults", json={"drop_after_commit": True})
        with pytest.raises(ConnectionDropUnsupported):
            post_order(c, reference="TCD")
        assert len(c.get("/api/orders", params={"reference": "TCD"}).json()["orders"]) == 1


# -- real server -----------------------------------------------------------------
@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    proc = start_sandbox(tmp_path_factory.mktemp("live") / "sandbox.db")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def sandbox(live: SandboxProcess) -> SandboxProcess:
    live.reset()
    return live


def http_client(proc: SandboxProcess) -> httpx.Client:
    return httpx.Client(base_url=proc.url, follow_redirects=False, trust_env=False, timeout=10)


def raw_post(
    proc: SandboxProcess,
    client: httpx.Client,
    path: str,
    body: bytes,
    content_type: str = "application/x-www-form-urlencoded",
) -> socket.socket:
    """Send a complete POST on a raw socket (with the client's cookies) and return the socket."""
    url = urlsplit(proc.url)
    cookies = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nCookie: {cookies}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection((url.hostname, url.port), timeout=5)
    sock.sendall(head.encode() + body)
    return sock


def test_start_sandbox_reports_clear_error(tmp_path: Path) -> None:
    """start_sandbox raises SandboxError with the output when the process cannot start."""
    with pytest.raises(SandboxError, match="exited before it was ready"):
        start_sandbox(tmp_path / "x.db", port=-5)


def test_drop_after_commit_is_a_network_error(sandbox: SandboxProcess) -> None:
    """drop_after_commit kills the connection without any response, yet the order is committed."""
    with http_client(sandbox) as c:
        login(c)
        token = order_csrf(c)
        sandbox.set_faults(drop_after_commit=True, times=2)
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            post_order(c, reference="DROP-FORM", csrf=token)
        assert len(sandbox.orders("DROP-FORM")) == 1
        sock = raw_post(
            sandbox, c, "/api/orders", b'{"item": "a", "quantity": 1, "reference": "DROP-API"}', "application/json"
        )
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""
        sock.close()
        assert data == b""  # not a single byte of HTTP came back
        assert len(sandbox.orders("DROP-API")) == 1
        assert sandbox.inflight()["inflight"] == 0
        assert post_order(c, reference="AFTER", csrf=token).status_code == 303  # times ran out


def test_disconnected_client_order_still_commits(sandbox: SandboxProcess) -> None:
    """A client that disconnects during delay_before_commit does not stop the later commit."""
    with http_client(sandbox) as c:
        login(c)
        token = order_csrf(c)
        sandbox.set_faults(delay_before_commit=0.8, times=1)
        sock = raw_post(sandbox, c, "/orders", f"item=a&quantity=1&reference=GHOST&csrf_token={token}".encode())
        sandbox.wait_for_inflight(1, timeout=5)
        sock.close()
        assert sandbox.orders("GHOST") == []  # not committed yet...
        (order,) = sandbox.wait_for_orders("GHOST", 1, timeout=5)  # ...but it lands later
        assert order["reference"] == "GHOST"
        deadline = time.monotonic() + 5
        while sandbox.inflight()["inflight"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sandbox.inflight()["inflight"] == 0


def test_inflight_counts_received_and_unfinished_posts(sandbox: SandboxProcess) -> None:
    """/api/inflight counts order POSTs that were received and have not finished yet."""
    with http_client(sandbox) as c:
        login(c)
        token = order_csrf(c)
        before = sandbox.inflight()
        sandbox.set_faults(delay_before_commit=0.5, times=2)
        statuses: list[int] = []

        def submit(ref: str) -> None:
            with http_client(sandbox) as other:
                other.cookies.update(c.cookies)
                statuses.append(post_order(other, reference=ref, csrf=token).status_code)

        threads = [threading.Thread(target=submit, args=(f"IF-{i}",)) for i in range(2)]
        for t in threads:
            t.start()
        during = sandbox.wait_for_inflight(2, timeout=5)
        assert during["received"] - before["received"] == 2
        for t in threads:
            t.join(10)
        assert statuses == [303, 303]
        assert sandbox.inflight() == {"inflight": 0, "received": before["received"] + 2}


def test_state_survives_sandbox_kill_and_restart(tmp_path: Path) -> None:
    """Orders, faults and login sessions persist across a killed and restarted sandbox."""
    db = tmp_path / "persist.db"
    first = start_sandbox(db)
    try:
        with http_client(first) as c:
            login(c)
            assert post_order(c, reference="KEEP").status_code == 303
            first.set_faults(dedupe=True, delay_after_commit=0.05)
            cookies = dict(c.cookies)
    finally:
        first.kill()
    second = start_sandbox(db)
    try:
        assert [o["reference"] for o in second.orders()] == ["KEEP"]
        faults = second.faults()
        assert faults["dedupe"] is True and faults["delay_after_commit"] == 0.05
        with http_client(second) as c:
            c.cookies.update(cookies)
            assert c.get("/orders/new").status_code == 200  # session still valid
            resp = post_order(c, reference="KEEP")  # dedupe knob survived the restart
            assert resp.headers["location"] == f"/orders/{second.orders()[0]['id']}"
    finally:
        second.stop()
