"""The sandbox: a small but real order shop that plays a downstream system.

It persists to its own SQLite file, uses cookie sessions and CSRF tokens,
answers form POSTs with 303 redirects (or a 200 re-render listing ``.error``
problems), and has persisted fault knobs -- delays, failures and real TCP
drops around the commit -- for demos and tests of the browser-automation kit.

Public API::

    create_app(db_path, *, dedupe=False) -> Starlette
    serve(host="127.0.0.1", port=8800, db_path="sandbox.db", *, dedupe=False, ready=None)
    SandboxDB(path)

Run it with ``python -m browserworker.sandbox --port 8800 --db sandbox.db``;
:mod:`browserworker.sandbox.testing` starts it as a subprocess for tests.
"""

from __future__ import annotations

from .app import create_app
from .db import Faults, Order, SandboxDB
from .server import serve

__all__ = ["Faults", "Order", "SandboxDB", "create_app", "serve"]
