"""The options several commands share, each declared once.

- :func:`flow_options`: ``FLOW_FILE``, ``--flow``, ``--input``, ``--inputs-json``, passed
  to the command as one ``flow:`` :class:`FlowArgs`.
- :func:`db_option`: ``--db`` / ``$BROWSERWORKER_DB`` and ``--db-schema`` / ``$BROWSERWORKER_DB_SCHEMA``,
  kept by the :class:`~.session.Invocation`.
- :func:`json_option`: ``--json``, passed as ``as_json``; :func:`emit` prints accordingly.
- :data:`headed_option`: ``--headed``, passed as ``headed``.
- :data:`lease_option`: ``--lease-ttl``, passed as ``lease:`` :class:`~browserworker.journal._leases.LeaseSettings`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click import ParameterSource

from ..errors import InputError
from ..journal import LeaseSettings
from ..store.url import DEFAULT_DB, DEFAULT_SCHEMA, ENV_DB, ENV_SCHEMA
from .invocation import Invocation

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime import RunRequest

__all__ = ["FlowArgs", "db_option", "emit", "flow_options", "headed_option", "json_option", "lease_option"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class FlowArgs:
    """A flow file, the flow in it, and its inputs, as given on the command line."""

    file: Path
    name: str | None
    pairs: tuple[str, ...]
    inputs_json: str | None

    def request(self, run_id: str | None = None, *, validate: bool = True) -> RunRequest:
        """Load the flow and parse the inputs; check the run id and (with ``validate``) the
        inputs. Raises :class:`~browserworker.errors.UsageError`; nothing is written.

        The flow package (and pydantic) is imported here, not with this module: ``run`` starts
        the browser's driver first, so that node starts while Python loads the flow."""
        from ..flow import load_flow, parse_inputs, unproven_effects
        from ..runtime import RunRequest, validate_run_id

        loaded = load_flow(self.file, self.name)
        for line in unproven_effects(loaded.flow):
            click.echo(f"warning: {line}", err=True)
        problems: list[str] = []
        inputs = parse_inputs(
            self.pairs, self.inputs_json, fields=loaded.flow.inputs_model.model_fields, problems=problems
        )
        if run_id is not None:  # an empty --run-id "$ID" is refused, never taken for a new run
            validate_run_id(run_id)
        if validate:  # every problem at once: the malformed pairs and the inputs' own
            loaded.flow.validate_inputs(inputs, also=[p for p in problems if not p.startswith("the flow's")])
        elif problems:
            raise InputError("; ".join(problems))
        return RunRequest(
            loaded=loaded, inputs=inputs, run_id=run_id, inputs_given=bool(self.pairs or self.inputs_json is not None)
        )


_FLOW_PARAMS = (
    click.argument("flow_file", type=click.Path(path_type=Path)),
    click.option("--flow", "flow_name", help="Which flow, when the file defines several."),
    click.option("--input", "pairs", multiple=True, metavar="KEY=VALUE", help="An input field (repeatable)."),
    click.option("--inputs-json", metavar="JSON", help="All inputs as a JSON object (--input wins)."),
)


def flow_options(command: F) -> F:
    """``FLOW_FILE --flow --input --inputs-json``, given to ``command`` as ``flow: FlowArgs``."""

    @functools.wraps(command)
    def with_flow(
        *args: Any,
        flow_file: Path,
        flow_name: str | None,
        pairs: tuple[str, ...],
        inputs_json: str | None,
        **kwargs: Any,
    ) -> Any:
        return command(*args, flow=FlowArgs(flow_file, flow_name, pairs, inputs_json), **kwargs)

    wrapped: Any = with_flow
    for param in reversed(_FLOW_PARAMS):
        wrapped = param(wrapped)
    return wrapped  # type: ignore[no-any-return]


def _keep_db(ctx: click.Context, param: click.Parameter, value: str) -> None:
    found = ctx.find_object(Invocation)
    if found is not None:  # None only for a command invoked outside the group
        found.db = value


def _keep_schema(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    found = ctx.find_object(Invocation)
    if found is not None:
        found.db_schema = value
        found.schema_given = ctx.get_parameter_source("db_schema") is ParameterSource.COMMANDLINE


_DB = click.option(
    "--db",
    type=str,
    envvar=ENV_DB,
    default=DEFAULT_DB,
    show_default=True,
    show_envvar=True,
    expose_value=False,
    callback=_keep_db,
    metavar="PATH|URL",
    help="The journal database: a file path (SQLite) or a URL (sqlite:///PATH, postgresql://...).",
)
_DB_SCHEMA = click.option(
    "--db-schema",
    "db_schema",
    envvar=ENV_SCHEMA,
    default=DEFAULT_SCHEMA,
    show_default=True,
    show_envvar=True,
    expose_value=False,
    callback=_keep_schema,
    metavar="NAME",
    help="With a postgresql:// --db: the schema the store lives in (stores side by side in one database).",
)


def db_option(command: F) -> F:
    """``--db`` and ``--db-schema`` (with their environment variables), kept by the
    :class:`~.session.Invocation` rather than passed to ``command``."""
    return _DB(_DB_SCHEMA(command))


def json_option(what: str = "the result") -> Callable[[F], F]:
    """``--json``: print ``what`` as JSON on stdout (given as ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as JSON on stdout.")


def emit(data: Any, as_json: bool, show: Callable[[], None]) -> None:
    """Print ``data`` as JSON on stdout with ``--json``, else call ``show`` (tables, lines)."""
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        show()


headed_option = click.option("--headed", is_flag=True, help="Show the browser window.")


def _lease(ctx: click.Context, param: click.Parameter, ttl: float) -> LeaseSettings:
    return LeaseSettings(ttl=ttl)


lease_option = click.option(
    "--lease-ttl",
    "lease",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    callback=_lease,
    help="Lease time-to-live in seconds (heartbeats every TTL/3).",
)
