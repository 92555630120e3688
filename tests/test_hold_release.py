"""Holds caused by configuration name their fix and are released together once it is fixed."""

from __future__ import annotations

import pytest

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import Card, agent, human, system
from laneboard.errors import LaneboardError

ME = human("alice")
FIX = "install claude or set [supervisor.agent_kinds.claude] binary"


def held(board: Board, title: str, reason: str, fix: str = "") -> Card:
    c = board.create_card(ME, "P", title, assignee="worker")
    with board.store.write() as tx:
        card = tx.card(c.id, lock=True)
        assert card is not None
        h = board.hold(tx, system(), card, "dispatch", 3, "the agent could not be started.",
                       reason=reason)  # fmt: skip
        if fix:
            tx.update_card(h.id, h.version, {"meta": {**h.meta, "hold_fix": fix}})
    return board.get(c.ref)


@pytest.fixture
def setup(board: Board) -> Board:
    board.add_project(ME, "P", "P", None, None)
    board.add_project(ME, "Q", "Q", None, None)
    return board


def test_configuration_holds_are_released_together(setup: Board, clock: FakeClock) -> None:
    board = setup
    a = held(board, "a", "configuration", FIX)
    b = held(board, "b", "configuration", FIX)
    other = held(board, "c", "resource")
    by_person = board.create_card(ME, "P", "d")
    board.move(ME, by_person.ref, "blocked", reason="vendor")  # a person's block is no hold
    clock.advance(minutes=1)
    out = board.release_holds(ME, "configuration")
    assert [(i["ref"], i["released"], i["fix"], i["skipped"]) for i in out] == [
        (a.ref, True, FIX, None),
        (b.ref, True, FIX, None),
    ]
    assert [board.get(r).status.value for r in (a.ref, b.ref)] == ["todo", "todo"]
    assert board.get(other.ref).status.value == "blocked"
    assert board.get(by_person.ref).status.value == "blocked"

    def moves(ref: str) -> int:
        return sum(e.type == "card.moved" for e in board.events(0, card=ref, limit=100))

    assert [moves(r) for r in (a.ref, b.ref, other.ref)] == [1, 1, 0]  # one event per card
    assert board.release_holds(ME, "configuration") == []  # nothing left: nothing changes


def test_a_release_keeps_to_its_project(setup: Board) -> None:
    board = setup
    mine = held(board, "a", "configuration", FIX)
    c = board.create_card(ME, "Q", "q", assignee="worker")
    with board.store.write() as tx:
        card = tx.card(c.id, lock=True)
        assert card is not None
        board.hold(tx, system(), card, "dispatch", 3, "no binary.", reason="configuration")
    out = board.release_holds(ME, "configuration", project="P")
    assert [i["ref"] for i in out] == [mine.ref]
    assert board.get(c.ref).status.value == "blocked"


def test_only_a_person_releases_holds(setup: Board) -> None:
    board = setup
    card = held(board, "a", "configuration", FIX)
    with pytest.raises(LaneboardError) as err:
        board.release_holds(agent("worker", card.id, 1), "configuration")
    assert err.value.code == "FORBIDDEN"
    assert board.get(card.ref).status.value == "blocked"


def test_an_unknown_reason_is_refused(setup: Board) -> None:
    board = setup
    card = held(board, "a", "configuration", FIX)
    for reason in ("config", None, 7):  # an HTTP body may carry null or a number
        with pytest.raises(LaneboardError) as err:
            board.release_holds(ME, reason)  # type: ignore[arg-type]
        assert err.value.code == "BAD_INPUT" and "configuration" in err.value.fix
    assert board.get(card.ref).status.value == "blocked"


class TickingClock(FakeClock):
    """A clock that moves one millisecond each time it is read (a loaded machine)."""

    def now_ms(self) -> int:
        self.t += 1
        return self.t


def test_a_hold_is_recognised_when_the_clock_moves_during_it(setup: Board) -> None:
    board = setup
    board.store.clock = TickingClock()
    h = held(board, "slow", "configuration", FIX)
    assert h.status.value == "blocked"
    assert int(h.meta["hold_at"]) >= h.status_since  # the block is this hold
    out = board.release_holds(ME, "configuration")
    assert [(i["ref"], i["released"]) for i in out] == [(h.ref, True)]
