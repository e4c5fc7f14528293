"""The outbox rows one dispatch gate wrote, as the store has them, with what came back.

The gate is the only writer of a new attempt's outbox, so the attempt's outcome is
decided from these rows without reading them back. Answers, redirect ends and failures
are evidence: each is written in its own commit, unfenced.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from playwright.async_api import Page, Response

from ..journal import RunJournal
from ..logs import get_logger
from ..store import limit_rules
from ..store.records import AttemptRecord, OutboxRecord

if TYPE_CHECKING:  # pragma: no cover
    from ._routes import ContextRoute

__all__ = [
    "DETECTED",
    "LATE",
    "PAGE_LEFT",
    "POPUP",
    "GateOutbox",
    "key_headers",
    "pause_on_throttle",
    "pause_quietly",
    "watch_navigations",
]

log = get_logger("browserworker.gate")

DETECTED = "detected"
"""The channel of an outbox row the gate journals as possibly sent (docs/channels.md's *detected*)."""

# The methods of detected rows that are no request of a page's, but the gate's signs of one:
PAGE_LEFT = "PAGEHIDE"
"""A page left or closed while an effect ran (what its document sends as it goes passes no gate)."""
POPUP = "POPUP"
"""A window opened while an effect ran (what it sends before it is routed passes no gate)."""
LATE = "DETECTED"
"""Possible dispatches whose own rows could not be written when they were seen (journaled late)."""

_KEY_HEADERS = (
    "location",
    "content-type",
    "content-length",
    "date",
    "etag",
    "x-request-id",
    "idempotency-key",
    "retry-after",
)


def key_headers(headers: dict[str, str]) -> dict[str, str]:
    """The response headers worth keeping as evidence (never cookies or auth).

    ``response.headers`` needs no round trip to the browser (``all_headers()`` does); it
    leaves out only security-related headers such as Set-Cookie, which are never kept.
    """
    return {k: v for k, v in headers.items() if k.lower() in _KEY_HEADERS}


class GateOutbox:
    """One attempt's outbox as its gate committed it."""

    def __init__(self, journal: RunJournal) -> None:
        self.journal = journal
        self._rows: dict[int, OutboxRecord] = {}

    @property
    def rows(self) -> list[OutboxRecord]:
        """Every row, in the order they were committed."""
        return [self._rows[key] for key in sorted(self._rows)]

    @property
    def dispatches(self) -> list[OutboxRecord]:
        """The requests and messages the gate let go (not the detected ones)."""
        return [row for row in self.rows if row.channel != DETECTED]

    def keep(self, attempt: AttemptRecord, outbox_id: int, method: str, url: str, channel: str) -> None:
        """Keep the row just committed, as the store has it."""
        self._rows[outbox_id] = OutboxRecord(
            id=outbox_id,
            attempt_id=attempt.id,
            run_id=attempt.run_id,
            step_id=attempt.step_id,
            method=method,
            url=url,
            released_at=time.time(),
            status=None,
            response_url=None,
            headers=None,
            response_at=None,
            failure=None,
            failed_at=None,
            channel=channel,
        )

    async def answered(self, outbox_id: int, status: int, url: str, headers: dict[str, str]) -> None:
        """Journal the answer to a released request (the first answer stands, as in the store)."""
        kept = key_headers(headers)
        await self.journal.answered(outbox_id, status, url, kept)
        await pause_quietly(self.journal, status, url, kept)
        row = self._rows[outbox_id]
        if row.response_at is None:
            self._rows[outbox_id] = replace(row, status=status, response_url=url, headers=kept, response_at=time.time())

    async def final(self, outbox_id: int, status: int, url: str) -> None:
        """Journal the last answer of a released request's redirect chain."""
        await self.journal.final(outbox_id, status, url)
        self._rows[outbox_id] = replace(self._rows[outbox_id], final_status=status, final_url=url)

    async def failed(self, outbox_id: int, failure: str) -> None:
        """Journal that a released request failed (unless it was answered first)."""
        await self.journal.failed(outbox_id, failure)
        row = self._rows[outbox_id]
        if row.response_at is None and row.failure is None:
            self._rows[outbox_id] = replace(row, failure=failure, failed_at=time.time())


async def pause_on_throttle(journal: RunJournal, status: int, url: str, headers: dict[str, str]) -> None:
    """A 429 or 503 with a ``Retry-After`` pauses the run's limit key fleet-wide (:mod:`browserworker.store.limit_rules`)."""
    if status not in limit_rules.THROTTLE_STATUSES:
        return
    seconds = limit_rules.retry_after(headers, time.time())
    if seconds is not None:  # the URL without its query: that may carry secrets
        await journal.throttled(status, url.split("?", 1)[0].split("#", 1)[0], seconds)


_PAUSING: set[asyncio.Future[None]] = set()


def watch_navigations(page: Page, journal: RunJournal, route: ContextRoute) -> None:
    """A main-frame navigation of ``page`` answered 429/503 with a ``Retry-After`` pauses the
    run's key too (a GET the gate does not hold: an action's ``goto``, a link, a reload).

    It hears the context's responses through its ``route`` (:meth:`ContextRoute.listen`), as an
    effect's gate does, instead of listening to the page too: one subscription, and each
    response reported once instead of twice."""

    def on_response(response: Response) -> None:
        request = response.request
        if (
            response.status in limit_rules.THROTTLE_STATUSES
            and request.method == "GET"
            and request.is_navigation_request()
            and request.frame.parent_frame is None
            and request.frame.page == page
        ):
            pausing = asyncio.ensure_future(pause_quietly(journal, response.status, response.url, response.headers))
            _PAUSING.add(pausing)
            pausing.add_done_callback(_PAUSING.discard)

    route.listen("response", on_response)


async def pause_quietly(journal: RunJournal, status: int, url: str, headers: dict[str, str]) -> None:
    """:func:`pause_on_throttle`, logging (not raising) a failure to journal it."""
    try:
        await pause_on_throttle(journal, status, url, headers)
    except Exception:  # noqa: BLE001 - evidence of a pause: the run goes on without it
        log.warning("could not journal a Retry-After pause", run_id=journal.run_id, url=url.split("?", 1)[0])
