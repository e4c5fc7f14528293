"""A flow's browser context options: what each run's (and attempt's) Playwright context is made with.

``Flow(..., context={"locale": "fr-FR", "http_credentials": {...}})``, or a function of the
run's validated inputs (``context=lambda inputs: {"http_credentials": {...}}``). The names are
``Browser.new_context``'s, checked when the flow is loaded (a static mapping) or when the run's
inputs are validated (a function), before anything is written. ``service_workers`` is the
kit's own (blocked, so the dispatch gate sees every request) and may not be set.

The passwords in them (``http_credentials.password``, ``proxy.password``) are secrets:
:func:`secret_values` names them so that recordings and logs scrub them like secret inputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import FlowDefinitionError, InputError, suggest

__all__ = ["ContextOptions", "check", "resolve", "secret_values"]

#: what ``Flow(context=...)`` takes
ContextOptions = Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None

_OURS = {"service_workers": "the kit blocks service workers so that its dispatch gate sees every request"}
_KNOWN: list[frozenset[str]] = []


def _known() -> frozenset[str]:
    if not _KNOWN:
        from playwright.async_api import Browser

        _KNOWN.append(frozenset(inspect.signature(Browser.new_context).parameters) - {"self"})
    return _KNOWN[0]


def check(options: Mapping[str, Any], where: str, error: type[Exception] = FlowDefinitionError) -> dict[str, Any]:
    """``options`` as a dict, or ``error`` naming each name Playwright does not take (or ours)."""
    if not isinstance(options, Mapping):
        raise error(f"{where}: context options must be a mapping of Browser.new_context arguments")
    problems = [f"{name!r}: {_OURS[name]}" for name in options if name in _OURS]
    unknown = sorted(set(options) - _known() - set(_OURS))
    if unknown:
        named = ", ".join(f"{name!r}{suggest(name, _known())}" for name in unknown)
        problems.append(f"not browser context options: {named} (Browser.new_context's arguments)")
    if problems:
        raise error(f"{where}: {'; '.join(problems)}")
    return dict(options)


def resolve(options: ContextOptions, inputs: Any, where: str) -> dict[str, Any]:
    """The context options of one run: the static mapping, or the function's answer for its inputs."""
    if options is None:
        return {}
    if callable(options):
        try:
            computed = options(inputs)
        except Exception as exc:  # noqa: BLE001 - the flow's own code: say where
            raise InputError(f"{where}: context options from the inputs failed: {exc!r}") from exc
        return check(computed, where, InputError)
    return dict(options)


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The passwords in ``options`` (to scrub from whatever is written)."""
    found = []
    for key in ("http_credentials", "proxy"):
        part = options.get(key)
        if isinstance(part, Mapping) and part.get("password"):
            found.append(str(part["password"]))
    return found
