"""``mcp``: the durable browser tools for AI agents, served over MCP; ``mcp export``: an agent's
session written as a flow file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import process
from .app import main
from .invocation import invocation
from .options import db_option

if TYPE_CHECKING:
    from ..agent import AgentPolicy


@main.group("mcp", invoke_without_command=True)
@db_option
@click.option("--http", is_flag=True, help="Serve streamable HTTP on --host:--port instead of stdio.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on with --http (beyond loopback, requests need the console's operator token).",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port for --http.")
@click.option("--approve-submits", is_flag=True, help="A person approves every submit before it is sent.")
@click.option(
    "--approve-site",
    "approve_sites",
    multiple=True,
    metavar="HOST",
    help="A person approves every submit on this host (host or host:port; repeatable).",
)
@click.option(
    "--approve-in-client",
    is_flag=True,
    help="Also ask the person in the agent's MCP client (where it can ask: elicitation) to approve a "
    "submit held for approval; the console can still decide. Only for clients that show such "
    "questions to a person: an agent answering its own would approve its own submits.",
)
@click.option(
    "--may-send",
    "may_send",
    multiple=True,
    metavar="RULE",
    help="What pages may send with no submit, as analytics posts or an autosave do: a URL glob, or "
    "'METHOD glob' (e.g. 'POST */api/event*'), either followed by a glob of the body (e.g. "
    "'WEBSOCKET */live* *validate*'); kept by each session opened (repeatable).",
)
@click.option(
    "--files",
    multiple=True,
    metavar="DIR",
    help="A directory the agent may choose files from for a page's file input (the upload tool; "
    "repeatable; none: no upload).",
)
@click.option(
    "--downloads",
    metavar="DIR",
    help="A directory the files an agent's clicks download are saved in (none: downloads are not kept).",
)
@click.option(
    "--ignore-https-errors",
    is_flag=True,
    help="Accept any TLS certificate (a local application's self-signed one); kept by each session opened.",
)
@click.option(
    "--console-url", metavar="URL", help="The console's address, for the links in answers (needs_review, approvals)."
)
@click.pass_context
def mcp_command(
    ctx: click.Context,
    http: bool,
    host: str,
    port: int,
    approve_submits: bool,
    approve_sites: tuple[str, ...],
    approve_in_client: bool,
    may_send: tuple[str, ...],
    files: tuple[str, ...],
    downloads: str | None,
    ignore_https_errors: bool,
    console_url: str | None,
) -> None:
    """Serve durable browser tools to an AI agent over MCP (stdio by default).

    Each session is a run (see `runs`, `show`, the console); each submit is an effect whose
    intent is journaled before the click, and a retried submit is answered from the journal,
    never clicked again. Needs the extra: pip install 'browserworker[mcp]'.
    """
    if ctx.invoked_subcommand is not None:
        return
    try:
        from ..mcp import start  # loads the SDK: a missing extra is said before anything starts
    except ImportError as exc:  # the SDK is an extra
        raise click.ClickException(
            f"the MCP server needs the extra: pip install 'browserworker[mcp]' ({exc})"
        ) from None
    if approve_in_client and not (approve_submits or approve_sites):
        raise click.UsageError(
            "--approve-in-client asks about submits held for approval: give --approve-submits or --approve-site too"
        )
    policy = _policy(approve_submits, approve_sites, may_send, files, downloads, ignore_https_errors, console_url)
    s = invocation()
    process.settle()
    start(
        s.store,
        db=s.db,
        evidence_dir=s.evidence_dir,
        policy=policy,
        http=http,
        host=host,
        port=port,
        ask_in_client=approve_in_client,
        say=_say,
    )


def _policy(
    approve_all: bool,
    approve_hosts: tuple[str, ...],
    may_send: tuple[str, ...],
    files: tuple[str, ...],
    downloads: str | None,
    ignore_https_errors: bool,
    console: str | None,
) -> AgentPolicy:
    """The server's policy from its options, each checked before anything is opened."""
    from ..agent import AgentPolicy  # the face loads its module on first use

    named = [(d, "--files") for d in files] + ([(downloads, "--downloads")] if downloads else [])
    for directory, option in named:
        if not Path(directory).expanduser().is_dir():
            raise click.BadParameter(f"{directory!r} is not a directory", param_hint=f"'{option}'")
    try:
        return AgentPolicy(
            approve_all=approve_all,
            approve_hosts=approve_hosts,
            may_send=may_send,
            files=files,
            downloads=downloads,
            ignore_https_errors=ignore_https_errors,
            console_url=console,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--may-send'") from None


def _say(line: str) -> None:
    click.echo(line, err=True)


def _export_db(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:  # else the group's --db (or $BROWSERWORKER_DB) stands
        invocation().db = value


@mcp_command.command("export")
@click.argument("run_id")
@click.option(
    "--db",
    metavar="PATH|URL",
    expose_value=False,
    callback=_export_db,
    help="The journal database the session is in (as `mcp --db`).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The flow file to write (refused if it exists, unless --force).",
)
@click.option("--name", help="The flow's name (default: agent-RUN_ID).")
@click.option("--force", is_flag=True, help="Overwrite the output file.")
def export_command(run_id: str, output: Path, name: str | None, force: bool) -> None:
    """Write an agent's session RUN_ID as a flow file that runs with no model."""
    from ..agent import export_flow

    if output.exists() and not force:
        raise click.ClickException(f"{output} exists (use --force to overwrite it)")
    source = export_flow(invocation().store(create=False), run_id, name=name)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(source)
    tmp.replace(output)
    click.echo(f"wrote {output}: run it with browserworker run {output}", err=True)
