"""Read scoping: what a credential may see.

Writes are scoped inside ``Board`` itself (an agent credential writes only its card).
Reads are scoped here so every interface (HTTP, MCP, dashboard) applies the same rule:
a card-scoped agent reads its own card, the cards it depends on and its parent epic;
everyone else reads the whole board.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from laneboard.board.service import Board
from laneboard.domain.model import Actor, ActorKind, Card, Event
from laneboard.errors import LaneboardError


def scoped(actor: Actor) -> bool:
    return actor.kind is ActorKind.AGENT and actor.card_id is not None


def readable_ids(board: Board, actor: Actor) -> frozenset[int] | None:
    """Card ids ``actor`` may read, or ``None`` for the whole board."""
    if not scoped(actor):
        return None
    assert actor.card_id is not None
    with board.store.read() as tx:
        own = tx.card(actor.card_id)
        if own is None:
            return frozenset()
        ids = {own.id, *own.depends_on}
        if own.parent_id is not None:
            ids.add(own.parent_id)
    return frozenset(ids)


def _refuse(actor: Actor, ref: str) -> LaneboardError:
    return LaneboardError(
        "FORBIDDEN",
        f"this agent credential reads card {actor.card_id} and its dependencies, not {ref}",
        "read only the card you were dispatched for and what it depends on",
    )


def check_read(board: Board, actor: Actor, card: Card) -> Card:
    allowed = readable_ids(board, actor)
    if allowed is not None and card.id not in allowed:
        raise _refuse(actor, card.ref)
    return card


def get(board: Board, actor: Actor, ref: str | int) -> Card:
    return check_read(board, actor, board.get(ref))


def detail(board: Board, actor: Actor, ref: str | int) -> dict[str, Any]:
    check_read(board, actor, board.get(ref))
    return board.card_detail(ref)


def filter_cards(board: Board, actor: Actor, cards: Iterable[Card]) -> list[Card]:
    allowed = readable_ids(board, actor)
    return [c for c in cards if allowed is None or c.id in allowed]


def filter_events(board: Board, actor: Actor, events: Iterable[Event]) -> list[Event]:
    """A scoped agent sees only events about the cards it may read."""
    allowed = readable_ids(board, actor)
    return [e for e in events if allowed is None or e.card_id in allowed]
