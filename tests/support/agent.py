"""Playing the agent: an MCP client of ``browserworker mcp`` (in memory, or a real stdio
subprocess), and the calls an agent makes to sign in to the sandbox shop and place an order."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

BW = str(Path(sys.executable).with_name("browserworker"))


def answer_of(result: CallToolResult) -> Any:
    """A tool's answer: its structured content, else its first text."""
    if result.structured_content is not None:
        data = result.structured_content
        return data["result"] if set(data) == {"result"} else data
    first = result.content[0] if result.content else None
    return getattr(first, "text", first)


class Agent:
    """An MCP client with the two things a test asks of a call: its answer, or its error."""

    def __init__(self, client: Client, service: Any = None) -> None:
        self.client = client
        self.service = service  # the AgentService behind an in-memory client, for a look behind the tools

    async def call(self, tool: str, **args: Any) -> Any:
        result = await self.client.call_tool(tool, args)
        assert not result.is_error, f"{tool} failed: {answer_of(result)}"
        return answer_of(result)

    async def error(self, tool: str, **args: Any) -> str:
        result = await self.client.call_tool(tool, args)
        assert result.is_error, f"{tool} did not fail: {answer_of(result)}"
        return str(answer_of(result))

    async def sign_in(self, base_url: str, user: str = "demo", password: str = "demo") -> str:
        """Open a session at the shop's login form and sign in (an idempotent submit): its run id."""
        opened = await self.call("open_session", site=f"{base_url}/login?next=/orders/new")
        run_id = str(opened["run_id"])
        await self.call("fill", run_id=run_id, selector="#username", value=user)
        await self.call("fill", run_id=run_id, selector="#password", value=password)
        signed = await self.call("submit", run_id=run_id, selector="#login", idempotent=True)
        assert signed["url"].endswith("/orders/new"), signed
        return run_id

    async def fill_order(self, run_id: str, reference: str, item: str = "tea") -> None:
        await self.call("fill", run_id=run_id, selector="#item", value=item)
        await self.call("fill", run_id=run_id, selector="#reference", value=reference)


def order_verify(reference: str) -> dict[str, Any]:
    """The verifier an agent declares for an order: the shop's order API, by reference."""
    return {"get": f"/api/orders?reference={reference}", "path": "orders"}


@contextlib.asynccontextmanager
async def stdio_agent(
    db: Path | str, *args: str, env: dict[str, str] | None = None, elicitation_callback: Any = None
) -> AsyncIterator[Agent]:
    """``browserworker mcp --db DB ARGS`` launched as a desktop client would (stdio); given
    ``elicitation_callback``, a client that asks its person what the server asks."""
    merged = {k: v for k, v in os.environ.items() if k.startswith(("BROWSERWORKER_", "PATH", "HOME", "PYTHON"))}
    merged.pop("BROWSERWORKER_FAULTS", None)
    merged.update(env or {})
    params = StdioServerParameters(command=BW, args=["mcp", "--db", str(db), *args], env=merged)
    async with Client(params, elicitation_callback=elicitation_callback) as client:
        yield Agent(client)


def kill_servers(db: Path | str) -> None:
    """SIGKILL what is left of a server of ``db`` (a server a fault point did not kill)."""
    for pid in _servers(str(db)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _servers(db: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in cmdline and db.encode() in cmdline:
            found.append(int(entry.name))
    return found


async def gone(db: Path | str, timeout: float = 30.0) -> bool:
    """Whether every server of ``db`` has exited (awaited on a pidfd each, up to ``timeout`` seconds)."""
    loop = asyncio.get_running_loop()
    for pid in _servers(str(db)):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        exited = asyncio.Event()
        loop.add_reader(fd, exited.set)
        try:
            await asyncio.wait_for(exited.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    return True


def http_server(db: Path | str, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    """``browserworker mcp --db DB --http --port PORT ARGS`` on a free port, once it listens."""
    from tests.support.pg_cluster import free_port

    port = free_port()
    proc = subprocess.Popen(
        [BW, "mcp", "--db", str(db), "--http", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 30.0
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)  # no event to await: the port opens when uvicorn has bound it


def stop_server(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(timeout=30)
