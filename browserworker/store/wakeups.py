"""Wake-ups: how an idle worker hears that a run became claimable, instead of waiting for its poll.

``store.wakeups(queues)`` gives a :class:`Wakeups`; the worker awaits :meth:`Wakeups.next`
beside its poll timer. A store that cannot notify (SQLite: one file, no server) gives
:class:`NoWakeups`, which never fires: the worker polls, as it always did. A wake-up only
says "try to claim now"; a missed one costs at most a poll interval.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["NoWakeups", "Wakeups"]


class Wakeups(Protocol):
    """Wake-ups for some queues, latched: one that came while nobody waited fires the next wait."""

    def next(self) -> asyncio.Future[None]:
        """A future of the running loop, done at the next wake-up (at once if one is pending)."""
        ...

    def close(self) -> None: ...


class NoWakeups:
    """Wake-ups of a store that has none: :meth:`next` never completes."""

    def next(self) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    def close(self) -> None:
        pass
