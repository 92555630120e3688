"""``GET /api/v1/cards/{ref}/transcript`` with ``Accept: text/event-stream``: a card's
transcript as Server-Sent Events.

Each message is one entry: ``id:`` its entry id, ``event: entry``, ``data:`` the entry
as JSON (the shape of ``lb card transcript --json``). The stream starts after ``after``
(an entry id; by default from the first entry), or after ``Last-Event-ID`` when a client
reconnects, and then follows the card live: each ``turn.output`` event of the card, read
from the server's one ``Feed``, wakes one read of the entries written since.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from laneboard.board import access
from laneboard.domain.cursor import EventCursor
from laneboard.server.auth import actor_of
from laneboard.server.http import card_ref, query_int

if TYPE_CHECKING:
    from laneboard.server.app import Server

BATCH = 500
MAX_ID = 2**62


def _read(srv: Server, card_id: int, after: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = srv.board.transcript(card_id, after=after, limit=BATCH)[
        "entries"
    ]
    return entries


async def entries(
    srv: Server, card_id: int, after: int, cursor: EventCursor, *, max_entries: int = 0,
    keepalive_s: float = 15.0,
) -> AsyncIterator[str]:  # fmt: skip
    at = {"after": after, "sent": 0}

    async def drain() -> AsyncIterator[str]:
        while True:
            got = await anyio.to_thread.run_sync(_read, srv, card_id, at["after"])
            for e in got:
                data = json.dumps(e, sort_keys=True)
                yield f"id: {e['id']}\nevent: entry\ndata: {data}\n\n"
                at["after"], at["sent"] = int(e["id"]), at["sent"] + 1
                if max_entries and at["sent"] >= max_entries:
                    return
            if len(got) < BATCH:
                return

    def done() -> bool:
        return bool(max_entries) and at["sent"] >= max_entries

    yield "retry: 2000\n\n"
    async for chunk in drain():  # what is there first
        yield chunk
    if done():
        return
    async for batch in srv.feed.follow(cursor, keepalive_s=keepalive_s):
        if not batch:
            yield ": keepalive\n\n"
        elif any(e.card_id == card_id and e.type == "turn.output" for e in batch):
            async for chunk in drain():
                yield chunk
            if done():
                return


async def transcript_stream(srv: Server, request: Request) -> Response:
    actor = actor_of(request.scope)
    ref = card_ref(request.path_params["ref"])
    card = await anyio.to_thread.run_sync(access.get, srv.board, actor, ref)
    q = request.query_params
    start = request.headers.get("last-event-id") or q.get("after")
    after = query_int(start.strip() if start else None, "after", 0, 0, MAX_ID)
    limit = query_int(q.get("max_events"), "max_events", 0, 0, 1_000_000)
    cursor = await anyio.to_thread.run_sync(srv.feed.head_now)  # before the first read
    return StreamingResponse(
        entries(srv, card.id, after, cursor, max_entries=limit),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
