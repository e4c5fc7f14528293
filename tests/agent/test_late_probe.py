"""The late probe of a ref's element beside its action (browserworker.agent._session._LateProbe):
only a probe that looked and found no element stops the action."""

from __future__ import annotations

import asyncio

import pytest

from browserworker.agent import _session
from browserworker.errors import ToolCallError


class _Session:
    """What the probe reads of a session: its move counter and its probe, which fails as told
    and then lets the action end."""

    def __init__(self, error: ToolCallError) -> None:
        self.moves = 0
        self.error = error
        self.probed = asyncio.Event()

    async def probe(self, *args: object) -> object:
        self.probed.set()
        raise self.error


async def _action(session: _Session) -> str:
    await session.probed.wait()
    await asyncio.sleep(0)  # the probe's failure is heard before the action ends
    await asyncio.sleep(0)
    return "done"


def _run(error: ToolCallError, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(_session, "PROBE_AFTER", 0)

    async def scenario() -> str:
        session = _Session(error)
        probe = _session._LateProbe(session, "[data-bw-ref='e3']", "e3", None)  # type: ignore[arg-type]
        return str(await probe.around(_action(session)))

    return asyncio.run(scenario())


def test_a_probe_that_could_not_look_does_not_stop_the_action(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page navigated under the probe (a link the action just clicked): its evaluation
    failed, which says nothing of the element; the action's own outcome stands."""
    destroyed = ToolCallError("selector '[data-bw-ref=\"e3\"]' is not valid: Execution context was destroyed")
    assert _run(destroyed, monkeypatch) == "done"


def test_a_probe_that_found_no_element_stops_the_action(monkeypatch: pytest.MonkeyPatch) -> None:
    """The element is not on the page and the page has not moved on: the action could only be
    waiting for it, so it is stopped and the call answers that the ref is stale."""
    with pytest.raises(ToolCallError, match="is stale"):
        _run(_session._stale("e3"), monkeypatch)
