"""Writes that start from the copy of a card the board's last write returned
(``board.recent``) give exactly what the same writes give on fresh reads: the same
cards, the same events and the same refusals, also when another board moved the card
on meanwhile, when the copy would refuse what the card now allows, or when the card was
linked since (linking does not bump its version)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from laneboard.board.recent import RecentCards
from laneboard.board.service import Board
from laneboard.domain.model import Card, agent, human, system
from laneboard.errors import LaneboardError
from laneboard.store import Store
from laneboard.store.tx import Tx

ME = human("alice")
D0, D1 = agent("d0"), agent("d1")
ACCEPTER = system("accepter")

Scenario = Callable[[Board, Board, str], list[Any]]


def _fresh(store: Store) -> Board:
    """A board that keeps no copies: every write reads the card afresh."""
    board = Board(store)
    board.recent = RecentCards(size=0)
    return board


def _outcome(call: Callable[[], Any]) -> Any:
    """What a call gave: its card or report as a dictionary, or its refusal."""
    try:
        got = call()
    except LaneboardError as err:
        return {"refused": err.code, "message": err.message, "fix": err.fix}
    if isinstance(got, Card):
        return {**got.to_dict(), "depends_on": list(got.depends_on)}
    return {k: v for k, v in got.to_dict().items() if k != "id"}


def _normal(value: Any, key: str, ids: dict[int, str]) -> Any:
    """``value`` with the project's key and the card ids spelt alike for two projects."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("id", "card_id", "project_id"):
                out[k] = ids.get(v, v) if k != "project_id" else "P"
            elif k == "depends_on" and isinstance(v, list):
                out[k] = [ids[i] for i in v]
            else:
                out[k] = _normal(v, key, ids)
        return out
    if isinstance(value, list | tuple):
        return [_normal(v, key, ids) for v in value]
    if isinstance(value, str):
        value = re.sub(r"scoped to card (\d+)", lambda m: ids.get(int(m[1]), m[0]), value)
        return "K" if value == key else value.replace(f"{key}-", "K-")
    return value


def _run(store: Store, work: Board, key: str, scenario: Scenario) -> tuple[Any, Any]:
    """The scenario's outcomes on a new project ``key``, and that project's events."""
    other = _fresh(store)
    other.add_project(ME, key)
    for i in range(3):
        other.create_card(ME, key, f"t{i}", acceptance_mode="off")
    outcomes = scenario(work, other, key)
    with store.read() as tx:
        pid = other._project(tx, key).id
        cards = tx.list_cards(project_id=pid)
        events = tx.events(0, project_id=pid, limit=10_000)
    ids = {c.id: c.ref.replace(f"{key}-", "K-") for c in cards}
    log = [(e.type, e.actor, e.actor_kind, e.card_id and ids[e.card_id], e.payload) for e in events]
    return _normal(outcomes, key, ids), _normal(log, key, ids)


def _same(store: Store, scenario: Scenario) -> list[Any]:
    """The scenario with copies and without give the same outcomes and events."""
    kept = _run(store, Board(store), "A", scenario)
    fresh = _run(store, _fresh(store), "B", scenario)
    assert kept == fresh
    return list(kept[0])


def _deliver_and_accept(work: Board, card: Card) -> list[Any]:
    """The worker reports and delivers the card, and the accepter moves it to done."""
    return [
        _outcome(lambda: work.report(D0, card.ref, "done")),
        _outcome(lambda: work.move(D0, card.ref, "in_review")),
        _outcome(lambda: work.move(ACCEPTER, card.ref, "done")),
    ]


def _drain(work: Board, other: Board, key: str) -> list[Any]:
    first = work.claim_next(D0, include_unassigned=True, project=key)
    return _deliver_and_accept(work, first)


def test_a_drain_gives_what_fresh_reads_give(store: Store) -> None:
    got = _same(store, _drain)
    assert [o["status"] for o in got[1:]] == ["in_review", "done"]
    assert got[0]["round"] == 1 and got[0]["body"] == "done"


