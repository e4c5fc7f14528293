"""``browserworker mcp``: the durable agent tools of :mod:`browserworker.agent` served over MCP
(the official SDK, installed with ``pip install browserworker[mcp]``).

``_server`` builds the server and its tools; :func:`serve` runs it over stdio or streamable HTTP.
"""

from typing import TYPE_CHECKING

from .._lazy import face

if TYPE_CHECKING:  # the names of this face; each loads on first use (browserworker._lazy)
    from ._serve import LOOPBACK, serve, start
    from ._server import INSTRUCTIONS, build_server

__getattr__, __dir__ = face(__name__)

__all__ = ["INSTRUCTIONS", "LOOPBACK", "build_server", "serve", "start"]
