"""What a verifier looked at: the documents its page loaded and the API calls it made, named in
the evidence of the decision it led to ("checked GET .../api/orders?reference=... -> 200")."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from ._routes import ApiCall, observe_api

if TYPE_CHECKING:  # pragma: no cover
    from playwright.async_api import APIResponse, Page, Response

__all__ = ["Observed"]

KEEP = 8
"""The most requests one decision's evidence names (the last ones)."""


class Observed:
    """Collects, while entered, what ``page`` loaded in its main frame and what its context's API
    request context fetched; :attr:`checked` lists them as ``"METHOD URL -> status"``."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.checked: list[str] = []
        self._stop_api: object = None

    def _add(self, line: str) -> None:
        self.checked.append(line)
        del self.checked[:-KEEP]

    def _document(self, response: Response) -> None:
        try:
            request = response.request
            if request.is_navigation_request() and request.frame == self.page.main_frame:
                self._add(f"{request.method} {response.url} -> {response.status}")
        except Exception:  # pragma: no cover - the page went away meanwhile
            pass

    async def _api(self, call: ApiCall, response: APIResponse | None, error: str | None) -> None:
        self._add(f"{call.method} {call.url} -> {response.status if response is not None else error}")

    def __enter__(self) -> Observed:
        self.page.on("response", self._document)
        self._stop_api = observe_api(self.page.context, self._api)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.page.remove_listener("response", self._document)
        if callable(self._stop_api):
            self._stop_api()
