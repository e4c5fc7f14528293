"""The login step of a flow with a session: ``@flow.login`` and ``@login.check``.

``Flow(..., session=KEY)`` keeps a signed-in browser state under ``KEY`` (see
:mod:`browserworker.sessions`); its ``@flow.login`` step is always the first step (id
``login``) and runs only when no usable saved state signs the run in.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import FlowDefinitionError
from .flow import Action, SendRule, StepContext, StepFn, _check_rule, _where

if TYPE_CHECKING:  # pragma: no cover
    from .flow import Flow

__all__ = ["CheckFn", "Login", "add_login"]

CheckFn = Callable[[StepContext[Any]], Awaitable[bool]]


@dataclass
class Login(Action):
    """The login of a flow with ``Flow(session=...)`` (``@flow.login``): always its first step, id ``login``.

    It runs only when there is no saved session for the run's key (or the saved one is
    expired, unreadable, or ``@login.check`` says the page is not signed in); after it, the
    browser context's storage state is saved for later runs (:mod:`browserworker.sessions`).
    """

    checker: CheckFn | None = field(default=None, repr=False)

    def check(self, fn: CheckFn) -> CheckFn:
        """Register the check that a reused session is signed in (``async def``, returns a bool)."""
        if not inspect.iscoroutinefunction(fn):
            raise FlowDefinitionError(f"{_where(fn)}: session check {fn.__name__!r} must be `async def`")
        if self.checker is not None:
            raise FlowDefinitionError(f"{_where(fn)}: the login of this flow already has a check")
        self.checker = fn
        return fn


def add_login(flow: Flow[Any], fn: StepFn, *, sends: SendRule, retries: int) -> Login:
    """Add ``fn`` as ``flow``'s login, first of its steps (whatever was declared before it).
    It may send what ``sends`` says (default: anything: a login form's POST is safe to repeat)."""
    if flow.session is None:
        raise FlowDefinitionError(f"{_where(fn)}: @flow.login needs Flow(..., session=KEY): the key the "
                                  "saved login is kept under")
    if flow.login_step is not None:
        raise FlowDefinitionError(f"{_where(fn)}: flow {flow.name!r} already has a login")
    if not isinstance(sends, bool):
        _check_rule(_where(fn), "sends=", sends)
    step = Login(id="login", fn=fn, retries=retries, sends=sends)
    flow._add(step)
    flow._steps.insert(0, flow._steps.pop())
    return step
