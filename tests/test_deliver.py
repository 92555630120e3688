"""``Board.deliver`` (``lb card deliver``): the round's report and the move to in_review
are one write on both backends: both land with their two events, or a refused delivery
writes nothing at all (no report left behind, no event)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.supervisor.helpers import count_calls

from laneboard.board.service import Board
from laneboard.domain.model import Card, Evidence, agent, human
from laneboard.errors import LaneboardError
from laneboard.store import Store

ME = human("alice")
WORKER = agent("w1")


@pytest.fixture
def web(board: Board) -> Board:
    board.add_project(ME, "WEB", "Website", "/srv/web", "main")
    return board


def claimed(board: Board) -> Card:
    c = board.create_card(ME, "WEB", "t")
    board.claim(WORKER, c.ref)
    return c


def log(board: Board) -> list[tuple[str, int | None]]:
    return [(e.type, e.card_id) for e in board.events(limit=10_000)]


def refused(board: Board, code: str, *args: Any, **kw: Any) -> None:
    before, reports = log(board), [board.reports(c.ref) for c in board.list_cards()]
    with pytest.raises(LaneboardError) as info:
        board.deliver(*args, **kw)
    assert info.value.code == code, info.value.line()
    assert info.value.fix
    assert log(board) == before, f"{code} changed the event log"
    assert [board.reports(c.ref) for c in board.list_cards()] == reports


def test_a_delivery_writes_the_report_and_the_move_with_their_events(web: Board) -> None:
    c = claimed(web)
    rep, card = web.deliver(
        WORKER, c.ref, "done", commit="abc", evidence=[{"command": "t", "exit_code": 0}]
    )
    assert card.status.value == "in_review" and card.version > c.version
    assert (rep.round, rep.body, rep.commit, rep.author) == (1, "done", "abc", "w1")
    assert [e.command for e in rep.evidence] == ["t"]
    assert web.reports(c.ref) == [rep]
    added, moved = web.events(card=c.ref, limit=100)[-2:]
    assert (added.type, moved.type) == ("report.added", "card.moved")
    assert added.payload == {"round": 1, "evidence": 1, "verdict": None}
    assert moved.payload == {
        "ref": c.ref,
        "from": "in_progress",
        "to": "in_review",
        "reason": None,
        "round": 1,
    }
    assert web.get(c.ref) == card


def test_a_delivery_replaces_the_rounds_earlier_report(web: Board) -> None:
    c = claimed(web)
    web.report(WORKER, c.ref, "draft")
    rep, _ = web.deliver(WORKER, c.ref, "final")
    assert [r.body for r in web.reports(c.ref)] == ["final"]
    assert rep.body == "final"


def test_a_refused_delivery_writes_nothing(web: Board) -> None:
    c = web.create_card(ME, "WEB", "t")
    refused(web, "ILLEGAL_TRANSITION", WORKER, c.ref, "early")  # todo: not claimed
    mine = claimed(web)
    refused(web, "STALE_CLAIM", agent("other"), mine.ref, "not mine")
    refused(web, "BAD_INPUT", WORKER, mine.ref, "x\x00y")
    refused(web, "NOT_FOUND", WORKER, "WEB-99", "nobody")
    web.deliver(WORKER, mine.ref, "ok")
    refused(web, "ILLEGAL_TRANSITION", WORKER, mine.ref, "twice")


def test_a_delivery_on_a_card_that_moved_on_is_decided_afresh(web: Board, store: Store) -> None:
    c = claimed(web)
    web.comment(ME, c.ref, "note")  # no version bump: the copy still matches
    other = Board(store)
    other.edit(ME, c.ref, title="renamed")  # the first board's copy is now stale
    rep, card = web.deliver(WORKER, c.ref, "done")
    assert card.title == "renamed" and card.status.value == "in_review"
    assert [r.body for r in web.reports(c.ref)] == [rep.body]


class Gate:
    def __init__(self, fail: bool = False) -> None:
        self.fail, self.seen = fail, []  # type: list[str]

    def __call__(self, card: Card) -> list[Evidence]:
        self.seen.append(card.ref)
        if self.fail:
            raise LaneboardError("VERIFICATION_FAILED", "check failed", "fix the check")
        return [Evidence("make check", 0, "d1", "ok")]


def test_a_gated_delivery_keeps_the_verified_evidence_with_the_report(web: Board) -> None:
    gate = Gate()
    web.delivery_gate = gate
    c = claimed(web)
    rep, card = web.deliver(WORKER, c.ref, "done", evidence=[{"command": "pytest", "exit_code": 0}])
    assert gate.seen == [c.ref] and card.status.value == "in_review"
    assert [e.command for e in rep.evidence] == ["pytest", "make check"]
    assert web.reports(c.ref) == [rep]
    moved = web.events(card=c.ref, limit=100)[-1]
    assert moved.type == "card.moved" and moved.payload["verified"] == 1


def test_a_delivery_the_gate_refuses_leaves_no_report(web: Board) -> None:
    web.delivery_gate = Gate(fail=True)
    c = claimed(web)
    refused(web, "VERIFICATION_FAILED", WORKER, c.ref, "done")
    assert web.get(c.ref).status.value == "in_progress"


def test_a_refused_delivery_runs_no_gate(web: Board) -> None:
    gate = Gate()
    web.delivery_gate = gate
    c = claimed(web)
    refused(web, "STALE_CLAIM", agent("other"), c.ref, "not mine")
    assert gate.seen == []


def test_a_gated_delivery_is_one_statement_on_the_version_verified(
    web: Board, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL, once its gate has verified it, a delivery is written in one statement
    on the version of the card the gate saw (it was a transaction of six round trips)."""
    web.delivery_gate = Gate()
    c = claimed(web)
    writes = count_calls(monkeypatch, store, "write")
    alone = count_calls(monkeypatch, store, "write_statement")
    rep, card = web.deliver(WORKER, c.ref, "done", evidence=[{"command": "pytest", "exit_code": 0}])
    pg = store.dialect == "postgresql"
    assert (len(writes), len(alone)) == ((0, 1) if pg else (1, 0))
    assert card.status.value == "in_review" and web.get(c.ref) == card
    assert [e.command for e in rep.evidence] == ["pytest", "make check"]
    added, moved = web.events(card=c.ref, limit=100)[-2:]
    assert (added.type, added.payload["evidence"]) == ("report.added", 1)
    assert (moved.type, moved.payload["verified"]) == ("card.moved", 1)


