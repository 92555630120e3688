"""``claim --next`` ranks from ``cards.claim_rank``: the index order is the domain order.

The statement reads only the first few ranked cards of the index, weighs the unranked
ones (review cards) in full, and gives way to the Python ranking when fan-out or a card
stamped after the reader's clock is in play. Boards larger than what it reads, clocks
that disagree and every write that moves a card's status time must all leave the drain
in exactly ``domain.weights`` order; a migration added in a gap of the numbering is
applied to a board made before it.
"""

from __future__ import annotations

import itertools

import pytest

from laneboard.board.claims import CLAIM_NEXT_PICK
from laneboard.board.service import Board
from laneboard.domain import deps, weights
from laneboard.domain.clock import MINUTE_MS, FakeClock
from laneboard.domain.model import Card, agent, human
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store
from laneboard.store.cas_sql import save_with_event
from laneboard.store.tx import ReadySet

ME = human("alice")


def _domain_order(store: Store, pid: int) -> list[int]:
    with store.read() as tx:
        now = tx.now()
        ready = tx.ready_cards(project_id=pid, limit=10_000)
        fan = deps.downstream_counts(tx.open_dependents(), [c.id for c in ready])
    sla = {c.id: s for c in ready if (s := weights.card_sla_clock(c, now))}
    return [w.card.id for w in weights.order(ready, now, fan, sla)]


def _spread(
    board: Board, clock: FakeClock, n: int, *, tiers: int, review: bool
) -> tuple[int, list[Card]]:
    """Project P with ``n`` todo cards made at uneven times over ``tiers`` priorities (every
    ninth from the fifth a review card when ``review``): its id and the cards."""
    pid = board.add_project(ME, "P").id
    orig = board.create_card(ME, "P", "work", status="backlog")
    gaps = itertools.cycle([0, 1, 7 * MINUTE_MS, 3, MINUTE_MS])
    made = []
    for i in range(n):
        clock.advance(next(gaps))
        meta = {"review_of": orig.id} if review and i % 9 == 4 else None
        made.append(board.create_card(ME, "P", f"c{i}", priority=1 + i % tiers, meta=meta))
    return pid, made


def _drain(board: Board, key: str) -> list[int]:
    got = []
    while True:
        try:
            got.append(board.claim_next(ME, include_unassigned=True, project=key).id)
        except LaneboardError as err:
            assert err.code == "NOTHING_READY"
            return got


def _ranks(store: Store) -> list[dict[str, object]]:
    with store.read() as tx:
        return tx.all("SELECT id, meta, status_since, created_at, claim_rank FROM cards")


def _rank_holds(store: Store) -> None:
    """A ranked card's ``claim_rank`` is exactly its order key; review cards are unranked."""
    import json

    for r in _ranks(store):
        review = json.loads(str(r["meta"])).get("review_of") is not None
        if r["claim_rank"] is not None:
            assert not review, r
            assert r["claim_rank"] == 2 * int(str(r["status_since"])) + int(str(r["created_at"]))


def test_a_drain_deeper_than_the_ranked_read_follows_the_domain_order(store_url: str) -> None:
    clock = FakeClock()
    store = open_store(store_url, clock)
    try:
        board = Board(store)
        pid, made = _spread(board, clock, 3 * CLAIM_NEXT_PICK, tiers=2, review=True)
        for c in made[::5]:  # their time in status starts again, later
            board.move(ME, c.ref, "backlog")
            clock.advance(2 * MINUTE_MS)
            board.move(ME, c.ref, "todo")
        clock.advance(50 * MINUTE_MS)
        _rank_holds(store)
        expected = _domain_order(store, pid)
        assert len(expected) == len(made)
        assert _drain(board, "P") == expected
        _rank_holds(store)
    finally:
        store.close()


def test_a_card_stamped_ahead_of_the_readers_clock_is_weighed_as_the_domain_does(
    store_url: str,
) -> None:
    """Another machine's clock runs ahead: the card it moved has no time in status yet
    for this one, so its age alone puts it first, whatever its stored rank says."""
    t0 = 1_767_225_600_000
    clock, ahead = FakeClock(t0), FakeClock(t0 + 100 * MINUTE_MS)
    store, other = open_store(store_url, clock), open_store(store_url, ahead)
    try:
        board = Board(store)
        pid = board.add_project(ME, "P").id
        old = board.create_card(ME, "P", "old")
        clock.advance(50 * MINUTE_MS)
        young = [board.create_card(ME, "P", f"y{i}").id for i in range(CLAIM_NEXT_PICK + 2)]
        Board(other).move(ME, old.ref, "backlog")
        Board(other).move(ME, old.ref, "todo")
        clock.advance(10 * MINUTE_MS)
        expected = _domain_order(store, pid)
        assert expected[0] == old.id and sorted(expected[1:]) == young
        assert _drain(board, "P") == expected
    finally:
        store.close()
        other.close()


