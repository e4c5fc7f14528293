"""Runs: filtered by state, flow and queue, searched by run id or request key, a page at a
time; cancel or requeue one or a selection. A run's page: its timeline of attempts, decisions
and events, its outbox, its inputs and results (secrets masked), its screenshots and recordings."""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from ... import control
from ...errors import UsageError
from ...ops import journal_view, mask, recordings_of, screenshot_file, screenshots
from ...states import TERMINAL_RUN_STATES, RunState
from ..web import act, console, read, redirect, render, write
from ._page import Page

__all__ = ["PAGE"]

PER_PAGE = 50
CANCELLABLE = frozenset(
    {RunState.QUEUED, RunState.LEASED, RunState.RUNNING, RunState.NEEDS_REVIEW, RunState.AWAITING_APPROVAL}
)
REQUEUEABLE = frozenset({RunState.FAILED, RunState.CANCELLED})


def _filters(request: Request) -> dict[str, Any]:
    q = request.query_params
    state = q.get("state") or None
    if state is not None and state not in RunState.__members__:
        raise HTTPException(400, f"no run state {state!r}")
    page = q.get("page", "1")
    return {
        "state": state,
        "flow": q.get("flow") or None,
        "queue": q.get("queue") or None,
        "q": (q.get("q") or "").strip()[:200] or None,
        "page": max(1, int(page)) if page.isdigit() else 1,
    }


def _list(store: Any, f: dict[str, Any]) -> dict[str, Any]:
    runs, total = store.search_runs(
        state=RunState(f["state"]) if f["state"] else None,
        flow=f["flow"],
        queue=f["queue"],
        text=f["q"],
        limit=PER_PAGE,
        offset=(f["page"] - 1) * PER_PAGE,
    )
    queues = sorted({c.queue for c in store.runs_by_state()})
    return {
        "runs": runs,
        "total": total,
        "pages": max(1, -(-total // PER_PAGE)),
        "flows": store.run_flows(),
        "queues": queues,
        "states": [s.value for s in RunState],
    }


async def runs_page(request: Request) -> Response:
    f = _filters(request)
    data = await read(_list, console(request).store, f)
    params = {k: v for k, v in f.items() if k != "page"}
    return render(
        request, "runs", "runs.html", filters=f, params=params, cancellable=CANCELLABLE, requeueable=REQUEUEABLE, **data
    )


def _detail(c: Any, run_id: str) -> dict[str, Any] | None:
    run = c.store.get_run(run_id)
    if run is None:
        return None
    raw = journal_view(c.store, run)
    shots, view = screenshots(raw), mask(raw, run)  # the files as the journal names them; the page masked
    return {
        "run": run,
        "view": view,
        "shots": list(enumerate(shots)),
        "recordings": recordings_of(run.id, c.recordings_dir),
        "terminal": run.state in TERMINAL_RUN_STATES,
        "timeline": _timeline(view),
    }


def _timeline(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's events, oldest first, each with the attempt it is about (if any)."""
    attempts = {(a["step_id"], a["attempt_no"]): a for a in view["journal"]}
    return [{**e, "attempt": attempts.get((e["step_id"], e["attempt_no"]))} for e in view["events"]]


async def run_page(request: Request) -> Response:
    c = console(request)
    data = await read(_detail, c, request.path_params["run_id"])
    if data is None:
        raise HTTPException(404, "no such run")
    return render(request, "runs", "run.html", cancellable=CANCELLABLE, requeueable=REQUEUEABLE, **data)


async def screenshot(request: Request) -> Response:
    """A screenshot the run's journal names, by its number on the run's page."""
    c = console(request)
    data = await read(_detail, c, request.path_params["run_id"])
    n = request.path_params["n"]
    if data is None or n >= len(data["shots"]):
        raise HTTPException(404, "no such screenshot")
    path = screenshot_file(data["shots"][n][1], c.evidence_dir)
    if path is None:
        raise HTTPException(404, "the screenshot is not in the evidence directory")
    return FileResponse(path, media_type="image/png")


async def trace(request: Request) -> Response:
    """A Playwright trace of a recording of the run (open it with ``playwright show-trace``)."""
    c = console(request)
    found = await read(recordings_of, request.path_params["run_id"], c.recordings_dir)
    for rec in found:
        if rec.name == request.path_params["name"] and request.path_params["n"] < len(rec.traces):
            path = rec.traces[request.path_params["n"]]
            return FileResponse(path, media_type="application/zip", filename=path.name)
    raise HTTPException(404, "no such trace")


def _apply(store: Any, action: str, ids: list[str], who: str) -> dict[str, str]:
    if action == "cancel":
        return control.cancel_many(store, ids, who=who)
    return control.requeue_many(store, ids, who=who)


def summary(action: str, outcomes: dict[str, str]) -> str:
    ok = [rid for rid, o in outcomes.items() if not o.startswith("error")]
    refused = [f"{rid} ({o[7:]})" for rid, o in outcomes.items() if o.startswith("error")]
    done = {"cancel": "cancelled or asked to stop", "requeue": "requeued"}[action]
    line = f"{len(ok)} run{'s' if len(ok) != 1 else ''} {done}"
    return line + (f"; refused: {'; '.join(refused[:5])}" if refused else "")


async def runs_action(request: Request) -> Response:
    """Cancel or requeue the runs selected (``run`` fields) or the one run named in the form."""
    login, form = await act(request)
    action = str(form.get("action"))
    if action not in ("cancel", "requeue"):
        raise HTTPException(400, "unknown action")
    ids = [str(v) for v in form.getlist("run")][:1000]
    if not ids:
        return redirect(request, _back(form), "nothing selected")
    try:
        outcomes = await write(_apply, console(request).store, action, ids, login.name)
    except UsageError as exc:
        return redirect(request, _back(form), str(exc))
    return redirect(request, _back(form), summary(action, outcomes))


def _back(form: Any) -> str:
    """Where an action returns: the console page it came from (never another site)."""
    back = str(form.get("back") or "/runs")
    return back if back.startswith("/") and not back.startswith("//") and "\\" not in back else "/runs"


PAGE = Page(
    "runs",
    "Runs",
    "/runs",
    [
        Route("/runs", runs_page, methods=["GET"]),
        Route("/runs/action", runs_action, methods=["POST"]),
        Route("/runs/{run_id}", run_page, methods=["GET"]),
        Route("/runs/{run_id}/screenshot/{n:int}", screenshot, methods=["GET"]),
        Route("/runs/{run_id}/trace/{name}/{n:int}", trace, methods=["GET"]),
    ],
)
