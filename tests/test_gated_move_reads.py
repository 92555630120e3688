"""A gated move (a delivery the delivery gate verifies, an acceptance the landing gate
lands) is checked before its gate on one read of the card and its report, outside any
transaction; it refuses, runs its gate and writes exactly as before, and with an
idempotency key it still answers a replay without running the gate again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.supervisor.helpers import count_calls

from laneboard.board.service import Board
from laneboard.domain.model import Card, Evidence, agent, human, system
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError
from laneboard.store import Store

ME = human("alice")
WORKER = agent("w1")
ACCEPTER = system("accepter")


class Gates:
    """Both gates, recording the cards they were handed."""

    def __init__(self) -> None:
        self.delivered: list[str] = []
        self.landed: list[str] = []

    def delivery(self, card: Card) -> list[Evidence]:
        self.delivered.append(card.ref)
        return [Evidence("make check", 0, "d1", "ok")]

    def landing(self, card: Card) -> str | None:
        self.landed.append(card.ref)
        return "c0ffee"


@pytest.fixture
def gated(store: Store) -> Iterator[tuple[Board, Gates]]:
    gates = Gates()
    board = Board(store, delivery_gate=gates.delivery, landing_gate=gates.landing)
    board.add_project(ME, "G")
    yield board, gates


def _claimed(board: Board) -> Card:
    card = board.create_card(ME, "G", "work", acceptance_mode="off")
    return board.claim(WORKER, card.ref)


def test_a_gated_delivery_and_acceptance_read_no_transaction_before_their_gate(
    gated: tuple[Board, Gates], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    board, gates = gated
    card = _claimed(board)
    board.report(WORKER, card.ref, "did it")
    reads = count_calls(monkeypatch, store, "read")
    delivered = board.move(WORKER, card.ref, "in_review")
    done = board.move(ACCEPTER, card.ref, "done")
    assert reads == []
    assert gates.delivered == [card.ref] and gates.landed == [card.ref]
    assert delivered.status is Status.IN_REVIEW and done.status is Status.DONE
    assert done.meta["merge_commit"] == "c0ffee"
    (report,) = board.reports(card.ref)
    assert [e.command for e in report.evidence] == ["make check"]
    moved = [e.payload for e in board.events(0, limit=100) if e.type == "card.moved"]
    assert [(m["from"], m["to"], m.get("verified")) for m in moved] == [
        ("in_progress", "in_review", 1),
        ("in_review", "done", None),
    ]


def test_a_delivery_without_a_report_is_refused_before_its_gate(
    gated: tuple[Board, Gates],
) -> None:
    board, gates = gated
    card = _claimed(board)
    before = board.events(0, limit=100)
    with pytest.raises(LaneboardError) as err:
        board.move(WORKER, card.ref, "in_review")
    assert err.value.code == "REPORT_REQUIRED"
    assert gates.delivered == []
    assert board.events(0, limit=100) == before
    assert board.get(card.ref).status is Status.IN_PROGRESS


def test_a_gated_move_of_a_missing_card_names_it(gated: tuple[Board, Gates]) -> None:
    board, gates = gated
    with pytest.raises(LaneboardError) as err:
        board.move(WORKER, "G-99", "in_review")
    assert err.value.code == "NOT_FOUND" and "G-99" in err.value.message
    assert gates.delivered == []


def test_a_replayed_gated_move_runs_its_gate_once(gated: tuple[Board, Gates]) -> None:
    board, gates = gated
    card = _claimed(board)
    board.report(WORKER, card.ref, "did it")
    first = board.move(WORKER, card.ref, "in_review", idempotency_key="k1")
    again = board.move(WORKER, card.ref, "in_review", idempotency_key="k1")
    assert gates.delivered == [card.ref]
    assert (first.id, first.status) == (again.id, again.status)


def _in_review(board: Board) -> Card:
    card = _claimed(board)
    board.deliver(WORKER, card.ref, "did it")
    return card


def test_a_landed_acceptance_is_one_statement_on_the_version_the_gate_saw(
    gated: tuple[Board, Gates], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An acceptance whose landing gate landed it is written on the card's version the
    gate was handed, with the merge commit and its event, in one statement (it was a
    transaction of its own: five round trips on PostgreSQL) that reads the card again."""
    board, gates = gated
    card = _in_review(board)
    writes = count_calls(monkeypatch, store, "write")
    done = board.move(ACCEPTER, card.ref, "done", reason="accepted")
    # one statement on PostgreSQL; SQLite writes the update and its event under one
    # short write lock (``cas_sql.save_with_event``)
    assert len(writes) == (0 if store.dialect == "postgresql" else 1)
    assert gates.landed == [card.ref]
    assert done.status is Status.DONE and done.meta["merge_commit"] == "c0ffee"
    assert board.get(card.ref) == done
    moved = board.events(card=card.ref, limit=100)[-1]
    assert moved.type == "card.moved"
    assert moved.payload == {
        "ref": card.ref,
        "from": "in_review",
        "to": "done",
        "reason": "accepted",
        "round": 1,
        "merge_commit": "c0ffee",
    }


def test_a_card_edited_while_it_lands_is_accepted_as_it_is_now(
    gated: tuple[Board, Gates], store: Store
) -> None:
    board, gates = gated
    card = _in_review(board)
    other = Board(store)

    def landing(c: Card) -> str | None:
        other.edit(ME, c.ref, title="renamed")  # the version the gate saw is gone
        return gates.landing(c)

    board.landing_gate = landing
    done = board.move(ACCEPTER, card.ref, "done")
    assert (done.status, done.title, done.meta["merge_commit"]) == (
        Status.DONE,
        "renamed",
        "c0ffee",
    )
    types = [e.type for e in board.events(card=card.ref, limit=100)]
    assert types[-3:] == ["card.moved", "card.edited", "card.moved"]
