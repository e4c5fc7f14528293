"""A verifier an agent declares as a page and its proof, read on a real page: a page that writes
its list with a script after it loads is given time to show the proof, so a submit that landed
is never taken for one that did not (which would have it made again)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from browserworker.agent import verifier
from browserworker.agent._verify import PROOF_WAIT, check, parse_verify
from browserworker.runtime import BrowserProcess, BrowserSettings
from tests.support.channel_target import ChannelTarget


def _verdicts(specs: list[dict[str, Any]], reasons: list[str | None] | None = None) -> list[tuple[str, float]]:
    """Each spec's verdict (its kind) and the seconds it took, on one page of a real Chromium;
    each verdict's reason appended to ``reasons``, if given."""

    async def main() -> list[tuple[str, float]]:
        out = []
        async with BrowserProcess(BrowserSettings.discover()) as browser, browser.context() as context:
            ctx = SimpleNamespace(page=await context.new_page())
            for spec in specs:
                began = time.monotonic()
                verdict = await verifier(spec)(ctx)
                out.append((verdict.kind, time.monotonic() - began))
                if reasons is not None:
                    reasons.append(verdict.reason)
        return out

    return asyncio.run(main())


def test_a_list_a_script_writes_after_the_page_loads_is_waited_for() -> None:
    """The order shows 0.8 s after the document is in, after "Loading" and then "No orders":
    by its text, by its selector, and with "No orders" declared as the proof it did not land,
    the verifier says done, as soon as it shows, within the default wait. A page that only ever
    says "No orders" is not done (the text declared) once the spec's wait (1 s here) is over,
    and neither done nor not (``unknown``: a person decides) when it shows neither proof ("No
    order" is not read inside "No orders": a text counts as whole words)."""
    with ChannelTarget() as site:
        late = f"{site.url}/lateproof?key=K-1"
        none = f"{site.url}/noproof?key=K-1"
        verdicts = _verdicts(
            [
                {"url": late, "text": "Order K-1 placed"},
                {"url": late, "selector": "#found"},
                {"url": late, "text": "Order K-1 placed", "absent_text": "No orders"},
                {"url": none, "text": "Order K-1 placed", "absent_text": "No orders", "wait": 1},
                {"url": none, "text": "Order K-1 placed", "absent_text": "Sold out", "wait": 1},
                {"url": none, "text": "Order K-1 placed", "absent_text": "No order", "wait": 1},
            ]
        )
    assert [kind for kind, _ in verdicts] == ["done", "done", "done", "not_done", "unknown", "unknown"], verdicts
    assert all(seconds < PROOF_WAIT for _, seconds in verdicts[:3]), verdicts
    assert all(1 <= seconds < PROOF_WAIT for _, seconds in verdicts[3:]), verdicts


def test_an_error_status_proves_a_submit_did_not_land_only_where_the_spec_names_it() -> None:
    """A REST API answers 404 for a record that does not exist: declared as ``absent_status``, a
    GET or a page answering it is not done (the submit may be made once now); undeclared it is
    ``unknown`` (a mistyped address answers 404 too: a person decides), its reason saying what
    to declare, and so is a status other than the one declared."""
    with ChannelTarget() as site:
        gone = f"{site.url}/orders/K-1"  # the target answers 404 for any address it does not serve
        reasons: list[str | None] = []
        verdicts = _verdicts(
            [
                {"get": gone, "path": "reference", "absent_status": 404},
                {"get": gone, "path": "reference"},
                {"get": gone, "path": "reference", "absent_status": 410},
                {"url": gone, "text": "K-1", "absent_status": 404},
                {"url": gone, "text": "K-1"},
            ],
            reasons,
        )
    assert [kind for kind, _ in verdicts] == ["not_done", "unknown", "unknown", "not_done", "unknown"], verdicts
    hint = "a verify with absent_status 404 takes that answer as not landed"
    assert [hint in str(reason) for reason in reasons] == [False, True, False, False, True], reasons


def test_a_verify_read_right_after_its_submit_says_what_it_found_instead_of_the_proof() -> None:
    """``check`` reads a verify on a page: nothing to say where the proof shows, else what was
    there instead; a verify told not to trust its *not done* answers ``unknown`` for a page
    without the proof, and still ``done`` for one with it."""
    with ChannelTarget() as site:
        late, none = f"{site.url}/lateproof?key=K-1", f"{site.url}/noproof?key=K-1"

        async def main() -> tuple[Any, ...]:
            async with BrowserProcess(BrowserSettings.discover()) as browser, browser.context() as context:
                page = await context.new_page()
                found = await check(page, parse_verify({"url": late, "text": "Order K-1 placed"}))
                missed = await check(page, parse_verify({"url": none, "text": "Order K-1 placed", "wait": 0.5}))
                ctx = SimpleNamespace(page=page)
                distrusted = await verifier(
                    {"url": none, "text": "Order K-1 placed", "wait": 0.5},
                    distrust="a verify of this address missed a done submit",
                )(ctx)
                still = await verifier(
                    {"url": late, "text": "Order K-1 placed"}, distrust="a verify of this address missed a done submit"
                )(ctx)
                return found, missed, distrusted.kind, still.kind

        found, missed, distrusted, still = asyncio.run(main())
    assert found is None and missed == f"no sign of the submit on {none}", (found, missed)
    assert (distrusted, still) == ("unknown", "done")
