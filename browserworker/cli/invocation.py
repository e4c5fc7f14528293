"""One invocation's database: the store, opened at most once and closed when the command ends.

``--db`` (or ``$BROWSERWORKER_DB``) is a file path or a URL, and ``--db-schema`` (or
``$BROWSERWORKER_DB_SCHEMA``) the schema of a PostgreSQL store; :func:`browserworker.store.open_store`
decides which store serves them. No command opens a store any other way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import StoreUnavailable, UsageError
from ..store.base import Store
from ..store.url import DEFAULT_DB, is_postgres, open_store_waiting, store_exists
from .failures import stage

if TYPE_CHECKING:  # pragma: no cover
    from ..journal import LeaseSettings
    from ..runtime import BrowserSettings, Engine

__all__ = ["URL_EVIDENCE_DIR", "Invocation", "invocation"]

URL_EVIDENCE_DIR = Path("browserworker.evidence")  # review screenshots when --db is a URL


class Invocation:
    """The ``--db`` and ``--db-schema`` of this invocation and the store they name."""

    def __init__(self, ctx: click.Context) -> None:
        self.ctx = ctx
        self.db: str = DEFAULT_DB
        self.db_schema: str | None = None
        self.schema_given = False  # --db-schema on the command line (not from the environment)
        self._store: Store | None = None

    def store(self, *, create: bool = True, wait: float = 0.0) -> Store:
        """The store, opened on first use and closed when the command ends. A failure to open it
        is a refusal (exit 2), but for a server that cannot be reached now: that is tried again
        for up to ``wait`` seconds, saying so, and then ends the command with exit 5 (store
        unavailable). ``create=False``: a missing database is refused."""
        if self._store is None:
            with _opening():
                self._store = open_store_waiting(
                    self.db, wait=wait, create=create, schema=self.schema, on_wait=_say_waiting
                )
            self.ctx.call_on_close(self._store.close)
        return self._store

    @property
    def is_url(self) -> bool:
        return "://" in self.db

    @property
    def is_postgres(self) -> bool:
        return is_postgres(self.db)

    @property
    def schema(self) -> str | None:
        """The PostgreSQL schema named (None: the default); a ``--db-schema`` given with a SQLite
        ``--db`` is refused (``$BROWSERWORKER_DB_SCHEMA`` is ignored there)."""
        if self.is_postgres:
            return self.db_schema
        if self.schema_given:
            raise UsageError(
                f"--db-schema is for a PostgreSQL --db (postgresql://...); {self.db} is a SQLite "
                "database, which has no schemas"
            )
        return None

    @property
    def location(self) -> str:
        """Where the store is, for messages (a URL without its password, and the schema)."""
        return self._store.location if self._store is not None else self.db

    def exists(self) -> bool:
        """Whether the store is there already (the file; the PostgreSQL schema). Only looks."""
        with _opening():
            return store_exists(self.db, schema=self.schema)

    @property
    def evidence_dir(self) -> Path:
        """Where screenshots kept as review evidence go: ``DB.evidence`` beside a database
        file, ``./browserworker.evidence`` for a URL."""
        if self.is_url:
            return URL_EVIDENCE_DIR
        path = Path(self.db)
        return path.parent / f"{path.name}.evidence"

    def engine(
        self, *, browser: BrowserSettings, lease: LeaseSettings | None = None, extensions: Sequence[Any] = ()
    ) -> Engine:
        """An engine over this invocation's store (the session closes the store, not the engine)."""
        from ..runtime import Engine

        return Engine(self.store(), browser=browser, lease=lease, extensions=extensions, evidence_dir=self.evidence_dir)


@contextmanager
def _opening() -> Iterator[None]:
    """Opening the store: a failure is a refusal (exit 2), but for a server that cannot be
    reached now, which ends the command as stopped (exit 5, "store unavailable")."""
    unavailable: StoreUnavailable | None = None
    with stage(refusing=True):
        try:
            yield
        except StoreUnavailable as exc:
            unavailable = exc
    if unavailable is not None:
        raise unavailable


def _say_waiting(error: StoreUnavailable, left: float) -> None:
    click.echo(f"waiting for the store: {error} (trying again for {left:.0f} s more)", err=True)


def invocation() -> Invocation:
    """This invocation's session (set up by the command group)."""
    found = click.get_current_context().find_object(Invocation)
    if found is None:  # pragma: no cover - a command invoked outside the group
        raise RuntimeError("browserworker commands run inside the browserworker group")
    return found
