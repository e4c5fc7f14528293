"""Verifiers an agent declares as data: stored with a submit's intent, so that recovery can run
them with no agent (and a flow exported from the session runs them the same way).

Two kinds::

    {"url": "/orders?reference=R-1", "text": "R-1"}          # open a page; the text (or selector) proves it
    {"url": "...", "selector": "#order-R-1"}
    {"url": "...", "text": "R-1", "absent_text": "No orders"}  # ... and this text proves it did not land
    {"get": "/api/orders?reference=R-1", "path": "orders"}   # a GET whose JSON answer proves it
    {"get": "/api/orders/R-1", "path": "reference", "absent_status": 404}  # ... and a 404 that it did not

A page or answer that proves neither (an error status, neither text) is *unknown*: the submit
goes to a person, never to a retry. An error status proves the submit did not land only where
the spec names it (``absent_status``: a REST API's 404 for a record that does not exist); a
mistyped address answers 404 too, and would have the submit made again. Relative URLs are resolved against the page the submit was
made on, when the submit is recorded.

A page is read once its document is in, and read again until its proof shows, for up to
``wait`` seconds (:data:`PROOF_WAIT` unless the spec says): a page that writes its list with a
script after it loads (or says "No orders" while it fetches them) must not be taken for one
without the proof, which would have the submit made again.

A text is found as whole words (:func:`shows`): ``R-1`` is not on a page that shows only
``R-10``, nor ``0 results`` on one that shows ``10 results``. A search page lists what contains
the words searched for, so a substring would take another submit's proof for this one's (and a
submit that never landed would be answered as done), or "10 results" for "0 results" (and a
submit that landed would be made again).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import urljoin, urlsplit

from playwright.async_api import Page
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..flow import StepContext, Verdict

__all__ = ["PROOF_WAIT", "VerifySpec", "address", "check", "parse_verify", "read_first", "shows", "verifier", "words"]

PROOF_WAIT = 5.0
"""Seconds a verifier's page has, once its document is in, to show the proof before it is read
as what it shows then (see the module docstring)."""
_READ_EVERY = 0.2
CHECK_SLACK = 10.0
"""Seconds :func:`check` gives a verify's page to load, beside the spec's ``wait`` for its proof."""
_WORD = "[A-Za-z0-9_]"  # what a whole word may not touch at an end that is one (ASCII only)


def shows(body: str, text: str) -> bool:
    """Whether ``body`` holds ``text`` as whole words: no letter, digit or underscore right before
    it where it starts with one, nor right after it where it ends with one (``R-1`` is not in
    ``R-10`` or ``R-1_b``; it is in ``R-1,`` and ``(R-1)``). Only ASCII counts, so a text in a
    script written without spaces between words is found inside a sentence."""
    return bool(text) and words(text).search(body) is not None


def words(text: str) -> re.Pattern[str]:
    """The pattern that finds ``text`` as whole words (see :func:`shows`)."""
    before = f"(?<!{_WORD})" if re.match(_WORD, text[:1]) else ""
    after = f"(?!{_WORD})" if re.match(_WORD, text[-1:]) else ""
    return re.compile(before + re.escape(text) + after)


class VerifySpec(BaseModel):
    """How to tell whether a submit landed (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(default=None, description="a page to open (absolute, or relative to the submit's page)")
    text: str | None = Field(
        default=None,
        description="text on that page that proves the submit landed (as whole words: R-1 is not found in R-10)",
    )
    selector: str | None = Field(default=None, description="an element on that page that proves it landed")
    absent_text: str | None = Field(
        default=None, description="text on that page that proves it did not land (as whole words)"
    )
    get: str | None = Field(default=None, description="a URL to GET whose JSON answer proves it")
    absent_status: int | None = Field(
        default=None,
        ge=400,
        le=499,
        description="the status of that page or GET that proves it did not land (404: a REST API's answer for a "
        "record that does not exist; only for an address that answers it for nothing else)",
    )
    path: str | None = Field(
        default=None, description="a dotted path in that JSON; landed if the value there is non-empty / true"
    )
    settle: float = Field(default=3.0, ge=0, le=600, description="seconds after a crash before the check may run")
    wait: float = Field(
        default=PROOF_WAIT,
        ge=0,
        le=120,
        description="seconds the page has to show its proof once its document is in (a list a script writes)",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> VerifySpec:
        if (self.url is None) == (self.get is None):
            raise ValueError("give either url (with text or selector) or get (with path)")
        if self.url is not None and not (self.text or self.selector):
            raise ValueError("url needs text or selector: what on the page proves the submit landed")
        if self.get is not None and (self.text or self.selector or self.absent_text):
            raise ValueError("get takes path, not text or selector")
        return self

    def resolved(self, base: str) -> VerifySpec:
        """The spec with its URL made absolute against ``base`` (the page the submit is made on)."""
        changes: dict[str, Any] = {}
        for name in ("url", "get"):
            value = getattr(self, name)
            if value is not None:
                absolute = urljoin(base, value)
                if urlsplit(absolute).scheme not in ("http", "https"):
                    raise ValueError(f"{name} must be an http(s) URL, not {value!r}")
                changes[name] = absolute
        return self.model_copy(update=changes)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude_defaults=True) | {"settle": self.settle}


def parse_verify(data: Any) -> VerifySpec:
    """A :class:`VerifySpec` from an agent's JSON; ``ValueError`` says what is wrong."""
    if isinstance(data, VerifySpec):
        return data
    if not isinstance(data, dict):
        raise ValueError("verify must be an object, e.g. {'url': '/orders', 'text': 'R-1'}")
    try:
        return VerifySpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'verify'}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"invalid verify: {problems}") from None


