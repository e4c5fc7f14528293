"""What an agent's call waits for once it has acted, and what it is told of it.

A click (or a key press, a hover, going back) is answered once what it set off has settled: the
documents, fetches and XHRs it started answered and the page loaded (:func:`settled`), its
dialogs answered as the person who clicked meant, the tabs it opened told and closed, its
downloads kept where the operator says; after :data:`SETTLE_LONG` seconds it waits no more for a
long poll, a stream or a load that does not come. :func:`told` turns what was seen into the
answer's fields and notes; :func:`wait_for_text` waits for what a page shows later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from playwright.async_api import Dialog, Download, Frame, Page, Request, Response
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from ._actionable import click

__all__ = ["click_and_settle", "go_back", "go_to", "settled", "told", "wait_for_text"]

T = TypeVar("T")

SETTLE_QUIET = 0.3
"""Seconds with no request in flight after which a click's consequences count as settled."""

BUILT_WAIT = 2.0
"""Seconds an agent's ``navigate`` waits, after the load, for the page to be quiet (see :func:`go_to`)."""

SETTLE_LONG = 5.0
"""Seconds after which a call no longer waits for the fetches and XHRs that change nothing (GETs),
nor for an answer the site has begun: a long poll (a chat widget's), a stream (a reply written
out word by word), a page that polls."""


async def click_and_settle(
    page: Page,
    selector: str,
    *,
    timeout: float = 30.0,
    acted: Callable[[], None] | None = None,
    confirm: bool = False,
    close_opened: bool = False,
    downloads: Path | None = None,
    click_timeout: float | None = None,
) -> dict[str, Any]:
    """Click ``selector`` and wait until what the click set off has settled: every document,
    fetch and XHR request it started answered (a form's POST, its redirect, the next page) and the
    page loaded. Returns where the page is then (``url``, ``title``), the dialogs the page
    opened meanwhile, if any (``dialogs``), and the address of each new tab or window it opened
    (``opened``; closed with ``close_opened=True``), and the files it downloaded (``downloads``:
    each saved in the directory ``downloads``, if given); raises ``ConnectionError`` when a request
    that may change the world got no answer (whether it landed is unknown). ``acted`` is called
    once the click is done, before the wait.

    A dialog is answered as a person who clicked meant: an ``alert`` and a "leave this page?"
    (``beforeunload``) are accepted, a ``prompt`` dismissed, and a ``confirm`` ("Place this
    order?") accepted only with ``confirm=True`` (a submit: the click is the decision), else
    dismissed (what it guards is not done).

    A checkbox or radio the page draws with its label (the input itself hidden) is clicked through
    its label, as a person does. ``click_timeout`` (seconds, ``timeout`` if not given) bounds the
    wait for the element to take the click; past it Playwright's ``TimeoutError`` says what stood
    in the way (a banner over it)."""
    waits = timeout if click_timeout is None else click_timeout
    return await settled(
        page,
        lambda: click(page, selector, waits),
        timeout=timeout,
        acted=acted,
        confirm=confirm,
        close_opened=close_opened,
        downloads=downloads,
    )


async def settled(
    page: Page,
    do: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 30.0,
    acted: Callable[[], None] | None = None,
    confirm: bool = False,
    close_opened: bool = False,
    downloads: Path | None = None,
) -> dict[str, Any]:
    """``await do()`` (a click, a key press), then wait as :func:`click_and_settle` does
    (its dialogs answered, the tabs it opened told, its downloads saved, as it says)."""
    dialogs, tabs, requests, files = _Dialogs(page, confirm), _Tabs(page), _InFlight(page), _Downloads(page)
    try:
        await do()
        if acted is not None:
            acted()
        await requests.settled(timeout)
        came = await _loaded(page)
    finally:
        requests.close()
        files.stop()
        await dialogs.close()
        await tabs.close(close_opened)
    if requests.lost:  # sent, and no answer came back: whether it landed is for recovery to find out
        raise ConnectionError(f"no answer to {'; '.join(requests.lost)}")
    where: dict[str, Any] = {"url": page.url, "title": await page.title()}
    if dialogs.seen:
        where["dialogs"] = dialogs.seen
    if tabs.heard:
        where["opened"] = [tab.url for tab in tabs.heard]
    if files.heard:
        where["downloads"] = await files.kept(downloads, timeout)
    if requests.long:
        where["unfinished"] = requests.long
    if not came:
        where["loading"] = True
    return where


