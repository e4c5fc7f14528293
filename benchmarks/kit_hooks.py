"""The kit's hooks in a browser context, without the kit: what the plain baselines of (a) and
(e) put in with ``--hooks`` (``plain_ten_steps.py``, ``plain_concurrent.py``), so that ours over
them is the kit's own share and they over plain Playwright the hooks' share."""

from __future__ import annotations

from playwright.async_api import BrowserContext, Page

from browserworker.gate import ContextRoute

NETWORK_EVENTS = ("request", "requestfinished", "requestfailed", "response")
"""The context's request events an effect's gate hears (a pass hears ``response`` from its start)."""


def _heard(*_: object) -> None:
    pass


async def hooked_page(context: BrowserContext) -> tuple[ContextRoute, Page]:
    """A page of ``context`` with the hooks a pass puts in before its first step: the context's
    :class:`~browserworker.gate.ContextRoute` (its API request context hooked), WebSockets routed
    beside the page's opening, the request events heard. The route itself goes in later
    (``route.install()``), where the first effect's gate puts it; ``route.shut()`` stops the
    page's renderer before its context closes."""
    route = ContextRoute(context)
    sockets = route.route_sockets()
    for event in NETWORK_EVENTS:
        route.listen(event, _heard)
    page = await context.new_page()
    await sockets
    return route, page
