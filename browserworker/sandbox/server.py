"""Running the sandbox under uvicorn, with real connection drops.

``drop_after_commit`` must look like a network failure to the client (empty
response / connection reset), not like an HTTP error.  ASGI has no way to say
"close the socket without answering", so :class:`DroppingH11Protocol` -- a
thin subclass of uvicorn's h11 protocol -- puts a callable into each request's
``scope["extensions"]`` that aborts *this connection's* transport and marks the
request cycle as disconnected, so uvicorn neither writes whatever the app sends
afterwards nor synthesises a 500.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .app import create_app
from .core import DROP_EXTENSION

__all__ = ["DroppingH11Protocol", "serve"]

ASGIApp = Callable[[dict[str, Any], Any, Any], Any]


class DroppingH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a per-request "drop this connection" hook."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Wrap the ASGI app so every HTTP scope carries :data:`DROP_EXTENSION`."""
        super().__init__(*args, **kwargs)
        inner: ASGIApp = self.app

        async def app_with_drop(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope.get("type") == "http":
                extensions = dict(scope.get("extensions") or {})
                extensions[DROP_EXTENSION] = self._make_drop()
                scope["extensions"] = extensions
            await inner(scope, receive, send)

        self.app = app_with_drop

    def _make_drop(self) -> Callable[[], None]:
        # Bind to the transport/cycle of the request being dispatched right now
        # (the cycle is created just before the app task is started).
        transport = self.transport
        cycle = self.cycle

        def drop() -> None:
            if cycle is not None:
                cycle.disconnected = True  # uvicorn then ignores sends and won't send a 500
                cycle.keep_alive = False
            sock = transport.get_extra_info("socket")
            if sock is not None:
                try:  # make the close an RST (ERR_CONNECTION_RESET), never a polite FIN+response
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            transport.abort()

        return drop


class _ReadyServer(uvicorn.Server):
    """A uvicorn server that reports its real base URL once it is listening."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[str], None] | None) -> None:
        """Remember the ``ready`` callback."""
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start listening, then call ``ready(base_url)``."""
        await super().startup(sockets=sockets)
        if self.started and self._ready is not None and not self.should_exit:
            self._ready(self.base_url())

    def base_url(self) -> str:
        """``http://HOST:PORT`` of the first listening socket (real port for port 0)."""
        sock = self.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"


def serve(
    host: str = "127.0.0.1",
    port: int = 8800,
    db_path: str | Path = "sandbox.db",
    *,
    dedupe: bool = False,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Run the sandbox until interrupted (blocking).

    ``ready(base_url)`` is called once the socket is listening; with
    ``port=0`` the URL carries the port the OS actually bound.
    """
    app = create_app(db_path, dedupe=dedupe)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=DroppingH11Protocol,
        ws="none",
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    server = _ReadyServer(config, ready)
    asyncio.run(server.serve())
