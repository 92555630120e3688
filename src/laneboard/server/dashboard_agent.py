"""The dashboard's live agent view of a card and the "needs you" inbox.

The agent view shows one turn's transcript (the running turn, else the newest; any
other with ``?turn=N``), the card's turns, and what a person does about them: stop the
running turn, send the worker a follow-up, answer its open question, release a hold.
Both are their own live sections, refreshed by the card's (or the board's) events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from laneboard.board import access
from laneboard.domain.model import Actor, CommentKind
from laneboard.server.auth import actor_of
from laneboard.server.http import card_ref, query_int

if TYPE_CHECKING:
    from laneboard.server.app import Server

ENTRIES = 1000  # the entries of one turn a page shows (its first, when there are more)


def _question(srv: Server, card: Any) -> dict[str, Any] | None:
    """The question an agent waits on in its turn, if any (an awaiting card's answer box
    is the card's own)."""
    if card.status.value != "in_progress":
        return None
    with srv.store.read() as tx:
        q = tx.newest_agent_question(card.id, CommentKind.QUESTION.value, "")
    if q is None or q["created_at"] < card.status_since:
        return None
    return {"body": q["body"], "author": q["author"]}


def agent_context(srv: Server, actor: Actor, ref: str, turn: int | None) -> dict[str, Any]:
    board = srv.board
    head = board.event_head()  # before the reads: the live stream misses nothing after them
    card = access.get(board, actor, ref)
    summary = board.transcript(card.id, limit=1)
    turns = summary["turns"]
    shown = turn or summary["running"] or (turns[-1]["id"] if turns else None)
    entries: list[dict[str, Any]] = []
    if shown is not None:
        entries = board.transcript(card.id, turn=shown, limit=ENTRIES)["entries"]
    pending = [f for f in summary["followups"] if f["turn"] is None]
    return {
        "card": card,
        "turns": turns,
        "running": summary["running"],
        "shown": shown,
        "entries": entries,
        "pending": pending,
        "question": _question(srv, card) if actor.is_human else None,
        "held": card.status.value == "blocked" and bool(card.meta.get("hold_cycle")),
        "is_human": actor.is_human,
        "last_event": head,
    }


def inbox_context(srv: Server, actor: Actor) -> dict[str, Any]:
    from laneboard.board.inbox import inbox

    head = srv.board.event_head()
    return {"items": inbox(srv.board) if actor.is_human else [], "last_event": head,
            "is_human": actor.is_human}  # fmt: skip


def routes(srv: Server) -> list[BaseRoute]:
    from laneboard.server.dashboard import _render

    async def agent_partial(request: Request) -> Response:
        actor = actor_of(request.scope)
        ref = card_ref(request.path_params["ref"])
        raw = request.query_params.get("turn")
        turn = query_int(raw, "turn", 0, 1, 2**62) if raw else None
        ctx = await anyio.to_thread.run_sync(agent_context, srv, actor, ref, turn)
        return _render("_agent.html", **ctx)

    async def inbox_partial(request: Request) -> Response:
        actor = actor_of(request.scope)
        ctx = await anyio.to_thread.run_sync(inbox_context, srv, actor)
        return _render("_inbox.html", **ctx)

    return [
        Route("/ui/cards/{ref}/agent", agent_partial, methods=["GET"]),
        Route("/ui/inbox", inbox_partial, methods=["GET"]),
    ]
