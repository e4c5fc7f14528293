"""A flow's login session options: ``Flow(..., session=KEY, session_max_age=AGE)``.

``session`` is the key a run's saved login is kept under: a string, or a function of the
run's validated inputs (``session=lambda inputs: inputs.username``); checked when the flow is
loaded, and computed when a run is created, before anything is written. What is saved and
how it is reused: :mod:`browserworker.runtime._login_sessions`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..errors import FlowDefinitionError, InputError

__all__ = ["SessionKey", "check", "key"]

#: what ``Flow(session=...)`` takes
SessionKey = str | Callable[[Any], str] | None


def check(session: SessionKey, max_age: timedelta | float | None, where: str) -> tuple[SessionKey, float | None]:
    """``session`` as given and ``max_age`` in seconds, or :class:`FlowDefinitionError`."""
    if session is not None and not (callable(session) or (isinstance(session, str) and session)):
        raise FlowDefinitionError(f"{where}: session= must be a non-empty string or a function of the inputs")
    seconds = max_age.total_seconds() if isinstance(max_age, timedelta) else max_age
    if seconds is not None and seconds <= 0:
        raise FlowDefinitionError(f"{where}: session_max_age must be positive")
    return session, None if seconds is None else float(seconds)


def key(session: SessionKey, inputs: Any, where: str) -> str | None:
    """The session key of a run with these inputs (None: the flow has no session)."""
    if session is None or isinstance(session, str):
        return session
    try:
        found = session(inputs)
    except Exception as exc:  # noqa: BLE001 - the flow's own code: say where
        raise InputError(f"{where}: the session key from the inputs failed: {exc!r}") from exc
    if not isinstance(found, str) or not found:
        raise InputError(f"{where}: the session key must be a non-empty string, not {found!r}")
    return found
