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
    # a class that names an error in a word of its own (Roundup, Bulma, Ant Design, MUI)
    "roundup refused": '<p class="ok-message" style="display:none"></p>'
    '<p class="error-message">Error: Required issue property priority not supplied</p>',
    "bulma danger": '<div class="notification is-danger">Payment failed.</div>',
    "ant design field": '<input><div class="ant-form-item-explain-error">Please input your username!</div>',
    "mui helper": '<p class="MuiFormHelperText-root Mui-error">Required</p>',
    # ... but not a wrapper of the page, a group that holds its field, nor a class that says none
    "error boundary": '<div class="error-boundary"><h1>Thank you</h1><p>Order 12 is placed.</p></div>',
    "field group": '<div class="form-group has-error"><label>Name <input></label></div>',
    "no errors": '<div class="no-errors">All good.</div>',
    # a field marked invalid, told with the text it points to, once
    "aria invalid": '<label for="m">Email:</label><input id="m" aria-invalid="true" aria-describedby="m-hint m-why">'
    '<span id="m-hint">We never share it.</span><span id="m-why">Enter a valid address.</span>',
    "aria invalid told": '<input aria-invalid="true" aria-errormessage="w"><p id="w" class="field-error">Too short.</p>',
    "aria invalid bare": '<input name="zip" aria-invalid="true">',
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
    (an error class, a Rails alert, a Bootstrap danger or warning, ARIA's alert, a class that names
    an error in a word of its own, a field marked invalid) says so. A class that wraps a page or a
    field, or says there is no error, is no message."""
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
        "roundup refused": (["Error: Required issue property priority not supplied"], True),
        "bulma danger": (["Payment failed."], True),
        "ant design field": (["Please input your username!"], True),
        "mui helper": (["Required"], True),
        "error boundary": ([], False),
        "field group": ([], False),
        "no errors": ([], False),
        "aria invalid": (["Email: We never share it. Enter a valid address."], True),
        "aria invalid told": (["Too short."], True),
        "aria invalid bare": (["zip: not valid"], True),
    }, read
