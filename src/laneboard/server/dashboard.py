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
from laneboard.errors import LaneboardError, bad_input
from laneboard.server import status as st
from laneboard.server.auth import actor_of
from laneboard.server.http import card_ref, query_int, query_text

if TYPE_CHECKING:
    from laneboard.server.app import Server

COLUMNS = [s.value for s in Status]
LOG_LIMIT = 64 * 1024
FILTERS = ("project", "run", "assignee", "label", "q", "sort")
SORTS = {
    "priority": lambda c: (c.priority, c.id),
    "age": lambda c: (c.created_at, c.id),
    "status_time": lambda c: (c.status_since, c.id),
}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("laneboard.server", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_page(name: str, ctx: dict[str, Any]) -> str:
    """A template rendered with its context (the page's HTML)."""
    return _env.get_template(name).render(**ctx)


def _render(name: str, **ctx: Any) -> HTMLResponse:
    return HTMLResponse(render_page(name, ctx))


def _filters(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in FILTERS:
        v = query_text(request.query_params.get(name), name)
        if v:
            out[name] = v
    if "run" in out:
        query_int(out["run"], "run", 0, 0, 2**53)
    if out.get("sort") not in (None, *SORTS):
        raise bad_input(
            f"sort={out['sort'][:20]!r} is not a board order",
            "use sort=priority, age or status_time (or leave it out for the board's order)",
        )
    return out


def board_context(srv: Server, actor: Actor, filters: dict[str, str]) -> dict[str, Any]:
    board = srv.board
    last_event = board.event_head()  # before the reads: the live stream misses nothing after
    cards = board.list_cards(
        project=filters.get("project"),
        assignee=filters.get("assignee"),
        label=filters.get("label"),
        run_id=int(filters["run"]) if filters.get("run") else None,
        text=filters.get("q"),
        limit=5000,
    )
    cards = access.filter_cards(board, actor, cards)
    if filters.get("sort"):
        cards.sort(key=SORTS[filters["sort"]])
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
    return {
        "session_refs": _session_refs(board, supervisor),
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


def _session_refs(board: Any, supervisor: dict[str, Any] | None) -> dict[int, str]:
    """The card reference of each live session's card (the panel names cards, not ids)."""
    refs: dict[int, str] = {}
    for s in (supervisor or {}).get("sessions") or []:
        cid = s.get("card_id")
        if isinstance(cid, int) and cid not in refs:
            try:
                refs[cid] = board.get(cid).ref
            except LaneboardError:
                continue
    return refs


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


def _lane_options(request: Request) -> dict[str, Any]:
    """The card page's diff view from its query: round, page, unified or side by side."""
    q = request.query_params
    view = q.get("view") or "unified"
    if view not in ("unified", "split"):
        raise bad_input(f"view={view[:20]!r} is not a diff view", "use view=unified or view=split")
    return {
        "round": query_int(q.get("round"), "round", 0, 0, 10_000) or None,
        "page": query_int(q.get("page"), "page", 1, 1, 1_000_000),
        "view": view,
    }


def _scope(request: Request) -> dict[str, Any]:
    """What the pictures page draws: a run, an epic's children, a project, or everything."""
    q = request.query_params
    return {
        "run": query_int(q.get("run"), "run", 0, 0, 2**53) or None,
        "parent": card_ref(q["parent"]) if q.get("parent") else None,
        "project": query_text(q.get("project"), "project") or None,
    }


def _lane_href(opts: dict[str, Any]) -> Any:
    def href(anchor: str = "lane", **changes: Any) -> str:
        merged = {**opts, **changes}
        query = {k: v for k, v in merged.items() if v not in (None, "", "unified", 1)}
        return ("?" + urlencode(query) if query else "?") + "#" + anchor

    return href


def card_context(
    srv: Server, actor: Actor, ref: str, opts: dict[str, Any] | None = None
) -> dict[str, Any]:
    opts = opts or {"round": None, "page": 1, "view": "unified"}
    board = srv.board
    head = board.event_head()  # before the reads: the live stream misses nothing after them
    detail = access.detail(board, actor, ref)
    card = board.get(ref)
    events = [e.to_dict() for e in board.events(0, card=ref, limit=500)]
    project = board.project(card.project_id)
    moves = sorted(s.value for s in TRANSITIONS[card.status])
    if card.status is Status.TODO:
        moves = [m for m in moves if m != "in_progress"]
    logs: dict[str, str] = {}
    diff = None
    diff_view = None
    if actor.is_human:
        from laneboard.server import diffview
        from laneboard.workspace.diff import lane_diff

        diff = lane_diff(srv.store, card.id, opts["round"])
        if diff and diff["text"] is not None:
            diff_view = diffview.view(diff["text"], opts["page"], opts["view"])
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
        "last_event": head,
        "lane_diff": diff,
        "diff_view": diff_view,
        "reviews": reviews(board, card),
        "lane_href": _lane_href(opts),
        "partial_query": urlencode(
            {k: v for k, v in opts.items() if v not in (None, 1, "unified")}
        ),
    }


def reviews(board: Any, card: Any) -> list[dict[str, Any]]:
    """Each round's review of this card: the reviewer's verdict and its must-fix items."""
    from laneboard.domain.verdict import parse_verdict
    from laneboard.supervisor.workflow import review_key

    out: list[dict[str, Any]] = []
    for round_ in range(card.delivery_round, 0, -1):
        rev = board.card_by_key(review_key(card.ref, round_))
        if rev is None:
            continue
        got = [r for r in board.reports(rev.id) if r.round == rev.delivery_round]
        verdict = None
        if got:
            last = got[-1]
            verdict = parse_verdict(last.body, [e.command for e in last.evidence])
        out.append({"round": round_, "card": rev, "verdict": verdict,
                    "author": got[-1].author if got else None})  # fmt: skip
    return out


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
        opts = _lane_options(request)
        ctx = await anyio.to_thread.run_sync(card_context, srv, actor, ref, opts)
        return _render("card.html", **ctx)

    async def card_partial(request: Request) -> Response:
        actor = actor_of(request.scope)
        ref = card_ref(request.path_params["ref"])
        opts = _lane_options(request)
        ctx = await anyio.to_thread.run_sync(card_context, srv, actor, ref, opts)
        return _render("_card.html", **ctx)

    async def pictures_page(request: Request) -> Response:
        from laneboard.server import pictures

        actor = actor_of(request.scope)
        ctx = await anyio.to_thread.run_sync(pictures.context, srv, actor, _scope(request))
        return _render("pictures.html", **ctx)

    async def highlight_css(_request: Request) -> Response:
        from laneboard.server import diffview

        css = await anyio.to_thread.run_sync(diffview.stylesheet)
        return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=3600"})

    return [
        Route("/", index, methods=["GET"]),
        Route("/ui/highlight.css", highlight_css, methods=["GET"]),
        Route("/pictures", pictures_page, methods=["GET"]),
        Route("/ui/board", board_partial, methods=["GET"]),
        Route("/cards/{ref}", card_page, methods=["GET"]),
        Route("/ui/cards/{ref}", card_partial, methods=["GET"]),
    ]
