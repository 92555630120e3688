"""The web dashboard: server-rendered pages, live over SSE, actions through the REST API."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import anyio.to_thread
import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from laneboard.board import access
from laneboard.domain.model import Actor
from laneboard.domain.status import TRANSITIONS, Status
from laneboard.server import status as st
from laneboard.server.auth import actor_of
from laneboard.server.http import card_ref, query_int, query_text

if TYPE_CHECKING:
    from laneboard.server.app import Server

COLUMNS = [s.value for s in Status]
LOG_LIMIT = 64 * 1024
FILTERS = ("project", "run", "assignee", "label")

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("laneboard.server", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _render(name: str, **ctx: Any) -> HTMLResponse:
    return HTMLResponse(_env.get_template(name).render(**ctx))


def _filters(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in FILTERS:
        v = query_text(request.query_params.get(name), name)
        if v:
            out[name] = v
    if "run" in out:
        query_int(out["run"], "run", 0, 0, 2**53)
    return out


def board_context(srv: Server, actor: Actor, filters: dict[str, str]) -> dict[str, Any]:
    board = srv.board
    cards = board.list_cards(
        project=filters.get("project"),
        assignee=filters.get("assignee"),
        label=filters.get("label"),
        run_id=int(filters["run"]) if filters.get("run") else None,
        limit=5000,
    )
    cards = access.filter_cards(board, actor, cards)
    columns: dict[str, list[Any]] = {s: [] for s in COLUMNS}
    for c in cards:
        columns[c.status.value].append(c)
    supervisor = None
    doctor = None
    if actor.is_human:
        try:
            supervisor = st.status(srv.store)
        except Exception as exc:
            supervisor = {"supervisor": {"state": "unknown", "detail": str(exc)[:200]}}
        try:
            report = st.doctor(srv.store)
            doctor = {"attention": report["attention"], "reasons": report["reasons"]}
        except Exception as exc:
            doctor = {"attention": True, "reasons": [f"the doctor report failed: {exc}"[:200]]}
    with srv.store.read() as tx:
        last_event = tx.max_event_id()
    return {
        "actor": actor,
        "columns": columns,
        "projects": board.projects(),
        "filters": filters,
        "query": urlencode(filters),
        "supervisor": supervisor,
        "doctor": doctor,
        "last_event": last_event,
        "is_human": actor.is_human,
    }


def _log_tail(path: str | None, roots: list[str]) -> str | None:
    """A check log's tail, only from inside a project directory or laneboard's state."""
    if not path:
        return None
    try:
        real = Path(path).resolve()
        if not any(real.is_relative_to(Path(r).resolve()) for r in roots if r):
            return None
        if not real.is_file():
            return None
        with real.open("rb") as fh:
            size = real.stat().st_size
            fh.seek(max(0, size - LOG_LIMIT))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def _state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "laneboard")


def card_context(srv: Server, actor: Actor, ref: str) -> dict[str, Any]:
    board = srv.board
    detail = access.detail(board, actor, ref)
    card = board.get(ref)
    events = [e.to_dict() for e in board.events(0, card=ref, limit=500)]
    project = board.project(card.project_id)
    moves = sorted(s.value for s in TRANSITIONS[card.status])
    if card.status is Status.TODO:
        moves = [m for m in moves if m != "in_progress"]
    logs: dict[str, str] = {}
    diff = None
    if actor.is_human:
        from laneboard.workspace.diff import lane_diff

        diff = lane_diff(srv.store, card.id)
        roots = [project.path or "", _state_dir()]
        for rep in detail["reports"]:
            for i, ev in enumerate(rep["evidence"]):
                text = _log_tail(ev.get("log_path"), roots)
                if text is not None:
                    logs[f"{rep['id']}:{i}"] = text
    return {
        "actor": actor,
        "card": detail,
        "project": project,
        "events": events[-200:],
        "moves": moves,
        "logs": logs,
        "is_human": actor.is_human,
        "human_acceptance": card.acceptance_mode.value == "human",
        "last_event": events[-1]["id"] if events else 0,
        "lane_diff": diff,
    }


def routes(srv: Server) -> list[BaseRoute]:
    async def index(request: Request) -> Response:
        actor = actor_of(request.scope)
        filters = _filters(request)
        ctx = await anyio.to_thread.run_sync(board_context, srv, actor, filters)
        return _render("board.html", **ctx)

    async def board_partial(request: Request) -> Response:
        actor = actor_of(request.scope)
        filters = _filters(request)
        ctx = await anyio.to_thread.run_sync(board_context, srv, actor, filters)
        return _render("_board.html", **ctx)

    async def card_page(request: Request) -> Response:
        actor = actor_of(request.scope)
        ref = card_ref(request.path_params["ref"])
        ctx = await anyio.to_thread.run_sync(card_context, srv, actor, ref)
        return _render("card.html", **ctx)

    async def card_partial(request: Request) -> Response:
        actor = actor_of(request.scope)
        ref = card_ref(request.path_params["ref"])
        ctx = await anyio.to_thread.run_sync(card_context, srv, actor, ref)
        return _render("_card.html", **ctx)

    return [
        Route("/", index, methods=["GET"]),
        Route("/ui/board", board_partial, methods=["GET"]),
        Route("/cards/{ref}", card_page, methods=["GET"]),
        Route("/ui/cards/{ref}", card_partial, methods=["GET"]),
    ]