async def _loaded(page: Page) -> bool:
    """Whether the page's load event came within :data:`SETTLE_LONG` seconds; it may never (an
    image, a script or a frame the site does not finish sending), and the page is there without."""
    try:
        await page.wait_for_load_state("load", timeout=SETTLE_LONG * 1000)
    except PlaywrightTimeout:
        return False
    return True


def told(settled: dict[str, Any], *, keeps_downloads: bool) -> dict[str, Any]:
    """What an agent is told of what a call's :func:`settled` saw: the dialogs and how each was
    answered, the tabs it opened (closed), the downloads, and notes on what it should know."""
    answer: dict[str, Any] = {}
    notes: list[str] = []
    if settled.get("dialogs"):
        answer["dialogs"] = settled["dialogs"]
    if settled.get("opened"):
        answer["opened"] = settled["opened"]
        notes.append("it opened a new tab (closed: this session has one page); navigate to its address to follow it")
    notes.extend(
        f"{request} was still loading after {SETTLE_LONG:g} s (a long poll, a stream, a page that polls): "
        "not waited for; wait_for what it brings"
        for request in settled.get("unfinished", [])
    )
    if settled.get("loading"):
        notes.append(
            f"the page was still loading after {SETTLE_LONG:g} s (an image, a script or a frame that does not "
            "finish): not waited for; its content is there to read"
        )
    if settled.get("downloads"):
        answer["downloads"] = settled["downloads"]
        if not keeps_downloads:
            notes.append(
                "it downloaded a file, not kept: this server keeps no downloads "
                "(its operator can keep them: browserworker mcp --downloads DIR)"
            )
    if notes:
        answer["notes"] = notes
    return answer


WAIT_POLL = 0.1
"""Seconds between two looks at a page's fields and frames while :func:`wait_for_text` waits."""


