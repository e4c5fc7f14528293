"""Approvals: the effects waiting for a person before they are sent, each with the request that
would leave (method, URL, fields; secrets masked when it was asked) and a screenshot of the page
as it was about to send; Approve and Reject (with a reason) journal the decision with the
operator's name, as ``browserworker approve`` / ``reject`` do."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from ... import control
from ...errors import UsageError
from ...ops import screenshot_file
from ..web import act, console, read, redirect, render, write
from ._page import Page

__all__ = ["PAGE"]


async def approvals_page(request: Request) -> Response:
    waiting = await read(control.list_approvals, console(request).store)
    return render(request, "approvals", "approvals.html", approvals=waiting)


async def screenshot(request: Request) -> Response:
    """The screenshot an approval that is waiting names, from inside the evidence directory."""
    c = console(request)
    wanted = int(request.path_params["approval_id"])
    waiting = await read(control.list_approvals, c.store)
    found = next((a for a in waiting if a.id == wanted and a.screenshot), None)
    path = None if found is None else screenshot_file(str(found.screenshot), c.evidence_dir)
    if path is None:
        raise HTTPException(404, "no such screenshot")
    return FileResponse(path, media_type="image/png")


async def decide(request: Request) -> Response:
    login, form = await act(request)
    run_id, step = str(form.get("run_id", "")), str(form.get("step", ""))
    decision = str(form.get("decision", ""))
    try:
        if decision == "approve":
            await write(control.approve, console(request).store, run_id, step, who=login.name)
        elif decision == "reject":
            reason = str(form.get("reason") or "").strip() or None
            await write(control.reject, console(request).store, run_id, step, who=login.name, reason=reason)
        else:
            raise UsageError(f"unknown decision {decision!r}")
    except UsageError as exc:
        return redirect(request, "/approvals", f"not decided: {exc}")
    return redirect(request, "/approvals", f"run {run_id}: {step} {decision}d by {login.name}")


PAGE = Page(
    "approvals",
    "Approvals",
    "/approvals",
    [
        Route("/approvals", approvals_page, methods=["GET"]),
        Route("/approvals/{approval_id:int}/screenshot", screenshot, methods=["GET"]),
        Route("/approvals/decide", decide, methods=["POST"]),
    ],
)
