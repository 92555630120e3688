"""A card list's dictionaries are built straight from the rows: they are exactly the
cards' ``to_dict``, on both backends, for every shape of card, and scoped the same way."""

from __future__ import annotations

from laneboard.board import access
from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human

ME = human("alice")


def fill(board: Board, clock: FakeClock) -> None:
    board.add_project(ME, "WEB")
    dep = board.create_card(ME, "WEB", "Dependency")
    epic = board.create_card(ME, "WEB", "Epic", kind="epic")
    run_id = board.create_run(ME, "WEB", "the goal")["id"]
    clock.advance(minutes=1)
    board.create_card(
        ME,
        "WEB",
        "Fix login: é ✓",
        description="details",
        parent=epic.ref,
        assignee="worker",
        priority=1,
        labels=["auth", "bug"],
        acceptance=["login works", {"id": "B", "text": "no 500s"}],
        acceptance_mode="human",
        checks=["pytest -q"],
        allowed_paths=["src/auth/"],
        status="backlog",
        depends_on=[dep.ref],
        meta={"team": "web", "n": [1, 2]},
        idempotency_key="k-1",
        run_id=run_id,
    )
    clock.advance(minutes=1)
    board.claim(human("bob"), dep.ref, session_id="s-1")


def test_list_dicts_are_the_cards_to_dict(board: Board, clock: FakeClock) -> None:
    fill(board, clock)
    cards = board.list_cards()
    assert len(cards) == 3
    assert any(c.holder for c in cards) and any(c.depends_on for c in cards)
    assert board.list_card_dicts() == [c.to_dict() for c in cards]
    filtered = {"statuses": ["backlog"], "label": "auth", "limit": 1}
    assert board.list_card_dicts(**filtered) == [c.to_dict() for c in board.list_cards(**filtered)]


def test_list_dicts_are_scoped_like_the_cards(board: Board, clock: FakeClock) -> None:
    fill(board, clock)
    board.create_card(ME, "WEB", "Unrelated")
    task = board.get("WEB-3")
    bot = agent("bot", card_id=task.id, epoch=1)
    scoped = access.list_card_dicts(board, bot)
    assert scoped == [c.to_dict() for c in access.list_cards(board, bot)]
    # its own card, the card it depends on and its epic; not the unrelated WEB-4
    assert [d["ref"] for d in scoped] == ["WEB-1", "WEB-2", "WEB-3"]
