"""What an agent's tool call is answered, in words: a submit's status read from its attempts, what
it sent (the site's answers, and what the gate counts as possibly sent), the messages its page
shows, and why a call was stopped or failed (docs/agents.md's "What a submit answers")."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from playwright.async_api import Page

from ..gate import DETECTED, LATE, PAGE_LEFT, POPUP
from ..runtime import SentBetween, StepOutcome
from ..states import AttemptState
from ..store.records import AttemptRecord

__all__ = [
    "MESSAGES",
    "REOPENED",
    "held",
    "loads",
    "sent_between",
    "server_errors",
    "shown_messages",
    "site_failed",
    "stopped",
    "submit_status",
    "unsent",
    "untrusted",
    "what_was_sent",
    "with_messages",
]


def submit_status(attempts: list[AttemptRecord], call_epoch: int | None) -> str:
    """What a done submit's answer says, read from its attempts (oldest first) alone, so that
    every retry is answered alike: ``verified`` (a verifier found it landed), ``committed`` (done
    by the attempt the call began, or proven by its recorded answer), ``not_applied`` (the call's
    first attempt provably never landed, and it was done once since, under a fresh lease)."""
    latest = attempts[-1]
    if latest.decided_by == "verifier":
        return "verified"
    if latest.decided_by == "outbox":
        return "committed"
    earlier = attempts[:-1]
    if any((a.decided_by or "").startswith("approval_") for a in earlier):
        return "committed"
    redone = any(a.decided_by == "recovery:no_dispatch" or a.state == AttemptState.NOT_DONE for a in earlier)
    if redone or (call_epoch is not None and latest.lease_epoch != call_epoch):
        return "not_applied"
    return "committed"


def what_was_sent(latest: AttemptRecord, answer: dict[str, Any]) -> list[str]:
    """Put a done submit's ``responses`` (each request it sent, with the site's status) in its
    ``answer``; return the notes on what it sent: nothing, or only what the gate counts as
    possibly sent (:data:`SIGNS`)."""
    sent = (latest.evidence or {}).get("responses") or []
    signs = [r for r in sent if r.get("channel") == DETECTED and r.get("method") in SIGNS]
    requests = [r for r in sent if r not in signs]
    if requests:
        answer["responses"] = [{k: r.get(k) for k in ("method", "url", "status")} for r in requests]
    notes = [] if latest.dispatched_at is not None else [NOTHING_SENT]
    if signs:
        notes.append(possibly_sent(signs, requests))
    return notes


def server_errors(answer: dict[str, Any]) -> list[str]:
    """The requests of a done submit's ``answer`` the site answered with a server error (5xx)."""
    return [
        f"HTTP {r['status']} to {r['method']} {r['url']}"
        for r in answer.get("responses", [])
        if isinstance(r.get("status"), int) and r["status"] >= 500
    ]


def site_failed(failed: list[str], found: bool | None) -> str:
    """The note of a submit the site answered with a server error (:func:`server_errors`);
    ``found``: whether its verify, read after it, finds it (None: no verify was read)."""
    said = (
        "your verify finds it done all the same"
        if found
        else "look at the site before doing it again"
        if found is None
        else "your verify does not find it either: it was most likely not done"
    )
    again = "" if found else "; this effect_key is done: submit with a new effect_key if it is needed"
    return f"the site answered {'; '.join(failed)}, a server error: it may or may not have done what was sent; {said}{again}"


NOTHING_SENT = (
    "the click sent nothing that counts as this submit's (a required field or the form's own checks "
    "stopped it, a dialog was dismissed, the page only changed itself, or it holds the send back since a "
    "post of its own was refused: an autosave, told in an earlier answer's notes); this effect_key is done: "
    "make the page ready and submit with a new effect_key"
)
SIGNS = {
    PAGE_LEFT: "the page {url} was left",
    POPUP: "a window opened ({url})",
    LATE: "a request may have left unseen",
}
"""What the gate journals as possibly sent that is no request of the page's (docs/channels.md's
*detected*): a document left or a window opened while the submit ran (either may send past any
gate), a send journaled late."""


