"""Disarming what a page would send as its document is unloaded.

Chromium sends what a document sends on ``pagehide``, ``unload`` or ``visibilitychange`` (a
``sendBeacon``, a ``keepalive`` fetch) after the document is gone: no route sees it, no request
event reports it, offline emulation does not stop it (docs/channels.md). A page armed that way
when it loads sends again each time it is loaded and left. When an effect is already decided
(skipped as SUCCEEDED in a resumed pass, or about to be asked of its verifier) the page the
pass prepared for it must not send the effect's unload send again: :func:`disarm_unload`
removes the main frame's unload listeners first (through the DevTools protocol, which sees
``addEventListener`` listeners and ``on…`` handlers alike).
"""

from __future__ import annotations

from playwright.async_api import Page

from ..logs import get_logger

__all__ = ["UNLOAD_EVENTS", "disarm_unload"]

log = get_logger("browserworker.gate")

UNLOAD_EVENTS = ("pagehide", "unload", "beforeunload", "visibilitychange", "freeze")
"""The events a document may send on as it is left, hidden or unloaded."""

_REMOVE = """function(type, handler, capture) {
  if (handler) this.removeEventListener(type, handler, capture);
  if (('on' + type) in this) this['on' + type] = null;
}"""


async def disarm_unload(page: Page) -> list[str]:
    """Remove the unload listeners of ``page``'s main-frame ``window`` and ``document``; the
    event types removed (empty: none, or the page is gone). Never raises."""
    removed: list[str] = []
    try:
        session = await page.context.new_cdp_session(page)
    except Exception as exc:  # closed or crashed: it sends nothing more
        log.debug("page not disarmed", error=str(exc))
        return removed
    try:
        for expression in ("window", "document"):
            target = (
                await session.send(
                    "Runtime.evaluate", {"expression": expression, "objectGroup": "browserworker-unload"}
                )
            )["result"]
            object_id = target.get("objectId")
            if object_id is None:
                continue
            found = await session.send("DOMDebugger.getEventListeners", {"objectId": object_id})
            for listener in found.get("listeners", []):
                kind = listener.get("type")
                if kind not in UNLOAD_EVENTS:
                    continue
                handler = (listener.get("handler") or {}).get("objectId")
                args = [
                    {"value": kind},
                    {"objectId": handler} if handler else {"value": None},
                    {"value": bool(listener.get("useCapture"))},
                ]
                await session.send(
                    "Runtime.callFunctionOn", {"objectId": object_id, "functionDeclaration": _REMOVE, "arguments": args}
                )
                removed.append(kind)
        await session.send("Runtime.releaseObjectGroup", {"objectGroup": "browserworker-unload"})
    except Exception as exc:  # the page navigated or closed meanwhile
        log.debug("page not fully disarmed", error=str(exc), removed=removed)
    finally:
        try:
            await session.detach()
        except Exception:
            pass
    return removed