def _at(data: Any, path: str | None) -> Any:
    for part in (path or "").split(".") if path else []:
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def verifier(spec: VerifySpec | dict[str, Any], *, distrust: str | None = None) -> Any:
    """The verifier function (``@effect.verify``) that ``spec`` describes. With ``distrust`` (why
    its *not done* is not to be trusted: a verify of its address missed a done submit before, the
    site answered the submit with success), what would be *not done* is *unknown*: a person
    decides, as a retry could make the submit twice."""
    checked = parse_verify(spec)

    async def verify(ctx: StepContext[Any]) -> Verdict:
        verdict = await _read(ctx.page, checked)
        if verdict.kind == "not_done" and distrust is not None:
            return Verdict.unknown(f"{verdict.reason}; but {distrust}")
        return verdict

    return verify


def address(spec: VerifySpec) -> str:
    """The address a verify reads, without its query (``https://shop/orders``): the verifies an
    agent declares for its submits to one site differ in their reference, not in it."""
    parts = urlsplit(spec.url or spec.get or "")
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


async def check(page: Page, spec: VerifySpec) -> str | None:
    """Read a submit's verify on ``page`` (of the submit's browser context, not the agent's)
    right after the submit was done: None where it finds the proof, else what it found instead.
    A verify that does not find a submit just done would take it for one that never landed after
    a crash, and have it made again."""
    bound = spec.wait + CHECK_SLACK
    try:
        async with asyncio.timeout(bound):
            verdict = await _read(page, spec)
    except TimeoutError:
        return f"it was not read within {bound:g} s"
    except Exception as exc:  # the address does not answer, a selector that is no selector
        return f"reading it failed: {str(exc).splitlines()[0]}"
    return None if verdict.kind == "done" else verdict.reason or verdict.kind


async def read_first(page: Page, spec: VerifySpec) -> Verdict | None:
    """Read a submit's verify on ``page`` before the submit, once, as soon as its document is in
    (a proof a script writes later is not waited for): its verdict, None where it could not be
    read (an address that does not answer). One that finds its proof already would answer
    *verified* after a crash for a submit that never landed; one that cannot tell would leave
    such a submit to a person."""
    try:
        async with asyncio.timeout(CHECK_SLACK):
            return await _read(page, spec.model_copy(update={"wait": 0.0}))
    except Exception:  # noqa: BLE001 - a verify that cannot be read now finds nothing
        return None


def _absent_hint(checked: VerifySpec, status: int) -> str:
    """What to declare so that a client error the verify's address answers says *not landed*
    (a wiki's page, a REST record, that does not exist until the submit makes it)."""
    if checked.absent_status is not None or not 400 <= status <= 499:
        return ""
    return f": a verify with absent_status {status} takes that answer as not landed, if its address answers it for nothing else"


async def _read(page: Page, checked: VerifySpec) -> Verdict:
    if checked.get is not None:
        reply = await page.request.get(checked.get)
        if reply.status == checked.absent_status:
            return Verdict.not_done(f"GET {checked.get} answered {reply.status}")
        if not reply.ok:
            return Verdict.unknown(f"GET {checked.get} answered {reply.status}{_absent_hint(checked, reply.status)}")
        try:
            found = _at(await reply.json(), checked.path)
        except ValueError:
            return Verdict.unknown(f"GET {checked.get} did not answer JSON")
        return Verdict.done({"verified": found}) if found else Verdict.not_done(f"nothing at {checked.path!r}")
    assert checked.url is not None
    response = await page.goto(checked.url, wait_until="domcontentloaded")
    if response is not None and response.status == checked.absent_status:
        return Verdict.not_done(f"{checked.url} answered {response.status}")
    if response is not None and not response.ok:
        return Verdict.unknown(f"{checked.url} answered {response.status}{_absent_hint(checked, response.status)}")
    proof, body = await _proof(page, checked)
    if proof is not None:
        return Verdict.done({"verified": proof})
    if checked.absent_text is not None:
        if shows(body, checked.absent_text):
            return Verdict.not_done(f"{checked.absent_text!r} is on {checked.url}")
        return Verdict.unknown(f"neither the proof nor {checked.absent_text!r} is on {checked.url}")
    return Verdict.not_done(f"no sign of the submit on {checked.url}")


async def _proof(page: Page, checked: VerifySpec) -> tuple[str | None, str]:
    """``(the selector or text that proves the submit landed, or None; the page's text)``, read
    until the proof shows or the spec's ``wait`` has passed. A read the page's own navigation
    interrupts (a redirect, a script replacing the document) is made again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + checked.wait
    body = ""
    while True:
        try:
            if checked.selector and await page.locator(checked.selector).count() > 0:
                return checked.selector, body
            body = await page.locator("body").inner_text(timeout=max(checked.wait, 1.0) * 1000)
            if checked.text and shows(body, checked.text):
                return checked.text, body
        except Exception:
            if loop.time() >= deadline:
                raise
        if loop.time() >= deadline:
            return None, body
        await asyncio.sleep(_READ_EVERY)