def possibly_sent(signs: list[dict[str, Any]], requests: list[dict[str, Any]]) -> str:
    """The note of a submit the gate journaled as possibly sent for ``signs`` (see :data:`SIGNS`)."""
    seen = "; ".join(dict.fromkeys(SIGNS[r["method"]].format(url=r.get("url") or "") for r in signs))
    own = "" if requests else "; it sent no request the gate holds (a POST, say)"
    return (
        f"{seen} as the submit ran: what a page sends then passes no gate, so the journal counts this "
        f"submit as possibly sent{own}; this effect_key is done"
    )


ALERTS = (
    "[role=alert], [role=status], .error, .errors, .alert, .flash, .errorlist, .errornote, .messagelist, "
    "#notice, p.notice, .invalid-feedback, #error_explanation, .validation-summary-errors, .field-validation-error"
)
"""What counts as a message the page shows after a submit: ARIA's alerts and status lines, and the
classes common frameworks give their messages and form errors (Django's, Rails', Bootstrap's,
ASP.NET's)."""
ERRORS = (
    "[role=alert], .error, .errors, .errorlist, .errornote, .invalid-feedback, #error_explanation, "
    ".validation-summary-errors, .field-validation-error, .alert-danger, .alert-warning, .alert-error, "
    ".flash-error, .flash-alert, p.alert, div.alert:not([class*=alert-])"
)
"""Which of those messages say something went wrong (ARIA's alerts, the frameworks' error
classes, a Rails ``alert`` flash): only then is the agent told the site may have refused it."""
ERRING = "[class*=error i], [class*=danger i], [class*=invalid i], [aria-invalid=true]"
"""Where else a page may show an error: an element whose class names one in a word of its own
(Roundup's ``error-message``, Bulma's ``is-danger``, Ant Design's ``ant-form-item-explain-error``,
MUI's ``Mui-error``), and a field marked invalid (ARIA's ``aria-invalid``), told with the text its
``aria-errormessage`` or ``aria-describedby`` points to. Such a class counts only on a short text
that holds no form, field or page heading: an ``error-boundary`` that wraps a page is no message."""
SHOWN = r"""(els, [alerts, errors]) => {
    const WORDS = new Set(["error", "errors", "danger", "invalid"]);
    const erring = e => [...e.classList].some(c => {
        const words = c.split(/[-_]+|(?<=[a-z])(?=[A-Z])/).map(w => w.toLowerCase());
        return words.some((w, i) => WORDS.has(w) && !["no", "non", "without"].includes(words[i - 1]));
    });
    const text = e => (e.innerText || "").trim();
    const byId = (e, ids) => (ids || "").split(/\s+/).filter(Boolean)
        .map(id => (e.getRootNode().getElementById ? e.getRootNode() : document).getElementById(id)).filter(Boolean);
    const said = [];  // [element, its text, an error?, for a field: the elements that tell its error]
    for (const e of els) {
        if (!e.checkVisibility()) continue;
        if (e.matches(alerts) || e.matches(errors)) said.push([e, text(e), e.matches(errors), null]);
        else if (e.getAttribute("aria-invalid") === "true") {
            const told = byId(e, e.getAttribute("aria-errormessage") || e.getAttribute("aria-describedby"));
            const why = told.map(text).filter(Boolean).join(" ") || "not valid";
            const name = (e.labels && e.labels[0] ? text(e.labels[0]) : "") || e.getAttribute("aria-label") || e.name || "a field";
            said.push([e, `${name.replace(/[\s:*]+$/, "")}: ${why}`, true, told]);
        } else if (erring(e) && text(e).length <= 300 && !e.querySelector("form, input, select, textarea, h1, main")) {
            said.push([e, text(e), true, null]);
        }
    }
    const inside = (e, o) => o !== e && o.contains(e);
    // a field's message once: where its element is shown as a message of its own, the field is not told
    const kept = said.filter(([e, , , told]) =>
        !said.some(([o]) => inside(e, o)) && !(told && said.some(([o]) => told.some(t => t === o || inside(t, o)))));
    return kept.map(([e, t, error]) => [t, error || said.some(([o, , err]) => err && inside(o, e))]);
}"""
"""Each element shown and not inside another one shown (a message list and its items once; an
error element the page keeps hidden, whose ``innerText`` is its whole text, not at all): its
text, and whether it or an element shown in it is an error (:data:`ERRORS`, :data:`ERRING`)."""


