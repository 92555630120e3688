"""A claim and its ``card.claimed`` event commit together, on both backends.

On PostgreSQL a probed claim is one statement that writes the card and its event; these
tests hold every path to the same event as the other backend.
"""

from __future__ import annotations

import json
from typing import Any

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.cursor import EventCursor
from laneboard.domain.model import Actor, agent, human
from laneboard.store import Row
from laneboard.store.base import Store
from laneboard.store.rows import dumps

ME = human("alice")


def _claimed(store: Store) -> list[Row]:
    with store.read() as tx:
        return tx.all("SELECT * FROM events WHERE type = 'card.claimed' ORDER BY id")


def _payload(ref: str, holder: str, epoch: int) -> dict[str, Any]:
    return {
        "ref": ref,
        "holder": holder,
        "epoch": epoch,
        "from": "todo",
        "takeover": False,
        "previous_holder": None,
    }


def test_claim_and_claim_next_write_one_event_each(store: Store, clock: FakeClock) -> None:
    board = Board(store)
    board.add_project(ME, "P")
    first = board.create_card(ME, "P", "first")
    board.create_card(ME, "P", "second")
    board.create_card(ME, "P", "third")
    seen: list[EventCursor] = []
    store.add_commit_hook(seen.append)
    claimed = board.claim(agent('w"é'), first.ref)
    picked = board.claim_next(agent("w2"), include_unassigned=True)
    odd = board.claim_next(agent('n\\"ü'), include_unassigned=True)  # escaped in the JSON
    events = _claimed(store)
    assert [e["card_id"] for e in events] == [first.id, picked.id, odd.id]
    for event, card, holder in (
        (events[0], claimed, 'w"é'),
        (events[1], picked, "w2"),
        (events[2], odd, 'n\\"ü'),
    ):
        assert card.claim_epoch == 1 and card.holder == holder
        assert json.loads(event["payload"]) == _payload(card.ref, holder, 1)
        assert event["payload"] == dumps(json.loads(event["payload"]))
        assert (event["actor"], event["actor_kind"], event["at"]) == (
            holder,
            "agent",
            clock.now_ms(),
        )
        assert event["project_id"] == card.project_id
    assert seen == [EventCursor(int(e["xid"] or 0), int(e["id"])) for e in events]


class _Moving(Board):
    """A board whose card is edited by someone else right after each claim probe."""

    def _claim_probe(self, actor: Actor, ref: str | int, who: str) -> Row | None:
        row = super()._claim_probe(actor, ref, who)
        self.edit(ME, ref, title="edited meanwhile")
        return row


def test_a_claim_whose_card_moved_since_the_probe_writes_one_event(store: Store) -> None:
    board = _Moving(store)
    board.add_project(ME, "P")
    card = board.create_card(ME, "P", "task")
    got = board.claim(agent("w1"), card.ref)
    assert (got.holder, got.claim_epoch, got.title) == ("w1", 1, "edited meanwhile")
    events = _claimed(store)
    assert len(events) == 1
    assert json.loads(events[0]["payload"]) == _payload(card.ref, "w1", 1)


def test_only_an_armed_claim_writes_an_event_from_its_statement(store: Store) -> None:
    """On SQLite the one-statement claims write their event from a trigger armed for that
    statement alone: the claims inside a write transaction (the supervisor's) and other
    writes of the claim epoch log exactly what their own code logs."""
    board = Board(store)
    board.add_project(ME, "P")
    inside = board.create_card(ME, "P", "claimed inside a transaction")
    other = board.create_card(ME, "P", "epoch bumped by a fence")
    fast = board.create_card(ME, "P", "claimed in one statement")
    with store.write() as tx:
        board.claim_in(tx, agent("sup"), inside.ref, "sup", None)
    with store.write() as tx:
        tx.run("UPDATE cards SET claim_epoch = claim_epoch + 1 WHERE id = ?", (other.id,))
    board.claim(agent("w1"), fast.ref)
    assert [e["card_id"] for e in _claimed(store)] == [inside.id, fast.id]
