"""The operator console, served for real (uvicorn on a free port) over a SQLite store: a real
crash parked for review and decided in Chromium, then its security promises over HTTP."""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from browserworker.console.app import create_app
from browserworker.console.auth import load_keys
from browserworker.control import enqueue
from browserworker.control._approvals import list_approvals
from browserworker.flow import load_flow
from browserworker.runtime._browser import find_chromium
from browserworker.store import SQLStore, open_store
from browserworker.store.records import NewRun
from tests.support.bw import BW
from tests.support.fleet import start_worker
from tests.support.paths import ROOT, TEST_FLOWS
from tests.support.processes import sigkill, wait_until_gone

pytestmark = [pytest.mark.browser]

OPERATOR, VIEWER = "op-token-" + "a" * 24, "ro-token-" + "b" * 24
ARTIFACTS = ROOT / "test-results" / "console"


@dataclass
class Server:
    url: str
    db: Path
    store: SQLStore


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One console over one database for the module (each test uses runs of its own)."""
    db = tmp_path_factory.mktemp("console") / "browserworker.db"
    store = open_store(db)
    assert isinstance(store, SQLStore)
    keys, _ = load_keys(
        db.with_name("keys"), {"BROWSERWORKER_CONSOLE_TOKEN": OPERATOR, "BROWSERWORKER_CONSOLE_READONLY_TOKEN": VIEWER}
    )
    app = create_app(store, keys, evidence_dir=db.with_name(db.name + ".evidence"), recordings_dir=db.parent / "rec")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert uv.started
    yield Server(f"http://127.0.0.1:{port}", db, store)
    uv.should_exit = True
    thread.join(10)
    store.close()


def signed_in(server: Server, token: str, name: str = "ann") -> httpx.Client:
    client = httpx.Client(base_url=server.url)
    done = client.post("/login", data={"name": name, "token": token})
    assert done.status_code == 303, done.text
    return client


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def test_an_operator_decides_a_crashed_run_and_a_worker_finishes_it(server: Server, shop: Any, run_id: str) -> None:
    """A run killed with the order's reply lost is parked for review; an operator signs in (the
    overview refreshes itself when a run arrives), sees it with its screenshot and outbox,
    presses Done with a result; the decision is journaled with her name, a worker finishes
    the run, and the shop holds exactly one order. No page logs a script or CSP error."""
    from playwright.sync_api import expect, sync_playwright

    bw = BW(db=server.db)
    inputs = ("--input", f"base_url={shop.url}", "--input", "item=tea", "--run-id", run_id)
    killed = bw.run_flow("place_order_unverified.py", *inputs, env={"BROWSERWORKER_FAULTS": "reply_lost:submit=kill"})
    assert killed.returncode == -9
    parked = bw.run_flow("place_order_unverified.py", "--run-id", run_id)
    assert parked.returncode == 3, parked.stderr  # NEEDS_REVIEW
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(find_chromium()))
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []  # a CSP violation, a script error
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server.url + "/review")
        assert page.url.endswith("/login")
        page.fill("input[name=name]", "Ann Operator")
        page.fill("input[name=token]", OPERATOR)
        page.click("button[type=submit]")
        page.wait_for_url(server.url + "/")
        page.screenshot(path=str(ARTIFACTS / "console-overview.png"), full_page=True)
        server.store.create_run(NewRun(id=f"{run_id}-later", flow_name="later", inputs={}, queue="arrived-later"))
        page.wait_for_selector("a:text-is('arrived-later')", timeout=15_000)  # the page refreshed itself
        page.click("nav >> text=Review")
        item = page.locator("article.review", has=page.locator(f"a:text-is('{run_id}')"))
        # expect waits: the click may return before the review page is parsed
        expect(item.locator("text=submit (attempt 1)")).to_be_visible()
        expect(item.locator(f"code:text-is('{run_id}/submit')")).to_be_visible()
        shot = item.locator("figure.shot img")
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=shot.element_handle())
        page.screenshot(path=str(ARTIFACTS / "console-review.png"), full_page=True)
        page.click(f"a:text-is('{run_id}')")
        outbox = page.locator("table.outbox")
        assert "POST" in outbox.inner_text() and "/orders" in outbox.inner_text()
        page.screenshot(path=str(ARTIFACTS / "console-run.png"), full_page=True)
        page.goto(server.url + "/review")
        item.locator("textarea[name=result]").fill('{"order_id": "checked by hand"}')
        page.once("dialog", lambda d: d.accept())
        item.locator("button[value=done]").click()
        page.wait_for_selector(".flash")
        assert "done by Ann Operator; now QUEUED" in page.inner_text(".flash")
        page.goto(server.url + "/runs")
        page.screenshot(path=str(ARTIFACTS / "console-runs.png"), full_page=True)
        browser.close()
    assert not errors, errors
    worker = bw.run("worker", "--once", "--db", str(server.db))
    assert worker.returncode == 0, worker.stderr
    run = server.store.get_run(run_id)
    assert run is not None and run.state == "SUCCEEDED"
    [decided] = [e for e in server.store.events(run_id) if e.decision == "human:done"]
    assert decided.worker == "Ann Operator" and decided.detail["who"] == "Ann Operator"
    assert len(shop.orders(f"{run_id}/submit")) == 1


def _seed(server: Server, prefix: str, n: int) -> None:
    with server.store.group():
        for i in range(n):
            server.store.create_run(
                NewRun(
                    id=f"{prefix}-{i:04d}", flow_name="bulk" if i % 2 else "other", inputs={"i": i}, queue=f"q-{prefix}"
                )
            )


def test_without_a_session_there_is_no_page_and_no_action(server: Server) -> None:
    """No cookie, a forged cookie or a wrong token: every page sends to the login, every action
    is refused, and no run's data is in any answer."""
    _seed(server, "anon", 1)
    client = httpx.Client(base_url=server.url)
    for path in ("/", "/runs", "/runs/anon-0000", "/review", "/runs/anon-0000/screenshot/0"):
        answer = client.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == "/login", path
    assert client.post("/runs/action", data={"action": "cancel", "run": "anon-0000"}).status_code == 401
    assert client.post("/review/resolve", data={"run_id": "anon-0000", "decision": "done"}).status_code == 401
    client.cookies.set("bw_console", "eyJuIjoiZXZlIiwiciI6Im9wZXJhdG9yIn0.forged.sig")
    assert client.get("/runs").status_code == 303
    refused = client.post("/login", data={"name": "eve", "token": OPERATOR + "x"})
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    assert server.store.get_run("anon-0000").state == "QUEUED"  # type: ignore[union-attr]