def test_the_copy_spares_the_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    for name in ("card", "card_by_ref", "card_reported"):
        real = getattr(Tx, name)

        def spy(self: Tx, *a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            reads.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(Tx, name, spy)
    board = Board(store)
    board.add_project(ME, "S")
    board.create_card(ME, "S", "one", acceptance_mode="off")
    card = board.claim_next(D0, include_unassigned=True)
    reads.clear()
    board.report(D0, card.ref, "done")
    # on SQLite a report reads its card under the write lock it takes anyway
    assert reads == ([] if store.dialect == "postgresql" else ["card_by_ref"])
    reads.clear()
    board.move(D0, card.ref, "in_review")
    done = board.move(ACCEPTER, card.ref, "done")
    assert reads == [] and done.status.value == "done"


def _moved_on(work: Board, other: Board, key: str) -> list[Any]:
    """Another board blocks the card between the claim and the delivery."""
    card = work.claim_next(D0, include_unassigned=True, project=key)
    other.move(ME, card.ref, "blocked", reason="wait")
    return [
        *_deliver_and_accept(work, card),
        _outcome(lambda: work.move(ME, card.ref, "todo")),
        _outcome(lambda: work.move(ME, card.ref, "canceled")),
        _outcome(lambda: work.report(D0, card.ref, "late")),
    ]


def test_a_card_moved_on_meanwhile_is_read_afresh(store: Store) -> None:
    got = _same(store, _moved_on)
    assert got[1]["refused"] == "ILLEGAL_TRANSITION"
    assert got[-1]["refused"] == "ILLEGAL_TRANSITION"


def _taken_over(work: Board, other: Board, key: str) -> list[Any]:
    """The copy says d0 holds the card; it went back to todo and d1 holds it now."""
    card = work.claim_next(D0, include_unassigned=True, project=key)
    other.move(ME, card.ref, "todo")
    other.claim(ME, card.ref, holder="d1")
    return [
        _outcome(lambda: work.report(D0, card.ref, "stale")),
        _outcome(lambda: work.report(D1, card.ref, "mine")),
        _outcome(lambda: work.move(D0, card.ref, "in_review")),
        _outcome(lambda: work.move(D1, card.ref, "in_review")),
    ]


def test_a_copy_never_refuses_what_the_card_allows(store: Store) -> None:
    got = _same(store, _taken_over)
    assert got[0]["refused"] == "STALE_CLAIM" and got[2]["refused"] == "STALE_CLAIM"
    assert got[1]["body"] == "mine" and got[3]["status"] == "in_review"


def _unreported(work: Board, other: Board, key: str) -> list[Any]:
    """A delivery without a report is refused; the report is a condition of the write."""
    card = work.claim_next(D0, include_unassigned=True, project=key)
    return [
        _outcome(lambda: work.move(D0, card.ref, "in_review")),
        _outcome(lambda: work.report(D0, card.ref, "now", round_=2)),
        _outcome(lambda: work.report(D0, card.ref, "now", verdict="APPROVE")),
        _outcome(lambda: work.report(D0, card.ref, "now")),
        _outcome(lambda: work.move(D0, card.ref, "in_review")),
        _outcome(lambda: work.move(agent("d0", card_id=card.id + 1), card.ref, "done")),
        _outcome(lambda: work.move(ACCEPTER, card.ref, "done")),
        _outcome(lambda: work.move(ACCEPTER, card.ref, "done")),
    ]


def test_refusals_are_the_same_with_a_copy(store: Store) -> None:
    got = _same(store, _unreported)
    codes = [o.get("refused") for o in got]
    assert codes == [
        "REPORT_REQUIRED",
        "BAD_INPUT",
        "ACCEPTANCE_FORBIDDEN",
        None,
        None,
        "FORBIDDEN",
        None,
        "ILLEGAL_TRANSITION",
    ]


def _linked(work: Board, other: Board, key: str) -> list[Any]:
    """The card is linked after the claim: the moves return its links as they are."""
    card = work.claim_next(D0, include_unassigned=True, project=key)
    dep = other.list_cards(project=key, statuses=["todo"])[0]
    other.link(ME, card.ref, dep.ref)
    return _deliver_and_accept(work, card)


def test_links_added_since_the_copy_come_back(store: Store) -> None:
    got = _same(store, _linked)
    assert got[1]["depends_on"] == got[2]["depends_on"] != []


def test_copies_are_bounded_and_replaced() -> None:
    def card(cid: int, version: int) -> Card:
        board = Card.__new__(Card)
        object.__setattr__(board, "id", cid)
        object.__setattr__(board, "ref", f"K-{cid}")
        object.__setattr__(board, "version", version)
        return board

    recent = RecentCards(size=2)
    recent.put(card(1, 1))
    recent.put(card(2, 1))
    recent.put(card(1, 2))  # the newest copy of 1, kept longest
    recent.put(card(3, 1))
    assert recent.get(2) is None and recent.get("K-2") is None
    assert [recent.get(i).version for i in (1, 3)] == [2, 1]  # type: ignore[union-attr]
    recent.drop(1)
    assert recent.get("K-1") is None and recent.get("K-3") is not None
    assert json.dumps(sorted(recent._refs)) == '["K-3"]'
