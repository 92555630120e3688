"""A write's events on PostgreSQL wait for its commit, which writes them in the same round
trip as ``COMMIT``, unless a statement on the log comes first: a read of the events, or
a statement that writes an event of its own, then finds them written, in the order
appended. Any other statement goes ahead without them: a card's delivery wrote its
events in round trips of their own, before each next statement (about 8 per card)."""

from __future__ import annotations

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import Actor
from laneboard.errors import LaneboardError


def _card(board: Board, me: Actor) -> int:
    board.add_project(me, "P")
    return board.create_card(me, "P", "a card").id


def test_a_statement_off_the_log_leaves_the_events_to_the_commit(board: Board, me: Actor) -> None:
    cid = _card(board, me)
    with board.store.write() as tx:
        before = tx.max_event_id()
        tx.append_event("test.first", me, card_id=cid, payload={"n": 1})
        assert tx.card(cid) is not None
        tx.run("UPDATE cards SET priority = 3 WHERE id = ?", (cid,))
        assert len(tx.events_pending) == (1 if tx.pg else 0)
        tx.append_event("test.second", me, card_id=cid, payload={"n": 2})
    events = [e for e in board.events(card=str(cid), limit=100) if e.type.startswith("test.")]
    assert [e.payload["n"] for e in events] == [1, 2]
    assert all(e.id > before for e in events)


def test_a_read_of_the_log_sees_the_events_appended_before_it(board: Board, me: Actor) -> None:
    cid = _card(board, me)
    with board.store.write() as tx:
        before = tx.max_event_id()
        tx.append_event("test.first", me, card_id=cid)
        tx.run("UPDATE cards SET priority = 3 WHERE id = ?", (cid,))
        assert tx.max_event_id() > before  # the pending event was written first
        assert not tx.events_pending


def test_a_write_that_fails_after_its_event_keeps_none(board: Board, me: Actor) -> None:
    cid = _card(board, me)
    with board.store.read() as tx:
        before = tx.max_event_id()
    with pytest.raises(LaneboardError), board.store.write() as tx:
        tx.append_event("test.lost", me, card_id=cid)
        tx.run("UPDATE cards SET priority = 3 WHERE id = ?", (cid,))
        raise LaneboardError("CONFLICT", "refused", "nothing")
    with board.store.read() as tx:
        assert tx.max_event_id() == before
    assert board.get(cid).priority != 3
