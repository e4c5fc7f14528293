"""The console's pages. Each is one module here with a :data:`PAGE` (its nav entry and its
routes, a :class:`Page`) and one template in ``templates/``; :data:`PAGES` lists them in nav
order.

Adding a page: write ``pages/NAME.py`` with its handlers and
``PAGE = Page("name", "Title", "/path", [Route(...)])``, its template ``templates/NAME.html``,
and add it to :data:`PAGES` below (``pages/approvals.py`` is a small example).
"""

from __future__ import annotations

from . import approvals, overview, review, runs
from ._page import Page

__all__ = ["PAGES", "Page"]

PAGES: list[Page] = [overview.PAGE, runs.PAGE, review.PAGE, approvals.PAGE]