def test_every_write_of_a_status_time_or_meta_keeps_the_rank(store_url: str) -> None:
    clock = FakeClock()
    store = open_store(store_url, clock)
    try:
        board = Board(store)
        board.add_project(ME, "P")
        orig = board.create_card(ME, "P", "work", status="backlog")
        a = board.create_card(ME, "P", "a")
        b = board.create_card(ME, "P", "b", meta={"review_of": orig.id})
        worker = agent("w")
        for step in range(3):
            clock.advance(MINUTE_MS)
            board.claim(worker, a.ref)
            board.report(worker, a.ref, f"round {step}")
            board.move(worker, a.ref, "in_review")
            board.move(ME, a.ref, "in_progress")
            board.move(ME, a.ref, "todo")
            board.edit(ME, b.ref, meta={"note": step})
            _rank_holds(store)
        board.edit(ME, a.ref, meta={"review_of": orig.id})
        board.edit(ME, b.ref, meta={"review_of": None})
        ranks = {int(str(r["id"])): r["claim_rank"] for r in _ranks(store)}
        assert ranks[a.id] is None and ranks[b.id] is not None
        _rank_holds(store)
    finally:
        store.close()


def test_a_write_on_a_stale_version_writes_nothing(store: Store, board: Board) -> None:
    board.add_project(ME, "P")
    card = board.create_card(ME, "P", "a")
    board.edit(ME, card.ref, title="moved on")
    with store.read() as tx:
        events = tx.max_event_id()
    got = save_with_event(
        store, card.id, card.version, {"title": "late"}, ("card.edited", ME, {"fields": []})
    )
    assert got is None
    assert board.get(card.ref).title == "moved on"
    with store.read() as tx:
        assert tx.max_event_id() == events


RANK_DDL = (  # the indexes on claim_rank are migration 220's since then
    "DROP INDEX cards_todo_rank",
    "DROP INDEX cards_todo_unranked",
    "DROP INDEX cards_status_since",
    "ALTER TABLE cards DROP COLUMN claim_rank",
    "DELETE FROM schema_migrations WHERE version = 150",
)


@pytest.mark.parametrize("review", [False, True])
def test_a_migration_numbered_below_the_newest_is_applied(store_url: str, review: bool) -> None:
    """A board made before migration 150 (but after 170) gets it when next opened."""
    store = open_store(store_url, FakeClock())
    board = Board(store)
    board.add_project(ME, "P")
    orig = board.create_card(ME, "P", "work", status="backlog")
    card = board.create_card(ME, "P", "a", meta={"review_of": orig.id} if review else None)
    with store.write() as tx:
        for sql in RANK_DDL:
            tx.run(sql)
    store.close()
    store = open_store(store_url, FakeClock())
    try:
        assert 150 in store.applied_versions()
        rank = {int(str(r["id"])): r["claim_rank"] for r in _ranks(store)}[card.id]
        assert (rank is None) is review
        _rank_holds(store)
    finally:
        store.close()


@pytest.mark.parametrize("pg", [False, True])
def test_the_statement_built_once_per_claimant_is_the_one_built_each_time(pg: bool) -> None:
    from laneboard.store.rank_sql import (
        EITHER,
        INDEX,
        RANK,
        ClaimSet,
        build_ranked_claim,
        ranked_claim,
    )

    sets = [
        ClaimSet(["w1"], True, None, 200, 32, 30),
        ClaimSet(["alice", "bob"], False, 7, 200, 32, 60),
        ClaimSet([], True, 3, 200, 32, 30),
    ]
    for claim_set in sets:
        for now in (1_000, 2_000_000):
            for who, kind, session, bypass in (
                ("w1", "agent", None, False),
                ("a", "human", "s", True),
            ):
                for part in (INDEX, RANK, EITHER):
                    args = (claim_set, who, kind, session, bypass, part)
                    assert ranked_claim(pg, now, *args) == build_ranked_claim(pg, now, *args)


@pytest.mark.parametrize("review", [False, True])
def test_a_claim_next_is_one_statement_unless_the_ranking_must_weigh(
    store_url: str, review: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the index walk runs alone (planned at about half the cost of both
    picks in one statement); only when a ready card is weighed in full (a review card)
    does the ranking follow it. SQLite runs both picks in one statement either way."""
    clock = FakeClock()
    store = open_store(store_url, clock)
    try:
        board = Board(store)
        pid, _ = _spread(board, clock, 10, tiers=2, review=review)
        clock.advance(MINUTE_MS)
        expected = _domain_order(store, pid)
        name = "write_statement" if store.dialect == "postgresql" else "claim_statement"
        calls: list[str] = []
        real = getattr(store, name)

        def counted(sql: str, *args: object, **kwargs: object) -> object:
            calls.append(sql)
            return real(sql, *args, **kwargs)

        monkeypatch.setattr(store, name, counted)
        first = board.claim_next(ME, include_unassigned=True, project="P")
        two = review and store.dialect == "postgresql"
        assert len(calls) == (2 if two else 1)
        assert first.id == expected[0]
    finally:
        store.close()


@pytest.mark.parametrize("review", [False, True])
def test_candidates_read_from_the_index_are_the_heaviest_in_the_domain_order(
    store_url: str, review: bool
) -> None:
    """The supervisor's candidates: the first few straight from the index when its order
    is the weight order, else a window weighed in full; the same cards either way."""
    clock = FakeClock()
    store = open_store(store_url, clock)
    try:
        board = Board(store)
        pid, _ = _spread(board, clock, 40, tiers=3, review=review)
        clock.advance(50 * MINUTE_MS)
        expected = _domain_order(store, pid)
        for limit in (1, 5, 12):
            got = board.candidates(include_unassigned=True, project="P", limit=limit)
            assert [c.card.id for c in got] == expected[:limit]
        with store.read() as tx:
            direct = tx.ready_in_weight_order(ReadySet(project_id=pid), 5)
        assert (direct is None) is review  # a review card is weighed in full
    finally:
        store.close()
