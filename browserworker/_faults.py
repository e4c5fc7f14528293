"""Named fault-injection points: zero cost when off.

Switch on with the environment variable ``BROWSERWORKER_FAULTS`` or :func:`configure`::

    BROWSERWORKER_FAULTS="after_dispatch:submit=kill,after_response=raise@2"

Each rule is ``POINT[:STEP]=ACTION[@N]``: ``kill`` (SIGKILL this process), ``stop`` (SIGSTOP this
process: it stays paused until someone sends SIGCONT; it pauses only once no write transaction of
a store in this process is open, see :func:`guard`), ``raise``
(:class:`InjectedFault`), ``hang`` (block this process's thread forever, like a pause);
``@N`` fires on the Nth hit only (default: the first).
"""

from __future__ import annotations

import os
import signal
import threading
import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from .errors import InjectedFault

__all__ = ["CHAOS_POINTS", "POINTS", "FaultRule", "InjectedFault", "configure", "guard", "hit", "parse", "suspended"]

POINTS = (
    "before_intent_commit",  # the effect is about to journal its intent
    "after_intent_commit",  # intent committed, the effect function not yet run
    "dispatch_held",  # the gate holds an intercepted request; nothing about it is journaled yet
    "lease_expired_while_alive",  # the gate holds a dispatch, before its fenced commit
    "after_dispatch_commit",  # dispatched_at committed, the request not yet released
    "after_dispatch",  # the request released, no response yet
    "reply_lost",  # the target answered (the response reached the browser); nothing of it journaled
    "after_response",  # the response recorded in the outbox, the journal not yet updated
    "before_outcome_commit",  # the effect returned, its outcome not yet journaled
    "reclaimer_startup",  # recovery has marked an attempt UNKNOWN, no decision yet
)
ACTIONS = ("kill", "stop", "raise", "hang")

CHAOS_POINTS = (
    "before_intent_commit",
    "after_intent_commit",
    "dispatch_held",
    "after_dispatch_commit",
    "after_dispatch",
    "reply_lost",
    "after_response",
    "lease_expired_while_alive",
    "reclaimer_startup",
)
"""The points ``browserworker chaos`` crashes an effect at (a subset of :data:`POINTS`)."""
ENV = "BROWSERWORKER_FAULTS"


@dataclass
class FaultRule:
    point: str
    step: str | None
    action: str
    nth: int = 1
    hits: int = field(default=0, compare=False)


def parse(spec: str) -> list[FaultRule]:
    """Parse ``POINT[:STEP]=ACTION[@N],...``; ValueError names the bad rule."""
    rules = []
    for raw in filter(None, (part.strip() for part in spec.split(","))):
        target, sep, action = raw.partition("=")
        if not sep:
            raise ValueError(f"fault rule {raw!r} must look like POINT[:STEP]=ACTION[@N]")
        point, _, step = target.partition(":")
        action, _, nth = action.partition("@")
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r} (known: {', '.join(POINTS)})")
        if action not in ACTIONS:
            raise ValueError(f"unknown fault action {action!r} (known: {', '.join(ACTIONS)})")
        if nth and (not nth.isdigit() or int(nth) < 1):
            raise ValueError(f"fault rule {raw!r}: @N must be a positive whole number")
        rules.append(FaultRule(point, step or None, action, int(nth) if nth else 1))
    return rules


_rules: list[FaultRule] | None = None
_lock = threading.Lock()
# the locks a store holds around each of its write transactions (guard)
_guarded: weakref.WeakSet[Any] = weakref.WeakSet()
_GUARD_WAIT = 60.0  # seconds a stop waits for a transaction to end before it pauses anyway


def guard(lock: Any) -> None:
    """``lock`` is held around every write transaction of a store in this process: a ``stop``
    takes it before it pauses the process, so that a paused process holds no database lock (its
    store's thread is not caught between a ``BEGIN`` and its ``COMMIT``, a heartbeat's say) and a
    test can take the database's write lock while it is paused."""
    _guarded.add(lock)


@contextmanager
def _quiet() -> Iterator[None]:
    """Every guarded lock held (each waited for up to ``_GUARD_WAIT`` seconds)."""
    with ExitStack() as held:
        for lock in list(_guarded):
            if lock.acquire(timeout=_GUARD_WAIT):
                held.callback(lock.release)
        yield


def configure(spec: str | None) -> None:
    """Replace the active rules (``None`` or ``""`` switches injection off)."""
    global _rules
    _rules = parse(spec) if spec else None


@contextmanager
def suspended() -> Iterator[None]:
    """No rule fires inside the block (a clean run beside faulty ones); the rules come back after."""
    global _rules
    saved, _rules = _rules, None
    try:
        yield
    finally:
        _rules = saved


def hit(point: str, step: str | None = None) -> None:
    """Mark that execution reached ``point`` (for ``step``); fire a matching rule."""
    if _rules is None:
        return
    with _lock:
        fire = None
        for rule in _rules:
            if rule.point == point and rule.step in (None, step):
                rule.hits += 1
                if rule.hits == rule.nth:
                    fire = rule
    if fire is None:
        return
    if fire.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fire.action == "stop":
        with _quiet():
            os.kill(os.getpid(), signal.SIGSTOP)
        return
    if fire.action == "raise":
        raise InjectedFault(f"injected fault at {point} (step {step})")
    threading.Event().wait()  # hang: never returns


ENV_ERROR: str | None = None
"""Why ``BROWSERWORKER_FAULTS`` could not be parsed, if it could not (checked by the runner)."""

try:
    configure(os.environ.get(ENV))
except ValueError as _exc:
    ENV_ERROR = f"{ENV}: {_exc}"
