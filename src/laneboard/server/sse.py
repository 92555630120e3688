"""``GET /api/v1/events`` as Server-Sent Events: the event log, fed by the server's ``Feed``.

Each message carries ``id:`` (the event's cursor), ``event:`` (its type) and ``data:``
(the event as JSON). A client that reconnects with ``Last-Event-ID`` resumes right after
the last event it saw; without one the stream starts at ``after`` (a cursor or an event
id) or, by default, at the current end of the log (new events only). No connection polls
the store: the server's one feed reads each change once (see ``server.feed``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio.to_thread

from laneboard.board import access
from laneboard.board.service import Board
from laneboard.domain.cursor import EventCursor
from laneboard.domain.model import Actor, Event
from laneboard.server.feed import Feed

KEEPALIVE_S = 15.0


@dataclass
class Filters:
    card_id: int | None = None
    project_id: int | None = None
    run_id: int | None = None

    def keep(self, e: Event) -> bool:
        return (
            (self.card_id is None or e.card_id == self.card_id)
            and (self.project_id is None or e.project_id == self.project_id)
            and (self.run_id is None or e.run_id == self.run_id)
        )


def format_event(cursor: str, type_: str, data: str) -> str:
    return f"id: {cursor}\nevent: {type_}\ndata: {data}\n\n"


async def stream(
    feed: Feed,
    board: Board,
    actor: Actor,
    cursor: EventCursor,
    filters: Filters,
    *,
    max_events: int = 0,
    keepalive_s: float = KEEPALIVE_S,
) -> AsyncIterator[str]:
    sent = 0
    yield "retry: 2000\n\n"
    async for batch in feed.follow(cursor, keepalive_s=keepalive_s):
        if not batch:
            yield ": keepalive\n\n"
            continue
        kept = [e for e in batch if filters.keep(e)]
        if kept and access.scoped(actor):  # its scope may change: judged per batch
            kept = await anyio.to_thread.run_sync(access.filter_events, board, actor, kept)
        for e in kept:
            yield format_event(e.cursor, e.type, json.dumps(e.to_dict(), sort_keys=True))
            sent += 1
            if max_events and sent >= max_events:
                return
