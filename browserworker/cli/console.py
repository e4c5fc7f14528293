"""``console``: the operator console, a web app over the store."""

from __future__ import annotations

from pathlib import Path

import click

from . import process
from .app import main
from .invocation import invocation
from .options import db_option


@main.command("console")
@db_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (beyond loopback only with both tokens set in the environment).",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8470, show_default=True, help="Port to listen on.")
@click.option(
    "--recordings",
    "recordings_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("recordings"),
    show_default=True,
    help="Where recordings of runs are (run --record).",
)
def console_command(host: str, port: int, recordings_dir: Path) -> None:
    """Serve the operator console: queues, health, runs, review (login with a token).

    Tokens: $BROWSERWORKER_CONSOLE_TOKEN (operator: sees and acts) and
    $BROWSERWORKER_CONSOLE_READONLY_TOKEN (sees only); without them, tokens are generated at
    first start, printed once, and only their hashes kept (a 0600 file beside the database).
    A token is at least 16 characters; beyond loopback both must be set.
    """
    from ..console import check_start, keys_file, load_keys, serve

    check_start(host)  # a refused start writes nothing: no keys file, no database
    s = invocation()
    store = s.store(create=False)  # and a missing database too
    keys, fresh = load_keys(keys_file(s.db, s.is_url))
    for role, token in (("operator", fresh.operator), ("read-only", fresh.viewer)):
        if token:
            click.echo(f"console {role} token (shown once, keep it): {token}", err=True)
    click.echo(f"browserworker console on http://{host}:{port}/ ({s.location})", err=True)
    process.settle()
    serve(store, keys, host=host, port=port, evidence_dir=s.evidence_dir, recordings_dir=recordings_dir)
