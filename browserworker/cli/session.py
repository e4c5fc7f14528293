"""One invocation's database: the store, opened at most once and closed when the command ends.

``--db`` (or ``$BROWSERWORKER_DB``) is a file path or a URL; :func:`browserworker.store.open_store`
decides which store serves it. No command opens a store any other way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..store.base import Store
from ..store.url import DEFAULT_DB, open_store
from .failures import stage

if TYPE_CHECKING:  # pragma: no cover
    from ..browser import BrowserSettings
    from ..engine import Engine
    from ..leases import LeaseSettings

__all__ = ["URL_EVIDENCE_DIR", "Session", "session"]

URL_EVIDENCE_DIR = Path("browserworker.evidence")  # review screenshots when --db is a URL


class Session:
    """The ``--db`` of this invocation and the store it names."""

    def __init__(self, ctx: click.Context) -> None:
        self.ctx = ctx
        self.db: str = DEFAULT_DB
        self._store: Store | None = None

    def store(self, *, create: bool = True) -> Store:
        """The store, opened on first use (a failure to open it is a refusal, exit 2) and
        closed when the command ends. ``create=False``: a missing database is refused."""
        if self._store is None:
            with stage(refusing=True):
                self._store = open_store(self.db, create=create)
            self.ctx.call_on_close(self._store.close)
        return self._store

    @property
    def is_url(self) -> bool:
        return "://" in self.db

    def exists(self) -> bool:
        """Whether the database is there already (a URL's database is taken to be)."""
        return self.is_url or Path(self.db).exists()

    @property
    def evidence_dir(self) -> Path:
        """Where screenshots kept as review evidence go: ``DB.evidence`` beside a database
        file, ``./browserworker.evidence`` for a URL."""
        if self.is_url:
            return URL_EVIDENCE_DIR
        path = Path(self.db)
        return path.parent / f"{path.name}.evidence"

    def engine(self, *, browser: BrowserSettings, lease: LeaseSettings | None = None,
               extensions: Sequence[Any] = ()) -> Engine:
        """An engine over this invocation's store (the session closes the store, not the engine)."""
        from ..engine import Engine

        return Engine(self.store(), browser=browser, lease=lease, extensions=extensions,
                      evidence_dir=self.evidence_dir)


def session() -> Session:
    """This invocation's session (set up by the command group)."""
    found = click.get_current_context().find_object(Session)
    if found is None:  # pragma: no cover - a command invoked outside the group
        raise RuntimeError("browserworker commands run inside the browserworker group")
    return found

