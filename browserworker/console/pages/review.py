"""Review: the runs waiting for a person (NEEDS_REVIEW), each with the step in doubt, its
request key and fingerprint and the evidence (the verifier's ``checked`` list, the responses,
the screenshot); Done (with an optional result), Not done or Failed journal the decision with
the operator's name and when, as ``browserworker resolve`` does."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ... import control
from ...errors import UsageError
from ...ops import journal_view, mask, screenshots
from ..web import act, console, read, redirect, render, write
from ._page import Page

__all__ = ["PAGE"]


def _items(store: Any) -> list[dict[str, Any]]:
    found = []
    for item in control.review_items(store):
        run = store.get_run(item.run_id)
        if run is None:
            continue
        shots = screenshots(journal_view(store, run))
        shot = item.evidence.get("screenshot")
        found.append(
            {
                "item": item,
                "evidence": mask(item.evidence, run),
                "run": run,
                "shot": shots.index(shot) if shot in shots else None,
            }
        )
    return found


async def review_page(request: Request) -> Response:
    items = await read(_items, console(request).store)
    return render(request, "review", "review.html", items=items)


async def resolve(request: Request) -> Response:
    login, form = await act(request)
    run_id, step = str(form.get("run_id", "")), str(form.get("step", ""))
    result = str(form.get("result") or "").strip() or None
    try:
        decision, value = control.parse_decision(str(form.get("decision")), result)
        run = await write(control.resolve, console(request).store, run_id, step, decision, result=value, who=login.name)
    except UsageError as exc:
        return redirect(request, "/review", f"not resolved: {exc}")
    return redirect(
        request, "/review", f"run {run.id}: {step} {decision.replace('_', ' ')} by {login.name}; now {run.state}"
    )


PAGE = Page(
    "review",
    "Review",
    "/review",
    [
        Route("/review", review_page, methods=["GET"]),
        Route("/review/resolve", resolve, methods=["POST"]),
    ],
)
