"""The dashboard's runs: a list of runs and a run's page (goal, status, convergence,
cards by status as a progress bar, what was verified, recent events, transitions)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from laneboard.board.authority import Caller, require
from laneboard.domain.model import Actor
from laneboard.domain.runs import TRANSITIONS, RunStatus, card_class
from laneboard.domain.status import Status
from laneboard.errors import bad_input
from laneboard.server.auth import actor_of
from laneboard.server.http import query_text

if TYPE_CHECKING:
    from laneboard.server.app import Server

ORDER = [s.value for s in Status]  # the progress bar's segments, in board order


def progress(cards: dict[str, int]) -> list[dict[str, Any]]:
    """The run's cards by status as bar segments (percent of the run's cards)."""
    total = sum(cards.values())
    return [
        {
            "status": s,
            "n": cards[s],
            "pct": round(100 * cards[s] / total, 1),
            "class": card_class(s),
        }
        for s in ORDER
        if cards.get(s)
    ]


def list_context(srv: Server, actor: Actor, project: str | None) -> dict[str, Any]:
    require(actor, Caller.PERSON, "read runs")
    runs = srv.board.runs(project=project, limit=200)
    for r in runs:
        r["bar"] = progress(r["cards"])
    return {"actor": actor, "runs": runs, "project": project, "projects": srv.board.projects()}


def verified(board: Any, card: Any) -> dict[str, Any]:
    """What is known to have been checked for a card: its last report's check evidence,
    its reviews' verdicts and whether its lane landed."""
    from laneboard.server.dashboard import reviews
    from laneboard.workspace.lanes import lanes_of

    reports = board.reports(card.id)
    evidence = reports[-1].evidence if reports else []
    with board.store.read() as tx:
        lanes = lanes_of(tx, card.id)
    verdicts = [r["verdict"].decision or "unreadable" for r in reviews(board, card) if r["verdict"]]
    return {
        "checks_passed": sum(1 for e in evidence if e.exit_code == 0),
        "checks": len(evidence),
        "reviews": verdicts,
        "landed": any(lane.state == "landed" for lane in lanes),
    }


def run_context(srv: Server, actor: Actor, run_id: int) -> dict[str, Any]:
    require(actor, Caller.PERSON, "read runs")
    board = srv.board
    head = board.event_head()  # before the reads: the live stream misses nothing after
    run = board.run(run_id)
    cards = board.list_cards(run_id=run_id, limit=1000)
    status = RunStatus(run["status"])
    actions = [a for a, (prior, _target) in TRANSITIONS.items() if status in prior]
    events = [e.to_dict() for e in board.events_tail(50, run_id=run_id)[0]]
    return {
        "actor": actor,
        "run": run,
        "bar": progress(run["cards"]),
        "cards": [(c, verified(board, c)) for c in cards],
        "actions": actions,
        "events": list(reversed(events)),
        "last_event": head,
    }


def _run_id(request: Request) -> int:
    raw = request.path_params["id"]
    if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) < 2**63:
        raise bad_input(f"run {raw[:20]!r} is not a run id", "open a run from /runs")
    return int(raw)


def routes(srv: Server) -> list[BaseRoute]:
    from laneboard.server.dashboard import render_page

    async def runs_page(request: Request) -> Response:
        actor = actor_of(request.scope)
        project = query_text(request.query_params.get("project"), "project") or None
        ctx = await anyio.to_thread.run_sync(list_context, srv, actor, project)
        return HTMLResponse(render_page("runs.html", ctx))

    async def run_page(request: Request) -> Response:
        actor = actor_of(request.scope)
        ctx = await anyio.to_thread.run_sync(run_context, srv, actor, _run_id(request))
        return HTMLResponse(render_page("run.html", ctx))

    async def run_partial(request: Request) -> Response:
        actor = actor_of(request.scope)
        ctx = await anyio.to_thread.run_sync(run_context, srv, actor, _run_id(request))
        return HTMLResponse(render_page("_run.html", ctx))

    return [
        Route("/runs", runs_page, methods=["GET"]),
        Route("/runs/{id}", run_page, methods=["GET"]),
        Route("/ui/runs/{id}", run_partial, methods=["GET"]),
    ]
