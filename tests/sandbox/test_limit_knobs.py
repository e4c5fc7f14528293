"""The sandbox's knobs for budgets: order POSTs answered 429/503 with Retry-After the next N
times, and the tagged requests that show how many visitors are at the sandbox at once."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():  # starlette >= 1.x nags about httpx vs httpx2 on import
    warnings.filterwarnings("ignore", message=r".*httpx2")
    from starlette.testclient import TestClient  # noqa: E402

from browserworker.sandbox import create_app  # noqa: E402
from browserworker.sandbox.visits import most_at_once  # noqa: E402
from tests.support.shop import login, post_order  # noqa: E402


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    c = TestClient(create_app(tmp_path / "sandbox.db"))
    login(c)
    return c


def test_throttle_answers_the_next_posts_with_retry_after(client: TestClient) -> None:
    """throttle=N with throttle_times=K answers the next K order POSTs (form and API) with 429
    and Retry-After: N, taking no order and leaving `times` alone; then orders go through
    again. 503 can be asked for; throttle_tag throttles only the POSTs tagged so."""
    assert client.put("/api/faults", json={"throttle": 3, "throttle_times": 2}).status_code == 200
    first = post_order(client, reference="T-1")
    assert first.status_code == 429 and first.headers["retry-after"] == "3"
    api = client.post("/api/orders", json={"item": "w", "quantity": 1, "reference": "T-2"})
    assert api.status_code == 429 and api.headers["retry-after"] == "3"
    assert client.get("/api/orders").json()["orders"] == []
    assert client.get("/api/faults").json()["throttle"] == 0
    assert client.post("/api/orders", json={"item": "w", "quantity": 1, "reference": "T-3"}).status_code == 201
    client.put("/api/faults", json={"throttle": 7, "throttle_status": 503, "throttle_tag": "slow"})
    assert post_order(client, reference="T-4").status_code == 200  # untagged: not throttled (the order page)
    tagged = client.post(
        "/api/orders", json={"item": "w", "quantity": 1, "reference": "T-5"}, headers={"X-Sandbox-Tag": "slow"}
    )
    assert tagged.status_code == 503 and tagged.headers["retry-after"] == "7"
    for bad in ({"throttle_status": 500}, {"throttle": -1}, {"throttle_times": 0}, {"throttle_tag": ""}):
        assert client.put("/api/faults", json=bad).status_code == 400


def test_visits_report_who_was_at_the_sandbox_at_once(tmp_path: Path) -> None:
    """Tagged requests make up visits; the report counts the most visits of a tag overlapping
    at once (three slow requests in parallel: 3) and leaves untagged requests out."""
    app = create_app(tmp_path / "sandbox.db")
    client = TestClient(app)
    login(client)
    client.put("/api/faults", json={"delay_before_commit": 0.4})

    def visit(n: int) -> None:
        client.post(
            "/api/orders",
            json={"item": "w", "quantity": 1, "reference": f"V-{n}"},
            headers={"X-Sandbox-Tag": "shop", "X-Sandbox-Visit": f"run-{n}"},
        )

    threads = [threading.Thread(target=visit, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.get("/healthz", headers={"X-Sandbox-Tag": "other", "X-Sandbox-Visit": "x"})
    client.get("/healthz")
    report = client.get("/api/visits").json()["tags"]
    assert set(report) == {"shop", "other"}
    shop = report["shop"]
    assert shop["most_visits_at_once"] == 3 and shop["most_requests_at_once"] == 3
    assert sorted(shop["visits"]) == ["run-0", "run-1", "run-2"]
    assert all(r["status"] == 201 and r["end"] >= r["start"] for r in shop["requests"])
    client.delete("/api/visits")
    assert client.get("/api/visits").json() == {"tags": {}}


def test_most_at_once_counts_overlaps_not_touching_ends() -> None:
    """Spans that only touch do not overlap; nested and chained ones count as they overlap."""
    now = time.time()
    assert most_at_once([]) == 0
    assert most_at_once([(now, now + 1), (now + 1, now + 2)]) == 1
    assert most_at_once([(0, 10), (1, 2), (1.5, 3), (2.5, 4)]) == 3
