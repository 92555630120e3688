"""``GET /api/v1/events`` as Server-Sent Events: the event log, polled from the store.

Each message carries ``id:`` (the event id), ``event:`` (its type) and ``data:`` (the
event as JSON). A client that reconnects with ``Last-Event-ID`` resumes right after
the last event it saw; without one the stream starts at ``after`` or, by default, at
the current end of the log (new events only).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import anyio.to_thread

from laneboard.board import access
from laneboard.board.service import Board
from laneboard.domain.model import Actor, Event

KEEPALIVE_S = 15.0


@dataclass
class Filters:
    card: str | None = None
    project: str | None = None
    run_id: int | None = None


def format_event(event_id: int, type_: str, data: str) -> str:
    return f"id: {event_id}\nevent: {type_}\ndata: {data}\n\n"


def _fetch(board: Board, cursor: int, filters: Filters) -> list[Event]:
    return board.events(
        cursor, card=filters.card, project=filters.project, run_id=filters.run_id, limit=200
    )


async def stream(
    board: Board,
    actor: Actor,
    cursor: int,
    filters: Filters,
    *,
    poll_s: float = 0.5,
    max_events: int = 0,
) -> AsyncIterator[str]:
    sent = 0
    idle = 0.0
    yield "retry: 2000\n\n"
    while True:
        batch = await anyio.to_thread.run_sync(_fetch, board, cursor, filters)
        if batch:
            cursor = batch[-1].id
            visible = await anyio.to_thread.run_sync(access.filter_events, board, actor, batch)
            for e in visible:
                yield format_event(e.id, e.type, json.dumps(e.to_dict(), sort_keys=True))
                sent += 1
                if max_events and sent >= max_events:
                    return
            idle = 0.0
            continue
        await anyio.sleep(poll_s)
        idle += poll_s
        if idle >= KEEPALIVE_S:
            idle = 0.0
            yield ": keepalive\n\n"
