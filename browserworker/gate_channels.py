"""The dispatch gate on the two channels a route never sees: ``page.request`` / ``context.request``
calls and the WebSocket messages a page sends. Each is journaled like a held request (the
fenced dispatch commit) before it goes on; if that commit fails it never leaves. Before that
commit, every channel asks :func:`approved` (an ``approve=`` effect's person, see
:mod:`browserworker.approval_gate`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from playwright.async_api import APIResponse

from . import faults
from .errors import LeaseLost, StoreError
from .routes import SOCKET, ApiSend

if TYPE_CHECKING:  # pragma: no cover
    from .gate import DispatchGate

__all__ = ["API", "NOT_APPROVED", "WEBSOCKET", "api_call", "approved", "socket_message"]

API, WEBSOCKET = "api", "websocket"
NOT_APPROVED = RuntimeError("the request waits for approval: not sent")  # why the gate refused it


async def api_call(gate: DispatchGate, method: str, url: str, send: ApiSend) -> APIResponse:
    """A ``page.request`` call: journaled like a held request before it is sent."""
    if not gate.armed or not gate.effect.is_dispatch(method, url):
        return await send()
    if gate.refusal is not None or not gate.journal.alive:
        why = gate.refusal or LeaseLost("the run's lease is lost")
        gate.refused(method, url, why)
        raise why
    faults.hit("dispatch_held", gate.effect.id)
    if not await approved(gate, method, url, None, {}):
        why = gate.refusal or RuntimeError(str(NOT_APPROVED))  # raised into the effect: its own instance
        gate.refused(method, url, why)
        raise why
    outbox_id = await gate.commit(method, url, API)
    if outbox_id is None or not gate.holds():
        why = gate.refusal or LeaseLost("the lease ran out between the dispatch commit and the send")
        gate.refusal = why
        gate.refused(method, url, why)
        raise why
    gate.sent += 1
    assert gate.attempt is not None
    gate.extensions.notify("dispatched", gate.attempt, method, url)
    try:
        response = await send()
    except Exception as exc:
        await gate.outbox.failed(outbox_id, f"{type(exc).__name__}: {exc}")
        raise
    faults.hit("reply_lost", gate.effect.id)  # the target has answered; nothing of it is journaled yet
    await gate.outbox.answered(outbox_id, response.status, response.url, response.headers)
    faults.hit("after_response", gate.effect.id)
    gate.extensions.notify("response", gate.attempt, response.status, response.url)
    return response


async def socket_message(gate: DispatchGate, url: str, message: str | bytes, forward: Callable[[], None]) -> None:
    """A WebSocket message the page sends: journaled like a held request before it goes on."""
    if not gate.armed or not gate.effect.is_dispatch(SOCKET, url):
        forward()
        return
    if gate.refusal is not None or not gate.journal.alive:
        gate.refused(SOCKET, url, gate.refusal or LeaseLost("the run's lease is lost"))
        return
    faults.hit("dispatch_held", gate.effect.id)
    if not await approved(gate, SOCKET, url, message if isinstance(message, str) else None, {}):
        gate.refused(SOCKET, url, gate.refusal or NOT_APPROVED)  # dropped: the page's socket stays open
        return
    outbox_id = await gate.commit(SOCKET, url, WEBSOCKET)
    if outbox_id is None or not gate.holds():
        gate.refusal = gate.refusal or LeaseLost("the lease ran out between the dispatch commit and the send")
        gate.refused(SOCKET, url, gate.refusal)
        return
    gate.sent += 1
    assert gate.attempt is not None
    gate.extensions.notify("dispatched", gate.attempt, SOCKET, url)
    forward()


async def approved(gate: DispatchGate, method: str, url: str, body: str | None, headers: dict[str, str]) -> bool:
    """An approve= effect's request may go on: approved with this fingerprint (True), or held
    for a person and then refused (False: parked, rejected or expired; nothing leaves)."""
    if gate.approval is None:
        return True
    try:
        return await gate.approval.allow(method, url, body, headers)
    except (LeaseLost, StoreError) as exc:
        gate.refusal = exc
        return False
