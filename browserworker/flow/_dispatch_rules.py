"""Which requests count as "sent": the ``dispatch=`` and ``sends=`` rules of a flow's steps."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.async_api import Request

__all__ = ["ChannelRequest", "browser_report", "is_dispatch", "matches", "parse_rule", "rule_problem"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_REPORTS = frozenset({"application/csp-report", "application/reports+json"})
_METHOD_RULE = re.compile(r"^([A-Z]+(?:\|[A-Z]+)*)\s+(\S.*)$")
_METHODS = re.compile(r"[A-Z]+(?:\|[A-Z]+)*")


@functools.lru_cache(maxsize=512)  # a rule is parsed once, not for every request it is matched with
def parse_rule(rule: str) -> tuple[frozenset[str] | None, str, str | None]:
    """``"glob"`` → (None: any method, glob, None); ``"POST glob"`` / ``"POST|PUT glob"`` →
    (methods, glob, None); either followed by a space and a glob of the body (the rest of the
    rule, spaces and all): ``'POST */update *"save"*'`` → (methods, glob, body glob)."""
    text = rule.strip()
    methods = None
    found = _METHOD_RULE.match(text)
    if found:
        methods, text = frozenset(found.group(1).split("|")), found.group(2).strip()
    parts = text.split(None, 1)
    if len(parts) < 2:
        return methods, text, None
    return methods, parts[0], parts[1].strip()


def rule_problem(rule: object) -> str | None:
    """What is wrong with ``rule`` as a rule of ``dispatch=`` / ``sends=`` (None: nothing; a
    predicate is taken as it is)."""
    if callable(rule):
        return None
    if not isinstance(rule, str) or not rule.strip():
        return f"must be a URL glob, 'METHOD glob' or a predicate, not {rule!r}"
    methods, glob, _ = parse_rule(rule)
    if methods is None and _METHODS.fullmatch(glob):
        return f"{rule!r} names methods but no URL glob (write {glob + ' *'!r} for any URL)"
    return None


def matches(rule: Callable[[Request], bool] | str, method: str, url: str, request: Any = None) -> bool:
    """Whether a request matches a rule: a URL glob (any method), ``"METHOD glob"``, either with
    a glob of the body after it, or a predicate.

    A body glob is matched against the text of the request's body (a WebSocket message's text)
    as ``request`` holds it: a Playwright request's ``post_data_buffer``, a
    :class:`ChannelRequest`'s ``body``. Where there is no body to read (a GET, an API call) a
    rule with a body glob does not match.

    A predicate is given the Playwright request, or for a WebSocket message or an API-request
    call (which have none) a :class:`ChannelRequest` with the same ``method`` and ``url`` (and
    a message's ``body``).
    """
    if isinstance(rule, str):
        methods, glob, body = parse_rule(rule)
        if not ((methods is None or method.upper() in methods) and fnmatch.fnmatchcase(url, glob)):
            return False
        if body is None:
            return True
        text = _body_text(request)
        return text is not None and fnmatch.fnmatchcase(text, body)
    return bool(rule(request if request is not None else ChannelRequest(method.upper(), url)))  # type: ignore[arg-type]


def _body_text(request: Any) -> str | None:
    """The body of ``request`` as text (bytes read as UTF-8, what is not UTF-8 replaced), None
    if it has none that can be read."""
    data = request.body if isinstance(request, ChannelRequest) else getattr(request, "post_data_buffer", None)
    if data is None:
        return None
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


def is_dispatch(rule: Callable[[Request], bool] | str | None, method: str, url: str, request: Any = None) -> bool:
    """Whether a request counts as "sent": by default any method but GET/HEAD/OPTIONS, save a
    report the browser sends of its own (:func:`browser_report`); with a rule, what the rule
    matches (see :func:`matches`: a glob matches every method)."""
    if rule is None:
        return method.upper() not in _SAFE_METHODS and not browser_report(request)
    return matches(rule, method, url, request)


def browser_report(request: Any) -> bool:
    """Whether ``request`` is a report Chromium sends of its own: a Content-Security-Policy
    violation posted to the policy's ``report-uri`` as a page loads (a policy in report-only
    mode over a page with an inline style, as MoinMoin's). No script sends it (a page's
    ``fetch`` of the same type is a ``fetch``), it says only which rule the page broke, and no
    site acts on it: it is no effect, so it is not held, refused nor counted."""
    if getattr(request, "resource_type", None) != "other":
        return False
    kind = str((getattr(request, "headers", None) or {}).get("content-type", ""))
    return kind.split(";")[0].strip().lower() in _REPORTS


@dataclass(frozen=True)
class ChannelRequest:
    """What a ``dispatch=``/``sends=`` predicate sees of a request that is not a browser request
    (a WebSocket message: method ``"WEBSOCKET"``, its text or bytes as ``body``; a
    ``page.request`` call, with no body)."""

    method: str
    url: str
    body: str | bytes | None = None
