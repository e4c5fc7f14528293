"""The console's pages. Each is one module here with a :data:`PAGE` (its nav entry and its
routes) and one template in ``templates/``; :data:`PAGES` lists them in nav order.

Adding a page: write ``pages/NAME.py`` with its handlers and
``PAGE = Page("name", "Title", "/path", [Route(...)])``, its template ``templates/NAME.html``,
and add it to :data:`PAGES` below (``pages/approvals.py`` is a small example).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.routing import BaseRoute

__all__ = ["PAGES", "Page"]


@dataclass(frozen=True)
class Page:
    """A page of the console: its name, its title in the nav, its path, its routes."""

    name: str
    title: str
    path: str
    routes: list[BaseRoute] = field(default_factory=list)
    in_nav: bool = True


def _pages() -> list[Page]:
    from . import approvals, overview, review, runs

    return [overview.PAGE, runs.PAGE, review.PAGE, approvals.PAGE]


PAGES: list[Page] = _pages()
