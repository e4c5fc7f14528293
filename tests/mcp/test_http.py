"""`browserworker mcp --http`: streamable HTTP on loopback for any client; beyond loopback only
with the console's tokens set, and then every request carries the operator's."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.agent import BW, http_server, stop_server
from tests.support.pg_cluster import free_port

OPERATOR = "operator-token-0123456789abcdef"
VIEWER = "viewer-token-0123456789abcdef00"


def test_http_on_loopback_serves_the_tools(tmp_path: Path) -> None:
    """A client connects by URL, lists the tools and calls one."""
    proc, port = http_server(tmp_path / "browserworker.db")
    try:

        async def talk() -> tuple[set[str], bool]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = {t.name for t in (await client.list_tools()).tools}
                result = await client.call_tool("status", {"run_id": "r-none"})
                return names, result.is_error

        names, refused = asyncio.run(talk())
    finally:
        stop_server(proc)
    assert {"open_session", "submit", "snapshot"} <= names and refused


def test_beyond_loopback_it_needs_both_tokens_and_then_the_operators_on_every_request(tmp_path: Path) -> None:
    """Without both console tokens in the environment a start beyond loopback is refused (exit 2,
    no database written); with them, a request without the operator's token (or with the
    read-only one) is 401, with it the tools answer."""
    db = tmp_path / "browserworker.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROWSERWORKER_CONSOLE")}
    refused = subprocess.run(
        [BW, "mcp", "--db", str(db), "--http", "--host", "0.0.0.0", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert refused.returncode == 2 and "not a loopback address" in refused.stderr, refused.stderr
    assert not db.exists()
    env.update({"BROWSERWORKER_CONSOLE_TOKEN": OPERATOR, "BROWSERWORKER_CONSOLE_READONLY_TOKEN": VIEWER})
    proc, port = http_server(db, "--host", "0.0.0.0", env=env)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {"accept": "application/json, text/event-stream"}
        assert httpx.post(url, json=hello, headers=headers).status_code == 401
        viewer = {**headers, "authorization": f"Bearer {VIEWER}"}
        assert httpx.post(url, json=hello, headers=viewer).status_code == 401

        async def talk() -> set[str]:
            auth = httpx2.AsyncClient(headers={"authorization": f"Bearer {OPERATOR}"})
            async with Client(streamable_http_client(url, http_client=auth)) as client:
                return {t.name for t in (await client.list_tools()).tools}

        names = asyncio.run(talk())
    finally:
        stop_server(proc)
    assert "submit" in names


pytestmark = pytest.mark.slow
