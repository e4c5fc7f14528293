"""What a submit's answer says of the messages its page shows, read on real pages in the markup
frameworks give them: each message once, none the page keeps hidden, and the agent told the site
may have refused it only when one of them is an error (a success message alone is no refusal)."""

from __future__ import annotations

import asyncio

from browserworker.agent._answers import shown_messages
from browserworker.runtime import BrowserProcess, BrowserSettings

PAGES = {
    # Django: a success message after a save; a form back with its errors
    "django saved": '<ul class="messagelist"><li class="success">The order "R-1" was added successfully.</li></ul>',
    "django refused": '<p class="errornote">Please correct the error below.</p>'
    '<div class="form-row errors"><ul class="errorlist"><li>Order with this Reference already exists.</li></ul>'
    "<label>Reference:</label></div>",
    "django error message": '<ul class="messagelist"><li class="error">Could not save.</li></ul>',
    "django error hidden": '<ul class="messagelist"><li class="success">Saved.</li>'
    '<li class="error" style="display:none">An old error</li></ul>',
    # Rails: notice (it worked) and alert (it did not) flashes, and the error explanation
    "rails notice": '<p class="notice">Order was successfully created.</p><p class="alert"></p>',
    "rails alert": '<p class="alert">You need to sign in.</p>',
    "rails errors": '<div id="error_explanation"><h2>1 error prohibited this order from being saved</h2></div>',
    # Bootstrap: variants of .alert, and a field error shown or kept hidden (as its stylesheet does)
    "bootstrap success": '<div class="alert alert-success">Saved.</div><div class="invalid-feedback" style="display:none">Hidden</div>',
    "bootstrap danger": '<div class="alert alert-danger">Card declined.</div>',
    "bootstrap field": '<input class="is-invalid"><div class="invalid-feedback" style="display:block">Required.</div>',
    # ARIA: a status line is news, an alert is trouble
    "aria status": '<div role="status">3 results</div>',
    "aria alert": '<div role="alert">Session expired.</div>',
}


def _read() -> dict[str, tuple[list[str], bool]]:
    async def main() -> dict[str, tuple[list[str], bool]]:
        out = {}
        async with BrowserProcess(BrowserSettings.discover()) as browser, browser.context() as context:
            page = await context.new_page()
            for name, html in PAGES.items():
                await page.set_content(html)
                out[name] = await shown_messages(page)
        return out

    return asyncio.run(main())


def test_messages_are_read_once_and_only_errors_tell_of_a_refusal() -> None:
    """Each page's messages, outermost element once, hidden ones left out; an error among them
    (an error class, a Rails alert, a Bootstrap danger or warning, ARIA's alert) says so."""
    read = _read()
    assert read == {
        "django saved": (['The order "R-1" was added successfully.'], False),
        "django refused": (
            ["Please correct the error below.", "Order with this Reference already exists.\nReference:"],
            True,
        ),
        "django error message": (["Could not save."], True),
        "django error hidden": (["Saved."], False),
        "rails notice": (["Order was successfully created."], False),
        "rails alert": (["You need to sign in."], True),
        "rails errors": (["1 error prohibited this order from being saved"], True),
        "bootstrap success": (["Saved."], False),
        "bootstrap danger": (["Card declined."], True),
        "bootstrap field": (["Required."], True),
        "aria status": (["3 results"], False),
        "aria alert": (["Session expired."], True),
    }, read