async def shown_messages(page: Page) -> tuple[list[str], bool]:
    """The messages a page shows after a submit (alerts, status lines, error texts), best effort,
    and whether one of them is an error."""
    try:
        shown = await page.locator(f"{ALERTS}, {ERRORS}, {ERRING}").evaluate_all(SHOWN, [ALERTS, ERRORS])
    except Exception:  # the page is gone or navigating: nothing to report
        return [], False
    kept = [(text.strip()[:300], error) for text, error in shown if text.strip()][:10]
    return [text for text, _ in kept], any(error for _, error in kept)


MESSAGES = (
    "the page shows errors; if the site refused what was sent, fix the form "
    "and submit with a new effect_key (this one is done)"
)
REOPENED = (
    "the submit's outcome was in doubt (the site did not answer in time), so the session's page was "
    "opened again: the calls before it were replayed, the submit was not redone and was decided as "
    "the answer says; take a snapshot to see the page as it is"
)
REFUSED_AGAIN = "the page shows errors: the site may have refused what was sent (a wrong password, say); fix the form and submit again"


async def with_messages(page: Page, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` (an idempotent submit's: a login, a search) with the messages the page shows
    after it, and a note where one is an error (the site may have refused it)."""
    alerts, errors = await shown_messages(page)
    if alerts:
        answer["alerts"] = alerts
    if errors:
        answer["notes"] = [*answer.get("notes", []), REFUSED_AGAIN]
    return answer


def unsent(state: AttemptState | None) -> dict[str, str]:
    """The note of a failed submit that provably sent nothing (its click never landed, say)."""
    if state != AttemptState.FAILED_BEFORE_SEND:
        return {}
    return {"note": "nothing was sent; this effect_key is spent: once the page is ready, submit with a new effect_key"}


def _socket_glob(url: str) -> str:
    """A socket's address as a rule's glob: its query a ``*`` (it carries what the page makes
    anew for each connection, NiceGUI's client and tab ids)."""
    address, query, _ = url.partition("?")
    return address.replace("[", "[[]") + ("?*" if query else "")


def _lets_socket(url: str) -> str:
    """The rule that lets a page use its socket ``url``, and what it then lets go."""
    return (
        f"the server's operator can let the page use it: browserworker mcp --may-send "
        f"{shlex.quote(f'WEBSOCKET {_socket_glob(url)}')} "
        "(then a click or a key press sends over it too; what a submit's click sends over it is still held "
        "as the submit's until it is journaled)"
    )


def loads(outcome: StepOutcome) -> str:
    """What the operator can do about what a page sent as it loaded (``outcome`` was refused):
    let its socket go, for a page that talks over one, else name what it posts by itself."""
    sockets = [sent.split(" ", 1)[1] for sent in outcome.refused if sent.startswith("WEBSOCKET ")]
    if sockets:
        return f"if the page talks to its site over that socket, {_lets_socket(sockets[0])}"
    return (
        "if the page sends it by itself (analytics, the state of its own view), the server's operator can let it go "
        f"(browserworker mcp --may-send{_rule_for(outcome)})"
    )


_TOKEN = re.compile(r"[\w~.%-]{16,}")
_MIXED = re.compile(r"[A-Za-z](?=\d)|\d(?=[A-Za-z])")  # a letter next to a digit
_STAMP = re.compile(r"\d{10,}")


def _generated(value: str) -> bool:
    """Whether a query value looks made anew for each load or request: a token of letters and
    digits mixed through it (Dash's ``endId``, a UUID), or a timestamp (jQuery's
    ``_=1733580000000``); not a readable key with a number in it (``order-2026-12-07``)."""
    if _STAMP.fullmatch(value):
        return True
    return bool(_TOKEN.fullmatch(value)) and len(_MIXED.findall(value)) >= 4


def _rule_glob(url: str) -> str:
    """``url`` as a rule's glob that matches it again: each query value the page makes anew
    (:func:`_generated`) is ``*``, and a ``[`` is matched as itself (``filter[name]=x``)."""
    parts = urlsplit(url)
    pieces = [piece.partition("=") for piece in parts.query.split("&")] if parts.query else []
    query = "&".join(f"{k}=*" if sep and _generated(v) else k + sep + v for k, sep, v in pieces)
    return urlunsplit(parts._replace(query=query)).replace("[", "[[]")


def _rule(method: str, url: str, part: bool = False) -> str:
    """The ``--may-send`` rule for ``method url`` (:func:`_rule_glob`), with ``*PART*`` for a
    part of its body if ``part``, quoted for a shell."""
    return shlex.quote(f"{method} {_rule_glob(url)}" + (" *PART*" if part else ""))


def _rule_for(outcome: StepOutcome) -> str:
    """The ``--may-send`` rule that names the request ``outcome`` was refused, quoted for a shell
    (to be made a glob that matches its kind: ``PUT */tiddlers/Draft*``), if there is one; of
    several (a form's post, and an inline check the page's timer sent meanwhile), each, for the
    operator to choose the page's own: the first is often the call's."""
    rules = list(
        dict.fromkeys(
            _rule(method, url)
            for method, _, url in (sent.partition(" ") for sent in outcome.refused)
            if method != "WEBSOCKET"
        )
    )
    if rules:
        which = f" RULE, one of {', '.join(rules)} (the page's own)" if len(rules) > 1 else f" {rules[0]}"
        return (
            f"{which}; where a button posts to that address too, end the rule with a part of the body "
            "only this request carries, ' *PART*'"
        )
    socket = next((sent.partition(" ")[2] for sent in outcome.refused), None)
    if socket is None:
        return ""
    return (
        f" {shlex.quote(f'WEBSOCKET {_socket_glob(socket)} *PART*')}, PART a part of the message only what "
        "it lets go carries: the socket's address alone lets every message on it go, a click's too"
    )


def sent_between(sent: Sequence[SentBetween]) -> list[str]:
    """The notes on what the page sent between calls; a refused post, and a socket whose messages
    were refused, are named with the rule that would let the page send them (a page built on a
    socket shows nothing, or does not react, until they go)."""
    notes = [f"the page sent between calls: {s}" for s in sent]
    posts = [s for s in sent if s.refused and s.method != "WEBSOCKET"]
    if posts:
        notes.append(
            f"the page sends {posts[0].method} {posts[0].url} by itself (a live preview as a field is typed "
            "into, an autosave); refused, it may leave the page broken. If it changes nothing you answer for, "
            f"the server's operator can let it go: browserworker mcp --may-send {_rule(posts[0].method, posts[0].url, True)}"
            ", with a part of its body that tells it from what a submit sends to the same address"
        )
    for url in dict.fromkeys(s.url for s in sent if s.refused and s.method == "WEBSOCKET"):
        notes.append(
            f"this page talks to its site over the socket {url}; a page built on one (Streamlit, Phoenix "
            f"LiveView, Blazor) shows nothing or does not react until its messages go: {_lets_socket(url)}"
        )
    return notes


def held(outcome: StepOutcome) -> str:
    """What a refused staging call would have sent (held, not sent, unless it says so)."""
    leaked = f" (possibly sent all the same: {', '.join(outcome.possibly_sent)})" if outcome.possibly_sent else ""
    return f"this would send {'; '.join(outcome.refused)}, which only submit may send{leaked}"


def stopped(tool: str, outcome: StepOutcome) -> str:
    """Why staging call ``tool`` was stopped (``outcome`` refused): what it would have sent, and
    the ways on."""
    key = " (its key= presses this key in it)" if tool == "press" else ""
    typed = " (the field shows what was typed, yet the site got none of it)" if tool == "fill" else ""
    return (
        f"{tool} was stopped: {held(outcome)}{typed}; use submit for the element that sends it{key}, with "
        "idempotent=true where sending it again changes nothing (a preview, a search). If the page posts "
        "it by itself (analytics, an autosave), not because of this call, call again; the server's "
        f"operator can let such posts go (browserworker mcp --may-send{_rule_for(outcome)})"
    )


def untrusted(reason: str | None) -> str:
    """What to say of a failure whose cause is a certificate the browser does not trust."""
    if reason is None or "net::ERR_CERT_" not in reason:
        return ""
    return (
        " (the site's certificate is not one the browser trusts; if it is your own application's "
        "self-signed one, the server's operator can accept it: browserworker mcp --ignore-https-errors)"
    )
