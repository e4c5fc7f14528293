"""Running the MCP server: over stdio (a client launched this process), or streamable HTTP on
``host:port``. Beyond loopback every HTTP request must carry the console's operator token
(``Authorization: Bearer TOKEN``): the tools drive a browser and submit forms."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..agent import AgentPolicy, AgentService
from ..console import Keys, check_start, keys_file, load_keys
from ..store.base import Store
from ._server import build_server

__all__ = ["LOOPBACK", "serve", "start"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class _TokenGate:
    """Refuses (401) an HTTP request without the operator's bearer token."""

    def __init__(self, app: ASGIApp, keys: Keys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = Request(scope).headers.get("authorization", "")
            token = header[7:] if header.lower().startswith("bearer ") else ""
            if not token or not hmac.compare_digest(self.keys.role_of(token) or "", "operator"):
                response = PlainTextResponse("an operator token is required (Authorization: Bearer TOKEN)", 401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def serve(
    service: AgentService,
    *,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8765,
    keys: Keys | None = None,
    ask_in_client: bool = False,
) -> None:
    """Serve ``service`` until the client goes away (stdio) or the process is stopped (HTTP); then
    hand every live session back and close the browser. ``ask_in_client``: as :func:`build_server`."""
    server = build_server(service, ask_in_client=ask_in_client)

    async def stdio() -> None:
        try:
            await server.run_stdio_async()
        finally:
            await service.aclose()

    async def streamable_http() -> None:
        import uvicorn

        app: Any = server.streamable_http_app(host=host)
        if host not in LOOPBACK:
            if keys is None:
                raise ValueError("serving beyond loopback needs the console's keys")
            app = _TokenGate(app, keys)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        try:
            await uvicorn.Server(config).serve()
        finally:
            await service.aclose()

    anyio.run(streamable_http if http else stdio)


def start(
    open_store: Callable[[], Store],
    *,
    db: str,
    evidence_dir: Path,
    policy: AgentPolicy,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8765,
    ask_in_client: bool = False,
    say: Callable[[str], None] = lambda line: None,
) -> None:
    """What ``browserworker mcp`` does: refuse an HTTP start beyond loopback without both console
    tokens (before the store is opened: a refused start writes nothing), open the store, and
    serve an :class:`AgentService` over it until the client or the process stops."""
    beyond = http and host not in LOOPBACK
    if beyond:
        check_start(host)
    store = open_store()
    keys = load_keys(keys_file(db, "://" in db))[0] if beyond else None
    service = AgentService(store, evidence_dir=evidence_dir, policy=policy)
    say(f"browserworker mcp on {f'http://{host}:{port}/mcp' if http else 'stdio'} ({store.location})")
    serve(service, http=http, host=host, port=port, keys=keys, ask_in_client=ask_in_client)
