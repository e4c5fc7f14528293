"""When an element will not take an action: an agent is told at once what stood in its way, and a
styled checkbox is clicked where a person clicks it.

Playwright waits for an element to be actionable (visible, enabled, still, not covered) until its
timeout, then says only that the time ran out, with a call log of every retry. A person reading
the page would see a cookie banner over the button, a field the page keeps disabled. An agent's
action waits :data:`ACTION_TIMEOUT` seconds (not the call's whole timeout), and its timeout's
message is rewritten to say what the log found last, and what to do about it.

Many sites draw their own checkboxes and radios: the input itself hidden (``display: none``, no
size, clipped, under its label) and its label drawn as the box or the switch. Playwright will not
click such an input; a person clicks the label, and so does :func:`stand_in`'s caller.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from playwright.async_api import ElementHandle, Locator, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from ._snapshot import Target

__all__ = ["ACTION_TIMEOUT", "click", "on_element", "refused_value", "set_checked", "stand_in"]

T = TypeVar("T")

ACTION_TIMEOUT = 5.0
"""Seconds an agent's action on an element (a click, a fill, a choice...) waits for the element to
take it before it fails saying why. Only the action: what a click sets off is waited for as long
as :func:`~browserworker.agent.settled` says."""

_WAITING = (
    "waiting",
    "retrying",
    "attempting",
    "scrolling",
    "done scrolling",
    "element is visible, enabled",
    "locator resolved",
    "performing",
    "fill(",
    "selecting",
)
"""How the lines of a call log begin that tell of the waiting, not of the element."""

_ADVICE = (
    ("intercepts pointer events", "something covers it: a cookie banner, a dialog, an overlay; close that first"),
    ("not enabled", "the page keeps it disabled: it may wait for another field or choice first"),
    ("not editable", "the page keeps it read-only: it may wait for another field or choice first"),
    ("not visible", "it is hidden: a hover, a tab or a menu may show it"),
)


def _hindrance(log: str) -> str:
    """What kept an element from taking an action, from a Playwright timeout's message: the last
    line of its call log that says something of the element, with what to do about it."""
    said = None
    for line in log.partition("Call log:")[2].splitlines():
        text = line.strip().lstrip("-").strip()
        if " × " in text:  # "58 × waiting for ...": a line repeated
            text = text.split(" × ", 1)[1]
        if text and not text.startswith(_WAITING):
            said = text
    if said is None:
        return "it did not become ready"
    advice = next((a for sign, a in _ADVICE if sign in said), None)
    return said if advice is None else f"{said} ({advice})"


async def on_element(verb: str, action: Awaitable[T], seconds: float = ACTION_TIMEOUT) -> T:
    """``await action``: a Playwright action on an element (``verb``: its name) with a timeout of
    ``seconds``. Its ``TimeoutError`` is raised again (the same class) saying why the element did
    not take it, instead of the call log of every retry."""
    try:
        return await action
    except PlaywrightTimeout as exc:
        log = str(exc)
        if "resolved to" not in log and "attempting" not in log:  # it waited for an element all along
            raise PlaywrightTimeout(
                f"no element on the page matched it within {seconds:g} s, to take the {verb} (the page may not be "
                "the one it was on); take a snapshot to see the page as it is"
            ) from None
        raise PlaywrightTimeout(
            f"the element is on the page but would not take the {verb} within {seconds:g} s: {_hindrance(log)}; "
            "take a snapshot to see the page as it is"
        ) from None


_STAND_IN = """el => {
  if (el.tagName !== 'INPUT' || !['checkbox', 'radio'].includes(el.type) || !el.labels || !el.labels.length) return null;
  const label = el.labels[0], st = getComputedStyle(el), box = el.getBoundingClientRect();
  let drawn = st.display === 'none' || st.visibility === 'hidden' || Number(st.opacity) === 0
    || st.pointerEvents === 'none' || box.width <= 1 || box.height <= 1
    || (st.clip !== 'auto' && st.clip !== '') || st.clipPath !== 'none';
  if (!drawn) {  // shown: is it under a box its own label draws over it?
    el.scrollIntoView({block: 'center', inline: 'nearest'});
    const b = el.getBoundingClientRect();
    const hit = el.getRootNode().elementFromPoint(b.x + b.width / 2, b.y + b.height / 2);
    drawn = !!hit && hit !== el && label.contains(hit);
  }
  if (!drawn) return null;
  // what of the label to click: the label, or an element in it, whose middle is its own (not a
  // link in it: "I accept the terms"), one box each (an inline label holding blocks has several)
  label.scrollIntoView({block: 'center', inline: 'nearest'});
  const root = label.getRootNode();
  for (const e of [label, ...label.querySelectorAll('*')]) {
    const boxes = e.getClientRects();
    if (boxes.length !== 1 || boxes[0].width <= 1 || boxes[0].height <= 1) continue;
    const q = boxes[0], hit = root.elementFromPoint(q.x + q.width / 2, q.y + q.height / 2);
    const inner = hit && hit.closest('a, button, select, textarea');
    if (hit && e.contains(hit) && !(inner && label.contains(inner))) return e;
  }
  return label;
}"""


async def stand_in(element: Locator, seconds: float = ACTION_TIMEOUT) -> ElementHandle | None:
    """What a person clicks instead of ``element``: for a checkbox or radio drawn by its label (its
    own input hidden, clipped, of no size, or under a box the label draws), its label, or an
    element in it whose middle is its own, not a link in it. None for any other element (the
    caller disposes of the handle)."""
    handle = await on_element("click", element.evaluate_handle(_STAND_IN, timeout=seconds * 1000), seconds)
    found = handle.as_element()
    if found is None:
        await handle.dispose()
    return found


async def click(page: Page, selector: str, seconds: float = ACTION_TIMEOUT) -> None:
    """Click ``selector`` as a person does: a checkbox or radio drawn by its label through the
    label (:func:`stand_in`); waiting at most ``seconds`` for it to take the click. Not for what
    the click sets off: a slow site's answer to the form it posts is no element refusing a click
    (the caller waits for that, :func:`~browserworker.agent._settle.settled`)."""
    element = page.locator(selector)
    label = await stand_in(element, seconds)
    if label is None:
        await on_element("click", element.click(timeout=seconds * 1000, no_wait_after=True), seconds)
        return
    try:
        await on_element("click", label.click(timeout=seconds * 1000, no_wait_after=True), seconds)
    finally:
        await label.dispose()


async def set_checked(page: Page, selector: str, checked: bool = True, *, timeout: float = ACTION_TIMEOUT) -> None:
    """Check (or uncheck) the checkbox or radio ``selector`` as a person does: one the page draws
    with its label is set through the label, only if it is not as asked. ``ValueError`` if it did
    not change (or to uncheck a radio); Playwright's ``TimeoutError``, saying why, if it would
    not take the click within ``timeout`` seconds."""
    element = page.locator(selector)
    label = await stand_in(element, timeout)
    if label is None:
        await on_element("check", element.set_checked(checked, timeout=timeout * 1000), timeout)
        return
    try:
        if await element.is_checked() == checked:
            return
        if not checked and await element.get_attribute("type") == "radio":
            raise ValueError("a radio button cannot be unchecked: check another of its group")
        await on_element("check", label.click(timeout=timeout * 1000), timeout)
        if await element.is_checked() != checked:
            raise ValueError("a click on its label did not change it: click what the page draws as the box")
    finally:
        await label.dispose()


_FORMATS = {
    "date": "YYYY-MM-DD (2026-12-24)",
    "time": "HH:MM (14:30)",
    "datetime-local": "YYYY-MM-DDTHH:MM (2026-12-24T14:30)",
    "month": "YYYY-MM (2026-12)",
    "week": "YYYY-Www (2026-W52)",
}
"""The fields that take a value only in their own format, and that format."""


async def refused_value(page: Page, selector: str, target: Target | None, value: object) -> str | None:
    """Why a date or time field a fill typed ``value`` into is still empty (the browser drops a
    value not in the field's format, and Playwright says nothing), or None. Any other field is
    not looked at again (no round trip)."""
    kind = target.type if target is not None else ""
    if kind not in _FORMATS or not isinstance(value, str) or not value:
        return None
    if await page.locator(selector).input_value(timeout=ACTION_TIMEOUT * 1000):
        return None
    return f"the {kind} field took nothing from {value!r}: it takes {_FORMATS[kind]}; fill it again so"