async def wait_for_text(page: Page, text: str | None, gone: str | None, timeout: float) -> dict[str, Any]:
    """Wait until a visible element of ``page`` shows ``text`` (case and runs of spaces aside),
    or, given ``gone``, until none shows that, at most ``timeout`` seconds: in the page's document,
    its open shadow roots, the values of its fields (a text box a result is written into: every
    output of a Gradio app is one) and the frames it shows (another origin's too; a frame nobody
    sees, a tracker's, does not count). Answers whether it came (``met``), the seconds ``waited``,
    where the page is, and a note if it did not come.

    The page's own text is waited on by Playwright (a change is seen at once); its fields' values
    and its frames are looked at every :data:`WAIT_POLL` seconds."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    needle = gone if gone is not None else text or ""
    state: Literal["hidden", "visible"] = "hidden" if gone is not None else "visible"
    on_page = page.get_by_text(needle).filter(visible=True).first
    met = False
    while True:
        left = timeout - (loop.time() - began)
        elsewhere = await _shown_elsewhere(page, needle)
        if gone is None and elsewhere:
            met = True
            break
        if left <= 0:
            break
        if gone is not None and elsewhere:  # not gone yet: look again soon
            await asyncio.sleep(min(WAIT_POLL, left))
            continue
        try:
            await on_page.wait_for(state=state, timeout=max(min(left, WAIT_POLL), 0.001) * 1000)
        except PlaywrightTimeout:
            continue
        if gone is None or not await _shown_elsewhere(page, needle):
            met = True
            break
    answer: dict[str, Any] = {"url": page.url, "met": met, "waited": round(loop.time() - began, 2)}
    if not met:
        still = f"{gone!r} is still shown" if gone is not None else f"{text!r} is not shown"
        answer["notes"] = [f"{still} after {timeout:g} s; take a snapshot to see the page as it is"]
    return answer


_VALUES_SHOW = """(needle) => {
  const norm = (s) => s.replace(/\\s+/g, ' ').trim().toLowerCase();
  const wanted = norm(needle);
  return [...document.querySelectorAll('input, textarea')].some((e) => {
    if (e.type === 'password' || e.type === 'hidden' || !e.getClientRects().length) return false;
    return getComputedStyle(e).visibility !== 'hidden' && norm(e.value || '').includes(wanted);
  });
}"""


async def _shown_elsewhere(page: Page, needle: str) -> bool:
    """Whether ``needle`` shows where Playwright's text wait does not look: in a visible field's
    value (a text box, not a password's) or in a frame the page shows."""
    try:
        if await page.evaluate(_VALUES_SHOW, needle):
            return True
    except PlaywrightError:  # navigating: looked at again
        pass
    return await _any_shows(await _shown_frames(page), needle)


async def _shown_frames(page: Page) -> list[Frame]:
    """The page's frames (at any depth) whose frame element is shown: neither hidden nor of no
    size, in a document that is shown itself. The frames of one depth are looked at together
    (their round trips at once: a page of ads and trackers has dozens)."""
    shown: list[Frame] = []
    level = [frame for frame in page.frames if frame.parent_frame is page.main_frame]
    while level:
        seen = await asyncio.gather(*(_element_shown(frame) for frame in level))
        now = [frame for frame, visible in zip(level, seen, strict=True) if visible]
        shown += now
        level = [frame for frame in page.frames if frame.parent_frame in now]
    return shown


async def _element_shown(frame: Frame) -> bool:
    """Whether ``frame``'s element is visible (Playwright's sense: a box of some size, not hidden)."""
    try:
        element = await frame.frame_element()
    except PlaywrightError:  # detached, or navigating: not shown now
        return False
    try:
        return await element.is_visible()
    except PlaywrightError:
        return False
    finally:
        with contextlib.suppress(PlaywrightError):
            await element.dispose()  # looked at many times in a wait: not kept alive in the page


async def _any_shows(frames: list[Frame], needle: str) -> bool:
    for frame in frames:
        try:
            if await frame.get_by_text(needle).filter(visible=True).count():
                return True
        except PlaywrightError:
            continue
    return False


async def go_back(page: Page, *, timeout: float = 30.0) -> dict[str, Any]:
    """Go back to the page before this one in ``page``'s history, and wait as
    :func:`click_and_settle` does. ValueError, the page left as it was, if there is none (the
    blank page a new page starts at does not count)."""
    before = page.url
    responses: list[Any] = []

    async def back() -> None:
        responses.append(await page.go_back(timeout=timeout * 1000))

    where = await settled(page, back, timeout=timeout)
    if page.url == "about:blank":  # the blank start of the page: not a page of the session
        await page.go_forward(timeout=timeout * 1000)
        raise ValueError("there is no page before this one")
    if responses == [None] and page.url == before:
        raise ValueError("there is no page before this one")
    return where


async def go_to(
    page: Page, url: str, *, downloads: Path | None = None, timeout: float = 30.0, built: bool = False
) -> dict[str, Any]:
    """Open ``url`` in ``page`` as an agent's ``navigate`` does: returns ``url`` (where the page is
    then), ``status`` (of the document's answer), and ``loading`` if its load event did not come
    within :data:`SETTLE_LONG` seconds (the page is usable once its document is in).

    ``built``: wait, after the load, until the page is quiet as a click's consequences are (see
    :func:`settled`), its scripts counted too, so that a page that builds itself after its load
    (a single-page app fetches its configuration, then imports its parts) is shown built to an
    agent's next snapshot; at most :data:`BUILT_WAIT` seconds (a page that polls or keeps a long
    poll open is usable all the same), its event streams (a heartbeat) not waited for.

    An address that is a file (an export link, a PDF) is not an error, as it is for
    ``page.goto``: the file is downloaded as a click's is (``downloads``: each saved in the
    directory ``downloads``, if given) and the page left where it was."""
    files = _Downloads(page)
    requests = _InFlight(page, (*_InFlight.KINDS, "script"), streams_go=True) if built else None
    try:
        try:
            response = await page.goto(url, wait_until="domcontentloaded", timeout=timeout * 1000)
        except PlaywrightError as exc:
            if "Download is starting" not in str(exc):
                raise
            if not files.heard:  # its event may come just after the navigation's end
                await page.wait_for_event("download", timeout=SETTLE_LONG * 1000)
            return {"url": page.url, "status": None, "downloads": await files.kept(downloads, timeout)}
        finally:
            files.stop()
        went: dict[str, Any] = {"url": page.url, "status": response.status if response is not None else None}
        if not await _loaded(page):
            went["loading"] = True
        if requests is not None:
            with contextlib.suppress(TimeoutError):  # a page that never goes quiet is usable all the same
                await requests.settled(min(timeout, BUILT_WAIT))
        return went
    finally:
        if requests is not None:
            requests.close()


class _Heard(Generic[T]):
    """What a page emits as ``event`` while :func:`settled` waits (``heard``, in order)."""

    def __init__(self, page: Page, event: str) -> None:
        self.page, self.event = page, event
        self.heard: list[T] = []
        page.on(event, self._hear)  # type: ignore[call-overload]

    def _hear(self, item: T) -> None:
        self.heard.append(item)

    def stop(self) -> None:
        self.page.remove_listener(self.event, self._hear)


class _Downloads(_Heard[Download]):
    """The files a page downloads while :func:`settled` waits."""

    def __init__(self, page: Page) -> None:
        super().__init__(page, "download")

    async def kept(self, into: Path | None, timeout: float) -> list[dict[str, Any]]:
        """Each download as ``name``, and, saved in ``into`` (under its name, made unique),
        ``saved`` and ``size``, or ``failed`` and why."""
        out: list[dict[str, Any]] = []
        for download in self.heard:
            name = Path(download.suggested_filename).name or "download"
            if into is None:
                out.append({"name": name})
                continue
            path = into / name
            n = 2
            while path.exists():
                path, n = into / f"{Path(name).stem} ({n}){Path(name).suffix}", n + 1
            try:
                async with asyncio.timeout(timeout):
                    await download.save_as(path)
            except Exception as exc:
                out.append({"name": name, "failed": str(exc).splitlines()[0] if str(exc) else type(exc).__name__})
                continue
            out.append({"name": name, "saved": str(path), "size": path.stat().st_size})
        return out


class _InFlight:
    """The document, fetch and XHR requests of a page in flight while :func:`settled` waits, and
    those that may change the world and got no answer (``lost``). After :data:`SETTLE_LONG`
    seconds it waits no more for a GET among the fetches and XHRs, nor for a request the site
    has begun to answer (``long`` names those let go): a long poll is answered only when the
    site has news, a stream (a reply written out word by word) only when it is done, and a page
    that polls is never quiet for long. A request that may change the world and has no answer
    yet is waited for until the timeout."""

    KINDS = ("document", "fetch", "xhr")

    def __init__(self, page: Page, kinds: tuple[str, ...] = KINDS, *, streams_go: bool = False) -> None:
        self.page = page
        self.kinds = kinds
        self.streams_go = streams_go  # an event stream (a response that never ends) is let go once it answers
        self.pending: set[Request] = set()
        self.quiet = asyncio.Event()
        self.quiet.set()
        self.lost: list[str] = []
        self.long: list[str] = []
        self.patient = True  # the GETs count (the first SETTLE_LONG seconds)
        self.answering: set[Request] = set()  # in flight, their answers begun (status and headers came)
        page.on("request", self._started)
        page.on("response", self._answering)
        page.on("requestfinished", self._ended)
        page.on("requestfailed", self._failed)

    @staticmethod
    def _may_outlast(request: Request) -> bool:
        return request.method in ("GET", "HEAD") and request.resource_type != "document"

    def _started(self, request: Request) -> None:
        if request.resource_type not in self.kinds:
            return
        if self._may_outlast(request) and not self.patient:
            return
        self.pending.add(request)
        self.quiet.clear()

    def _answering(self, response: Response) -> None:
        if response.request in self.pending:
            self.answering.add(response.request)
            if self.streams_go and (response.headers.get("content-type") or "").startswith("text/event-stream"):
                self._ended(response.request)

    def _ended(self, request: Request) -> None:
        self.pending.discard(request)
        self.answering.discard(request)
        if not self.pending:
            self.quiet.set()

    def _failed(self, request: Request) -> None:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            self.lost.append(f"{request.method} {request.url}: {request.failure}")
        self._ended(request)

    def _lose_patience(self) -> None:
        self.patient = False
        gone = [request for request in self.pending if self._may_outlast(request) or request in self.answering]
        self.long = [f"{request.method} {request.url}" for request in gone[:3]]
        for request in gone:
            self._ended(request)

    async def settled(self, timeout: float) -> None:
        """Until none is in flight for :data:`SETTLE_QUIET` seconds (after :data:`SETTLE_LONG`,
        those let go aside), at most ``timeout``; TimeoutError naming what is in flight then."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + timeout
        while True:
            if self.patient and loop.time() - began >= SETTLE_LONG:
                self._lose_patience()
            if self.quiet.is_set():
                await asyncio.sleep(SETTLE_QUIET)  # a redirect's next request starts after its answer
                if self.quiet.is_set():
                    return
                continue
            left = deadline - loop.time()
            if left <= 0:
                waiting = "; ".join(f"{r.method} {r.url}" for r in self.pending)
                raise TimeoutError(f"still waiting after {timeout:g} s for {waiting}")
            until = min(left, began + SETTLE_LONG - loop.time()) if self.patient else left
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.01, until)):
                    await self.quiet.wait()

    def close(self) -> None:
        self.page.remove_listener("request", self._started)
        self.page.remove_listener("response", self._answering)
        self.page.remove_listener("requestfinished", self._ended)
        self.page.remove_listener("requestfailed", self._failed)


class _Tabs(_Heard[Page]):
    """The tabs and windows a page opens while :func:`settled` waits (a ``target=_blank`` link,
    ``window.open``)."""

    def __init__(self, page: Page) -> None:
        super().__init__(page, "popup")

    async def close(self, close_opened: bool) -> None:
        self.stop()
        if close_opened:
            for tab in self.heard:
                with contextlib.suppress(Exception):  # closed by itself meanwhile
                    await tab.close()


class _Dialogs:
    """The dialogs a page opens while :func:`settled` waits, each answered as
    :func:`click_and_settle` says and noted (``type: message (accepted)``)."""

    def __init__(self, page: Page, confirm: bool) -> None:
        self.page, self.confirm = page, confirm
        self.seen: list[str] = []
        self._answering: list[asyncio.Future[None]] = []
        page.on("dialog", self._opened)

    def _opened(self, dialog: Dialog) -> None:
        accept = dialog.type in ("alert", "beforeunload") or (self.confirm and dialog.type == "confirm")
        said = f"{dialog.type}: {dialog.message}" if dialog.message else dialog.type
        self.seen.append(f"{said} ({'accepted' if accept else 'dismissed'})")
        self._answering.append(asyncio.ensure_future(dialog.accept() if accept else dialog.dismiss()))

    async def close(self) -> None:
        self.page.remove_listener("dialog", self._opened)
        await asyncio.gather(*self._answering, return_exceptions=True)  # one gone with its page: nothing to answer
