"""Read scoping: what a credential may see. Every surface reads the board through here.

Writes are scoped inside ``Board`` itself (``authority.may_write``). Reads are scoped
here so every interface (CLI, HTTP, MCP, dashboard) applies the same rule: a card-scoped
agent credential reads its own card, the cards it depends on and its parent epic (their
comments and reports too), the events about those cards, and the projects they are in;
naming any other card is ``FORBIDDEN``, and lists leave other cards out. Everyone else
(people, the runtime, an agent credential with no card) reads the whole board.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from laneboard.board import inputs
from laneboard.board.authority import is_scoped_agent
from laneboard.board.links import Candidate
from laneboard.board.service import Board
from laneboard.domain.model import Actor, Card, Comment, Event, Project, Report
from laneboard.errors import LaneboardError
from laneboard.store.tx import Tx


def scoped(actor: Actor) -> bool:
    return is_scoped_agent(actor)


def readable_ids(board: Board, actor: Actor) -> frozenset[int] | None:
    """Card ids ``actor`` may read, or ``None`` for the whole board."""
    if not scoped(actor):
        return None
    assert actor.card_id is not None
    with board.store.read() as tx:
        return _readable(tx.card(actor.card_id))


def _readable(own: Card | None) -> frozenset[int]:
    """What a scoped agent whose own card is ``own`` reads: it, its dependencies, its epic."""
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
    """``Board.card_detail``, checked in its own read: an agent reading its own card (the
    common case) costs no read more than the card itself."""

    def check(tx: Tx, card: Card) -> None:
        if not scoped(actor):
            return
        own = card if card.id == actor.card_id else tx.card(int(actor.card_id or 0))
        if card.id not in _readable(own):
            raise _refuse(actor, card.ref)

    return board.card_detail(ref, check=check)


def filter_cards(board: Board, actor: Actor, cards: Iterable[Card]) -> list[Card]:
    allowed = readable_ids(board, actor)
    return [c for c in cards if allowed is None or c.id in allowed]


def filter_events(board: Board, actor: Actor, events: Iterable[Event]) -> list[Event]:
    """A scoped agent sees only events about the cards it may read."""
    allowed = readable_ids(board, actor)
    return [e for e in events if allowed is None or e.card_id in allowed]


# -- the reads the surfaces make, each scoped by the caller -------------------------
def list_cards(board: Board, actor: Actor, **filters: Any) -> list[Card]:
    """``Board.list_cards`` with the same filters, limited to what ``actor`` may read."""
    return board.list_cards(**_scoped(board, actor, filters))


def list_card_dicts(board: Board, actor: Actor, **filters: Any) -> list[dict[str, Any]]:
    """``list_cards`` as the cards' dictionaries (``Card.to_dict``), built from the rows."""
    return board.list_card_dicts(**_scoped(board, actor, filters))


def _scoped(board: Board, actor: Actor, filters: dict[str, Any]) -> dict[str, Any]:
    allowed = readable_ids(board, actor)
    if allowed is not None and filters.get("parent") is not None:
        check_read(board, actor, board.get(filters["parent"]))
    return {**filters, "ids": None if allowed is None else sorted(allowed)}


def comments(board: Board, actor: Actor, ref: str | int, *, after: int = 0) -> list[Comment]:
    card = get(board, actor, ref)
    return board.comments(card.id, after=inputs.cursor(after))


def reports(board: Board, actor: Actor, ref: str | int) -> list[Report]:
    card = get(board, actor, ref)
    return board.reports(card.id)


def _event_scope(board: Board, actor: Actor, card: str | int | None) -> Sequence[int] | None:
    allowed = readable_ids(board, actor)
    if card is not None:
        get(board, actor, card)
    return None if allowed is None else sorted(allowed)


def events(
    board: Board,
    actor: Actor,
    after: int = 0,
    *,
    card: str | int | None = None,
    project: str | int | None = None,
    run_id: int | None = None,
    limit: int = 100,
) -> list[Event]:
    """Events after ``after``; a scoped agent's are those about the cards it may read."""
    ids = _event_scope(board, actor, card)
    return board.events(after, card=card, project=project, run_id=run_id, limit=limit, card_ids=ids)


def events_after(
    board: Board,
    actor: Actor,
    cursor: str | int,
    *,
    card: str | int | None = None,
    project: str | int | None = None,
    run_id: int | None = None,
    limit: int = 100,
) -> tuple[list[Event], str]:
    """``Board.events_after`` scoped like ``events``: the events and the cursor after them."""
    ids = _event_scope(board, actor, card)
    return board.events_after(
        cursor, card=card, project=project, run_id=run_id, card_ids=ids, limit=limit
    )


def last_events(
    board: Board, actor: Actor, n: int = 20, *, card: str | int | None = None
) -> list[Event]:
    ids = _event_scope(board, actor, card)
    return board.last_events(n, card=card, card_ids=ids)


def candidates(board: Board, actor: Actor, **filters: Any) -> list[Candidate]:
    allowed = readable_ids(board, actor)
    got = board.candidates(**filters)
    return [c for c in got if allowed is None or c.card.id in allowed]


def _project_ids(board: Board, actor: Actor) -> frozenset[int] | None:
    allowed = readable_ids(board, actor)
    if allowed is None:
        return None
    return frozenset(c.project_id for c in board.list_cards(ids=sorted(allowed)))


def projects(board: Board, actor: Actor) -> list[Project]:
    allowed = _project_ids(board, actor)
    return [p for p in board.projects() if allowed is None or p.id in allowed]


def project(board: Board, actor: Actor, ref: str | int) -> Project:
    p = board.project(ref)
    allowed = _project_ids(board, actor)
    if allowed is not None and p.id not in allowed:
        raise LaneboardError(
            "FORBIDDEN",
            f"this agent credential reads card {actor.card_id}'s project, not {p.key}",
            "read only the project of the card you were dispatched for",
        )
    return p


def project_config(board: Board, actor: Actor, ref: str | int) -> dict[str, Any]:
    return board.project_config(project(board, actor, ref).id)
