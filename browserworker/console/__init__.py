"""The operator console: a small web app over the store (``browserworker console``).

Server-rendered pages (Jinja templates, autoescaped) with one small script of its own for
live refresh and confirm dialogs: no build step, nothing fetched from elsewhere. Every page
needs a login (:mod:`.auth`); each page is one module of :mod:`.pages` and one template.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError
from ..store.base import Store
from .auth import ENV_READONLY_TOKEN, ENV_TOKEN, Keys, Tokens, check_tokens, load_keys

__all__ = [
    "ENV_READONLY_TOKEN",
    "ENV_TOKEN",
    "Keys",
    "Tokens",
    "check_host",
    "check_start",
    "keys_file",
    "load_keys",
    "serve",
]


def keys_file(db: str, is_url: bool) -> Path:
    """Where the console keeps its token hashes: beside a database file, else in the working directory."""
    if is_url:
        return Path("browserworker.console-keys")
    path = Path(db)
    return path.parent / f"{path.name}.console-keys"


def check_host(host: str, explicit: bool) -> None:
    """Refuse to listen beyond this machine unless both tokens were set ``explicit``-ly (in the
    environment): a token generated and printed on a terminal is too easy to lose track of."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not explicit:
        raise UsageError(
            f"--host {host} is not a loopback address: set ${ENV_TOKEN} and "
            f"${ENV_READONLY_TOKEN} explicitly, and put TLS in front of it"
        )


def check_start(host: str, environ: Mapping[str, str] | None = None) -> None:
    """Everything that refuses a start and needs no file and no database: the tokens given in
    the environment, and the address to listen on. Called first, so a refused start writes nothing."""
    env = os.environ if environ is None else environ
    check_tokens(env)
    check_host(host, bool(env.get(ENV_TOKEN) and env.get(ENV_READONLY_TOKEN)))


def serve(store: Store, keys: Keys, *, host: str, port: int, evidence_dir: Path, recordings_dir: Path) -> None:
    """Serve the console until interrupted (Ctrl-C)."""
    import uvicorn

    from .app import create_app

    check_host(host, keys.explicit)
    store.console_sessions.end_stale({role: keys.token_key(role) for role in keys.hashes})  # a changed token's
    app = create_app(store, keys, evidence_dir=evidence_dir, recordings_dir=recordings_dir)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, server_header=False)
