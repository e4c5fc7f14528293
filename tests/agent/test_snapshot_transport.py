"""The snapshot script's answer travels as one JSON text; a page whose own script broke its
``JSON`` still gets its snapshot, the same as a page that left it alone."""

from __future__ import annotations

import asyncio

import pytest

from browserworker.agent import go_to
from browserworker.agent._settle import wait_for_text
from browserworker.agent._snapshot import Snapshot, take_snapshot
from browserworker.runtime import BrowserProcess, BrowserSettings
from tests.support.spa_target import SpaTarget

pytestmark = pytest.mark.browser

FORM = """<h1>Order</h1>
<form><label for="item">Item</label><input id="item" name="item">
<label for="pw">Password</label><input id="pw" type="password" value="hunter2">
<select name="size"><option>S</option><option selected>M</option></select>
<p>Delivery in 2 days</p><button type="submit">Place order</button></form>"""

BROKEN = {
    # Prototype.js and its kind: arrays that serialize as a string
    "arrays with toJSON": "Array.prototype.toJSON = function () { return 'not an array'; };",
    "JSON.stringify replaced": 'JSON.stringify = function () { return \'{"lines": "none"}\'; };',
    "JSON.stringify not JSON": "JSON.stringify = function () { return 'undefined'; };",
    "JSON.stringify throws": "JSON.stringify = function () { throw new Error('no JSON here'); };",
    "every object with a toJSON that throws": "Object.prototype.toJSON = function () { throw 1; };",
}


def _snapshots() -> dict[str, Snapshot]:
    async def main() -> dict[str, Snapshot]:
        out = {}
        async with BrowserProcess(BrowserSettings.discover()) as browser, browser.context() as context:
            page = await context.new_page()
            for name, script in {"untouched": "", **BROKEN}.items():
                await page.set_content(f"<script>{script}</script>{FORM}")
                out[name] = await take_snapshot(page, 1)
        return out

    return asyncio.run(main())


def test_a_page_that_broke_its_json_is_read_as_one_that_did_not() -> None:
    """Each page's snapshot has the same lines and refs as the untouched page's (a password's
    value masked, the select's choice read), whatever the page did to its ``JSON``."""
    shots = _snapshots()
    clean = shots.pop("untouched")
    for line in ('textbox "Item" [ref=e2]', 'combobox "size" [ref=e4]: M', 'button "Place order" [ref=e5]'):
        assert line in clean.text, clean.text
    assert 'textbox "Password" [ref=e3]: ***' in clean.text and clean.refs["e3"].secret, clean.text
    assert clean.refs["e2"].selector == "#item" and clean.next_ref == 6, clean.refs
    for name, shot in shots.items():
        assert (shot.text, shot.refs, shot.next_ref) == (clean.text, clean.refs, clean.next_ref), name


ICONS = """<table><tr><td><a href="/edit?id=1" title="Edit Record"><span class="fa fa-pencil"></span></a>
<form method="post" action="/delete"><button title="Delete Record"> <span class="fa fa-trash"></span> </button></form>
</td></tr></table>
<button><img src="data:," alt="Close"></button><a href="/home"><span aria-label="Home"></span></a>
<a href="/help" title="the help pages">Help</a>
<div role="tabpanel"><p>Chat with the shop</p>
<button><svg viewBox="0 0 8 8"><style>.cls-1 { fill: none; }</style><path class="cls-1" d="M0 0h8v8H0z"/></svg>Send</button></div>"""


def test_an_icon_button_is_named_by_its_tooltip_or_the_icon_in_it() -> None:
    """Flask-Admin's row buttons are icons with a title and no text: each is named by its title
    (an agent can tell Delete from Edit), an icon by its image's alt or aria-label, and an
    element with text by its text, not its tooltip nor what an inline SVG's ``<style>`` holds;
    a tab's panel is not named by its content; the names are what Playwright's role selectors find."""

    async def main() -> tuple[Snapshot, list[int]]:
        async with BrowserProcess(BrowserSettings.discover()) as browser, browser.context() as context:
            page = await context.new_page()
            await page.set_content(ICONS)
            shot = await take_snapshot(page, 1)
            found = [await page.locator(t.selector).count() for t in shot.refs.values()]
            return shot, found

    shot, found = asyncio.run(main())
    for line in ('link "Edit Record"', 'button "Delete Record"', 'button "Close"', 'link "Home"', 'link "Help"'):
        assert line in shot.text, shot.text
    assert "the help pages" not in shot.text
    # Gradio's: a tab's panel is not named by all it holds, an icon's inline <style> is no name
    assert 'button "Send"' in shot.text and "cls-1" not in shot.text and 'tabpanel "' not in shot.text, shot.text
    assert found == [1] * len(shot.refs), (found, shot.refs)


def test_an_agents_navigate_answers_once_a_page_that_builds_itself_is_built() -> None:
    """A single-page app's document is a shell: after its load it imports its parts (slowly here)
    and draws its form. ``go_to(..., built=True)`` (an agent's ``navigate`` and ``open_session``)
    answers once the page is quiet, so the next snapshot shows the form; at its load (what an
    exported flow waits for, its locators waiting on their own) the form is not there yet. The
    page's event stream, which never ends, is not waited for."""

    async def main() -> tuple[int, int, dict[str, object]]:
        with SpaTarget() as target:
            async with BrowserProcess(BrowserSettings.discover()) as browser, browser.context() as context:
                page = await context.new_page()
                await go_to(page, target.url + "/")
                at_load = await page.locator("#item").count()
                went = await go_to(page, target.url + "/", built=True)
                return at_load, await page.locator("#item").count(), went

    at_load, built, went = asyncio.run(main())
    assert (at_load, built) == (0, 1), went
    assert went["status"] == 200 and "unfinished" not in went, went


def test_wait_for_reads_what_a_page_writes_into_a_text_box() -> None:
    """A Gradio app writes every result into a text box (a disabled ``<textarea>``), whose value is
    no text of the page: ``wait_for`` finds it there, a moment after a click; ``gone`` waits until
    the box no longer holds it; a password field's value is never read."""
    page_html = """<textarea id=out disabled></textarea><input type=password value="Order placed secret">
    <button id=go onclick="setTimeout(() => out.value = 'Order  R-1 placed: 1 x tea', 300)">go</button>
    <button id=clear onclick="setTimeout(() => out.value = '', 300)">clear</button>"""

    async def main() -> list[dict[str, object]]:
        async with BrowserProcess(BrowserSettings.discover()) as browser, browser.context() as context:
            page = await context.new_page()
            await page.set_content(page_html)
            before = await wait_for_text(page, "order r-1 placed", None, 0.3)
            await page.click("#go")
            came = await wait_for_text(page, "order r-1 placed", None, 5)
            await page.click("#clear")
            went = await wait_for_text(page, None, "R-1 placed", 5)
            secret = await wait_for_text(page, "placed secret", None, 0.3)
            return [before, came, went, secret]

    before, came, went, secret = asyncio.run(main())
    assert before["met"] is False and came["met"] is True and went["met"] is True, (before, came, went)
    assert secret["met"] is False, secret
