"""Which requests count as "sent": the ``dispatch=`` and ``sends=`` rules of a flow's steps."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.async_api import Request

__all__ = ["ChannelRequest", "is_dispatch", "matches", "parse_rule", "rule_problem"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_METHOD_RULE = re.compile(r"^([A-Z]+(?:\|[A-Z]+)*)\s+(\S.*)$")
_METHODS = re.compile(r"[A-Z]+(?:\|[A-Z]+)*")


def parse_rule(rule: str) -> tuple[frozenset[str] | None, str]:
    """``"glob"`` → (None: any method, glob); ``"POST glob"`` / ``"POST|PUT glob"`` → (methods, glob)."""
    found = _METHOD_RULE.match(rule.strip())
    if found:
        return frozenset(found.group(1).split("|")), found.group(2).strip()
    return None, rule.strip()


def rule_problem(rule: object) -> str | None:
    """What is wrong with ``rule`` as a rule of ``dispatch=`` / ``sends=`` (None: nothing; a
    predicate is taken as it is)."""
    if callable(rule):
        return None
    if not isinstance(rule, str) or not rule.strip():
        return f"must be a URL glob, 'METHOD glob' or a predicate, not {rule!r}"
    methods, glob = parse_rule(rule)
    if methods is None and _METHODS.fullmatch(glob):
        return f"{rule!r} names methods but no URL glob (write {glob + ' *'!r} for any URL)"
    return None


def matches(rule: Callable[[Request], bool] | str, method: str, url: str, request: Any = None) -> bool:
    """Whether a request matches a rule: a URL glob (any method), ``"METHOD glob"``, or a predicate.

    A predicate is given the Playwright request, or for a WebSocket message or an API-request
    call (which have none) a :class:`ChannelRequest` with the same ``method`` and ``url``.
    """
    if isinstance(rule, str):
        methods, glob = parse_rule(rule)
        return (methods is None or method.upper() in methods) and fnmatch.fnmatchcase(url, glob)
    return bool(rule(request if request is not None else ChannelRequest(method.upper(), url)))  # type: ignore[arg-type]


def is_dispatch(rule: Callable[[Request], bool] | str | None, method: str, url: str, request: Any = None) -> bool:
    """Whether a request counts as "sent": by default any method but GET/HEAD/OPTIONS; with a
    rule, what the rule matches (see :func:`matches`: a glob matches every method)."""
    if rule is None:
        return method.upper() not in _SAFE_METHODS
    return matches(rule, method, url, request)


@dataclass(frozen=True)
class ChannelRequest:
    """What a ``dispatch=``/``sends=`` predicate sees of a request that is not a browser request
    (a WebSocket message: method ``"WEBSOCKET"``; a ``page.request`` call)."""

    method: str
    url: str