class EditingGate(Gate):
    """A gate during whose checks someone else writes the card."""

    def __init__(self, store: Store, **change: Any) -> None:
        super().__init__()
        self.other, self.change = Board(store), change

    def __call__(self, card: Card) -> list[Evidence]:
        if "status" in self.change:
            self.other.move(ME, card.ref, self.change["status"])
        else:
            self.other.edit(ME, card.ref, **self.change)
        return super().__call__(card)


def test_a_card_edited_while_verified_is_delivered_as_it_is_now(web: Board, store: Store) -> None:
    web.delivery_gate = EditingGate(store, title="renamed")
    c = claimed(web)
    rep, card = web.deliver(WORKER, c.ref, "done")
    assert card.title == "renamed" and card.status.value == "in_review"
    assert [r.body for r in web.reports(c.ref)] == ["done"]
    assert [e.command for e in rep.evidence] == ["make check"]


def test_a_card_moved_while_verified_is_not_delivered(web: Board, store: Store) -> None:
    web.delivery_gate = EditingGate(store, status="blocked")
    c = claimed(web)
    with pytest.raises(LaneboardError) as info:
        web.deliver(WORKER, c.ref, "done")
    assert info.value.code == "VERSION_CONFLICT"
    assert web.reports(c.ref) == [] and web.get(c.ref).status.value == "blocked"