def test_the_read_only_role_sees_but_cannot_act_and_cross_site_posts_are_refused(server: Server) -> None:
    """A viewer sees runs without buttons and is refused (403) when it posts anyway; an operator's
    action from another site (Origin, Sec-Fetch-Site) or without the session's CSRF token is refused."""
    _seed(server, "ro", 2)
    viewer = signed_in(server, VIEWER, "vic")
    page = viewer.get("/runs", params={"q": "ro-"})
    assert "ro-0000" in page.text and "Cancel</button>" not in page.text and "(read-only)" in page.text
    assert (
        viewer.post("/runs/action", data={"action": "cancel", "run": "ro-0000", "csrf": csrf_of(page)}).status_code
        == 403
    )
    assert (
        viewer.post(
            "/review/resolve", data={"run_id": "ro-0001", "step": "s", "decision": "failed", "csrf": csrf_of(page)}
        ).status_code
        == 403
    )
    operator = signed_in(server, OPERATOR)
    token = csrf_of(operator.get("/runs"))
    form = {"action": "cancel", "run": "ro-0000", "csrf": token}
    assert operator.post("/runs/action", data=form, headers={"Origin": "http://evil.example"}).status_code == 403
    assert operator.post("/runs/action", data=form, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert operator.post("/runs/action", data={**form, "csrf": "guess"}).status_code == 403
    assert server.store.get_run("ro-0000").state == "QUEUED"  # type: ignore[union-attr]
    done = operator.post("/runs/action", data=form, headers={"Origin": server.url, "Sec-Fetch-Site": "same-origin"})
    assert done.status_code == 303 and server.store.get_run("ro-0000").state == "CANCELLED"  # type: ignore[union-attr]


def test_what_a_run_holds_is_shown_as_text_with_strict_headers(server: Server) -> None:
    """A run whose flow, inputs, step id, result and error are markup shows them as text; secret
    inputs are masked, in the result too; every page has a strict CSP, no framing, and is not cached; a link cannot put
    words of its own on a page (the note after an action is signed)."""
    evil = "<script>alert(1)</script>"
    from browserworker.states import AttemptState, RunState
    from browserworker.store.records import Owner

    store = server.store
    store.create_run(
        NewRun(id="xss-1", flow_name=evil, inputs={"note": evil, "password": "s3cret-pw"}, secret_fields=("password",))
    )
    run = store.claim_run("xss-1", Owner("w", "h", 1), 30)
    assert run is not None
    attempt = store.begin_attempt("xss-1", run.lease_epoch, evil, "action", f"xss-1/{evil}", "fp")
    store.finish_attempt(
        attempt,
        run.lease_epoch,
        AttemptState.SUCCEEDED,
        decided_by="return",
        result={"said": evil, "echo": "s3cret-pw"},
    )
    store.set_run_state("xss-1", run.lease_epoch, RunState.RUNNING)
    store.set_run_state("xss-1", run.lease_epoch, RunState.FAILED, error=evil)
    operator = signed_in(server, OPERATOR)
    for path in ("/runs/xss-1", "/runs?q=xss-1"):
        page = operator.get(path)
        assert page.status_code == 200
        assert evil not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert "s3cret-pw" not in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
        assert "<script>" not in page.text.replace('<script src="/static/console.js" defer></script>', "")
    result = operator.get("/runs/xss-1").text
    assert "said&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;" in result  # the result, as it is
    assert "call 555" not in operator.get("/runs", params={"done": "Your session expired: call 555"}).text


def test_filters_search_pages_and_bulk_cancel_on_a_thousand_runs_are_fast(server: Server) -> None:
    """With 1,000 runs: filtering, searching, paging and cancelling a page of 50 selected runs
    each answer in well under a second."""
    _seed(server, "k", 1000)
    operator = signed_in(server, OPERATOR)
    took = {}

    def timed(name: str, call: Any) -> httpx.Response:
        start = time.perf_counter()
        answer = call()
        took[name] = time.perf_counter() - start
        return answer

    page = timed("filter", lambda: operator.get("/runs", params={"queue": "q-k", "flow": "bulk", "state": "QUEUED"}))
    assert "500 runs" in page.text
    assert "1 runs" in timed("search", lambda: operator.get("/runs", params={"q": "k-0777"})).text
    last = timed("page", lambda: operator.get("/runs", params={"queue": "q-k", "page": "20"}))
    assert "k-0000" in last.text and "page 20 of 20" in last.text
    ids = re.findall(r'name="run" value="(k-\d+)"', page.text)
    assert len(ids) == 50
    done = timed(
        "bulk cancel",
        lambda: operator.post(
            "/runs/action", data={"action": "cancel", "run": ids, "csrf": csrf_of(page), "back": "/runs"}
        ),
    )
    assert done.status_code == 303 and "50 runs cancelled" in operator.get(done.headers["location"]).text
    assert server.store.search_runs(state="CANCELLED", queue="q-k", flow="bulk")[1] == 50  # type: ignore[arg-type]
    assert max(took.values()) < 1.0, took
    print("console timings:", {k: f"{v * 1000:.0f} ms" for k, v in took.items()})


def test_every_page_renders_and_acts_on_both_stores(any_store: SQLStore, tmp_path: Path) -> None:
    """Over SQLite and PostgreSQL alike, every page renders for an operator, a live refresh gets
    the page's live region alone, and a cancel from a run's page is journaled with her name."""
    import asyncio

    any_store.create_run(NewRun(id="both-1", flow_name="f", inputs={"n": 1}, queue="q"))
    keys, _ = load_keys(
        tmp_path / "keys", {"BROWSERWORKER_CONSOLE_TOKEN": OPERATOR, "BROWSERWORKER_CONSOLE_READONLY_TOKEN": VIEWER}
    )
    app = create_app(any_store, keys, evidence_dir=tmp_path / "evidence", recordings_dir=tmp_path)

    async def use() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            assert (await client.post("/login", data={"name": "ann", "token": OPERATOR})).status_code == 303
            for path in ("/", "/runs?state=QUEUED&flow=f&queue=q&q=both", "/runs/both-1", "/review"):
                assert (await client.get(path)).status_code == 200, path
            live = await client.get("/", headers={"X-Refresh": "1"})  # what the page's script re-fetches
            assert live.text.startswith('<div id="live"') and "<html" not in live.text
            page = await client.get("/runs/both-1")
            done = await client.post("/runs/action", data={"action": "cancel", "run": "both-1", "csrf": csrf_of(page)})
            assert done.status_code == 303

    asyncio.run(use())
    [cancelled] = [e for e in any_store.events("both-1") if e.decision == "cancelled"]
    assert cancelled.worker == "ann"


def test_the_console_command_prints_new_tokens_once_and_keeps_only_their_hashes(tmp_path: Path) -> None:
    """`browserworker console` refuses a non-loopback --host without a token from the
    environment; at its first start it prints two new tokens once and keeps only their hashes,
    in a 0600 file; the printed operator token signs in; a second start prints none."""
    import json
    import signal

    from click.testing import CliRunner

    from browserworker.cli import main

    bw = BW(db=tmp_path / "browserworker.db")
    open_store(bw.db).close()
    refused = CliRunner().invoke(
        main, ["console", "--db", str(bw.db), "--host", "0.0.0.0"], env={"BROWSERWORKER_CONSOLE_TOKEN": None}
    )
    assert refused.exit_code == 2 and "not a loopback address" in refused.output
    assert not (tmp_path / "browserworker.db.console-keys").exists()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    printed = []
    for _ in range(2):
        proc = bw.start("console", "--db", str(bw.db), "--port", str(port))
        assert proc.stderr is not None
        lines = []
        while not lines or "browserworker console on" not in lines[-1]:
            lines.append(proc.stderr.readline())
            assert lines[-1], lines
        printed.append([line.rsplit(" ", 1)[1].strip() for line in lines if "token (shown once" in line])
        if len(printed) == 1:
            operator = printed[0][0]
            client = httpx.Client(base_url=f"http://127.0.0.1:{port}")
            deadline = time.monotonic() + 10
            while True:
                try:
                    answer = client.post("/login", data={"name": "ann", "token": operator})
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            assert answer.status_code == 303 and client.get("/").status_code == 200
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert len(printed[0]) == 2 and printed[1] == []
    keys = tmp_path / "browserworker.db.console-keys"
    assert keys.stat().st_mode & 0o777 == 0o600
    text = keys.read_text()
    assert all(token not in text for token in printed[0]) and set(json.loads(text)["hashes"]) == {"operator", "viewer"}


def test_an_operator_approves_one_effect_and_rejects_another(
    server: Server, shop: Any, run_id: str, tmp_path: Path
) -> None:
    """Two runs of an approve=True effect wait with their request and a screenshot (the secret
    item masked on the page): one held by a worker that is SIGKILLed while it waits, one parked.
    The read-only role cannot decide; an operator approves the first in Chromium and rejects the
    other over HTTP: another worker sends the approved order once, the rejected run is FAILED
    with who and why, and the shop never sees its order."""
    from playwright.sync_api import sync_playwright

    bw = BW(db=server.db)
    flow = TEST_FLOWS / "approved_order.py"
    yes, no = f"{run_id}-yes", f"{run_id}-no"
    enqueue(server.store, load_flow(flow), {"base_url": shop.url, "item": "secret-tea-7f3a"}, run_id=yes)
    tag = uuid.uuid4().hex
    holder = start_worker(
        server.db, env={"BROWSERWORKER_APPROVAL_HOLD": "300", "BW_TEST_TAG": tag}, log=tmp_path / "holder.log"
    )
    deadline = time.monotonic() + 60
    while not any(a.run_id == yes for a in list_approvals(server.store)):
        assert time.monotonic() < deadline and holder.poll() is None, "the worker never asked for approval"
        time.sleep(0.05)
    sigkill(holder)
    wait_until_gone(tag)
    assert shop.orders(f"{yes}/submit") == []
    parked = bw.run(
        "run",
        str(flow),
        "--db",
        str(server.db),
        "--run-id",
        no,
        "--input",
        f"base_url={shop.url}",
        "--input",
        "item=secret-cake-91b2",
        env={"BROWSERWORKER_APPROVAL_HOLD": "0"},
    )
    assert parked.returncode == 8, parked.stderr  # left awaiting approval
    viewer = signed_in(server, VIEWER, "vic")
    listed = viewer.get("/approvals")
    assert listed.status_code == 200 and yes in listed.text and no in listed.text
    assert "secret-tea-7f3a" not in listed.text and "secret-cake-91b2" not in listed.text
    assert "Approve: send it" not in listed.text
    refused = viewer.post(
        "/approvals/decide",
        data={"csrf": csrf_of(viewer.get("/runs")), "run_id": no, "step": "submit", "decision": "approve"},
        headers={"Origin": server.url, "Sec-Fetch-Site": "same-origin"},
    )
    assert refused.status_code == 403
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(find_chromium()))
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(server.url + "/login")
        page.fill("input[name=name]", "Ann Operator")
        page.fill("input[name=token]", OPERATOR)
        page.click("button[type=submit]")
        page.wait_for_url(server.url + "/")
        page.click("nav >> text=Approvals")
        item = page.locator("article.review", has=page.locator(f"a:text-is('{yes}')"))
        assert f"POST {shop.url}/orders" in item.inner_text()
        shot = item.locator("figure.shot img")
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=shot.element_handle())
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console-approvals.png"), full_page=True)
        page.once("dialog", lambda d: d.accept())
        item.locator("button[value=approve]").click()
        page.wait_for_selector(".flash")
        assert f"run {yes}: submit approved by Ann Operator" in page.inner_text(".flash")
        browser.close()
    operator = signed_in(server, OPERATOR, "Bob Operator")
    rejected = operator.post(
        "/approvals/decide",
        data={
            "csrf": csrf_of(operator.get("/approvals")),
            "run_id": no,
            "step": "submit",
            "decision": "reject",
            "reason": "wrong shop",
        },
        headers={"Origin": server.url, "Sec-Fetch-Site": "same-origin"},
    )
    assert rejected.status_code == 303
    worker = bw.run("worker", "--once", "--db", str(server.db))
    assert worker.returncode == 0, worker.stderr
    done, failed = server.store.get_run(yes), server.store.get_run(no)
    assert done is not None and done.state == "SUCCEEDED"
    assert (
        failed is not None
        and failed.state == "FAILED"
        and "rejected by Bob Operator: wrong shop" in (failed.error or "")
    )
    assert len(shop.orders(f"{yes}/submit")) == 1 and shop.orders(f"{no}/submit") == []
