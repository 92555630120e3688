"""The claim order is the domain order with SLA pressure in play, on both backends.

``claim --next`` ranks ready cards in SQL (``ClaimQueries.ready_first``) unless one is
waited on; the candidate list ranks them in Python (``domain.weights.order``). Random
boards — priorities, review cards at every stage of their ``review_aging`` limit, times
in status reset by a move, fan-out — must give the same order both ways, to the card,
and a drain by ``claim_next`` must take the cards in exactly that order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from laneboard.board.service import Board
from laneboard.domain import deps, weights
from laneboard.domain.clock import MINUTE_MS, FakeClock
from laneboard.domain.model import human
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store

ME = human("alice")
KEYS = (f"P{i}" for i in itertools.count())


@dataclass(frozen=True)
class Spec:
    priority: int
    review: bool
    gap_ms: int  # clock advance before the card is made
    reset_ms: int | None  # back to todo this long after the last card: time in status restarts
    waited: bool  # an open card depends on it (fan-out)


# times on a 5-minute grid make exact and near ties common (a different slope or threshold
# in one of the two rankings then splits some differently); others are any millisecond
GRID = st.integers(0, 24).map(lambda k: k * 5 * MINUTE_MS)
SPECS = st.builds(
    Spec,
    st.sampled_from([1, 2, 2, 2, 3]),
    st.booleans(),
    st.one_of(st.just(0), GRID, st.integers(0, 90 * MINUTE_MS), st.sampled_from([1, MINUTE_MS])),
    st.one_of(st.none(), GRID, st.integers(0, 60 * MINUTE_MS)),
    st.booleans(),
)
LIMITS = st.sampled_from([weights.DEFAULT_SLA, weights.SlaLimits(review_aging_min=17)])


@pytest.fixture
def board_clock(store_url: str) -> Iterator[tuple[Board, Store, FakeClock]]:
    clock = FakeClock()
    store = open_store(store_url, clock)
    try:
        yield Board(store), store, clock
    finally:
        store.close()


def _build(board: Board, clock: FakeClock, specs: list[Spec], fan_out: bool) -> tuple[str, int]:
    key = next(KEYS)
    pid = board.add_project(ME, key).id
    orig = board.create_card(ME, key, "the delivered work", status="backlog")
    made = []
    for i, s in enumerate(specs):
        clock.advance(s.gap_ms)
        meta = {"review_of": orig.id, "review_round": 1} if s.review else None
        made.append(board.create_card(ME, key, f"c{i}", priority=s.priority, meta=meta))
    for s, c in zip(specs, made, strict=True):
        if fan_out and s.waited:
            board.create_card(ME, key, f"waits on {c.ref}", status="backlog", depends_on=[c.ref])
    resets = sorted((s.reset_ms, c.ref) for s, c in zip(specs, made, strict=True) if s.reset_ms)
    at = 0
    for reset, ref in resets:
        board.move(ME, ref, "backlog")
        clock.advance(reset - at)
        at = reset
        board.move(ME, ref, "todo")
    return key, pid


def _domain_order(store: Store, pid: int, limits: weights.SlaLimits) -> list[int]:
    with store.read() as tx:
        now = tx.now()
        ready = tx.ready_cards(project_id=pid)
        fan = deps.downstream_counts(tx.open_dependents(), [c.id for c in ready])
    sla = {c.id: s for c in ready if (s := weights.card_sla_clock(c, now, limits))}
    return [w.card.id for w in weights.order(ready, now, fan, sla)]


@settings(
    max_examples=35,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=st.lists(SPECS, min_size=1, max_size=9),
    later_ms=st.one_of(GRID, st.integers(0, 240 * MINUTE_MS)),
    fan_out=st.booleans(),
    limits=LIMITS,
)
def test_sql_rank_and_claim_drain_follow_the_domain_order(
    board_clock: tuple[Board, Store, FakeClock],
    specs: list[Spec],
    later_ms: int,
    fan_out: bool,
    limits: weights.SlaLimits,
) -> None:
    board, store, clock = board_clock
    board.sla = limits
    key, pid = _build(board, clock, specs, fan_out)
    clock.advance(later_ms)
    expected = _domain_order(store, pid, limits)
    assert len(set(expected)) == len(expected) == len(specs)  # every ready card, once
    with store.read() as tx:
        ranked = tx.ready_first(
            len(specs), project_id=pid, review_aging_min=limits.review_aging_min
        )
        keys = tx.ready_keys(project_id=pid)
        now = tx.now()
    waited = fan_out and any(s.waited for s in specs)
    if waited:
        assert ranked is None  # fan-out: the caller weighs it
    else:
        assert ranked is not None and [k.id for k in ranked] == expected
    assert {k.id for k in keys if k.review} == {
        c for c, s in zip(sorted(expected), specs, strict=True) if s.review
    }
    assert [c.card.id for c in board.candidates(project=key, limit=100)] == expected
    drained = []
    while True:
        try:
            drained.append(board.claim_next(ME, include_unassigned=True, project=key).id)
        except LaneboardError as err:
            assert err.code == "NOTHING_READY"
            break
    assert drained == expected
    assert now == clock.now_ms()  # nothing moved the clock: one order throughout


def test_claim_next_takes_the_review_card_nearing_its_sla_first(
    board_clock: tuple[Board, Store, FakeClock],
) -> None:
    """Equal cards but one review card: from half its limit on, it is taken first."""
    board, _store, clock = board_clock
    board.add_project(ME, "P")
    orig = board.create_card(ME, "P", "work", status="backlog")
    plain = board.create_card(ME, "P", "plain")
    review = board.create_card(ME, "P", "review", meta={"review_of": orig.id})
    clock.advance(45 * MINUTE_MS)
    got = {c.card.id: c for c in board.candidates()}
    assert [c.card.id for c in board.candidates()] == [review.id, plain.id]
    assert got[review.id].to_dict()["sla_row"] == "review_aging"
    assert got[review.id].to_dict()["sla_pressure"] == 30.0
    assert got[review.id].weight == 45 + 22.5 + 30
    assert got[plain.id].to_dict()["sla_row"] is None
    assert got[plain.id].sla_pressure == 0.0 and got[plain.id].weight == 45 + 22.5
    urgent = board.create_card(ME, "P", "urgent plain", priority=1)
    assert board.claim_next(ME, include_unassigned=True).id == urgent.id  # tier first
    assert board.claim_next(ME, include_unassigned=True).id == review.id
    assert board.claim_next(ME, include_unassigned=True).id == plain.id


STRADDLE_MIN = [0, 10, 29.5, 30, 30.001, 44, 59.999, 60, 60.001, 75, 200, 1000]


@pytest.mark.parametrize("limits", [weights.DEFAULT_SLA, weights.SlaLimits(review_aging_min=17)])
def test_sql_rank_splits_near_ties_as_the_domain_does(
    board_clock: tuple[Board, Store, FakeClock], limits: weights.SlaLimits
) -> None:
    """A review card of every stage against plain cards 1 ms lighter, equal and heavier.

    Each pair is its own project. The plain card's age is chosen so that its weight
    straddles the review card's exactly: any other slope, threshold or rounding in the
    SQL ranking splits one of these ties differently.
    """
    board, store, clock = board_clock
    board.sla = limits
    end = clock.now_ms() + 3000 * MINUTE_MS  # every card is made before this instant
    made: list[tuple[int, str, int, bool]] = []  # (made at, project, order, review)
    for i, minutes in enumerate(STRADDLE_MIN):
        aged = int(minutes * MINUTE_MS)
        clk = weights.SlaClock("review_aging", end - aged, limits.review_aging_min)
        units = 3 * aged + 2 * clk.pressure_ms(end)  # the review card's weight units
        for j, delta in enumerate((-1, 0, 1)):
            key = f"S{i}X{j}"
            plain_age = units // 3 + delta
            made += [(end - aged, key, 0, True), (end - plain_age, key, 1, False)]
    pids: dict[str, int] = {}
    orig: dict[str, int] = {}
    for at, key, _, review in sorted(made):
        if key not in pids:
            pids[key] = board.add_project(ME, key).id
            orig[key] = board.create_card(ME, key, "work", status="backlog").id
        clock.advance(max(0, at - clock.now_ms()))
        meta = {"review_of": orig[key]} if review else None
        board.create_card(ME, key, "review" if review else "plain", meta=meta)
    clock.advance(end - clock.now_ms())
    splits = set()
    for key, pid in pids.items():
        expected = _domain_order(store, pid, limits)
        with store.read() as tx:
            ranked = tx.ready_first(2, project_id=pid, review_aging_min=limits.review_aging_min)
        assert ranked is not None and [k.id for k in ranked] == expected, key
        with store.read() as tx:
            first = tx.card(expected[0])
        splits.add(first.title)
    assert splits == {"review", "plain"}  # the straddle really does flip the order


def test_the_supervisor_weighs_with_the_configured_patrol_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[patrol] review_aging_min`` moves a review card ahead as the patrol sees it."""
    import argparse

    from laneboard.cli.common import Context
    from laneboard.cli.loop_cmds import runtime

    cfg = tmp_path / "cfg" / "laneboard"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text("[patrol]\nreview_aging_min = 20\nstale_min = 45\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    url = f"sqlite:///{tmp_path / 'b.db'}"
    clock = FakeClock()
    store = open_store(url, clock)
    try:
        board = Board(store)
        board.add_project(ME, "P")
        orig = board.create_card(ME, "P", "work", status="backlog")
        plain = board.create_card(ME, "P", "plain")
        clock.advance(5 * MINUTE_MS)
        review = board.create_card(ME, "P", "review", meta={"review_of": orig.id})
        clock.advance(15 * MINUTE_MS)
        # plain: 20 + 10 = 30; review by default: 15 + 7.5, by the 20-minute limit + 10
        assert [c.card.id for c in board.candidates()] == [plain.id, review.id]
        monkeypatch.setenv("LANEBOARD_NOW", str(clock.now_ms()))
        rt = runtime(Context(argparse.Namespace(db=url)))
        try:
            assert rt.board.sla == weights.SlaLimits(review_aging_min=20, stale_min=45)
            got = rt.board.candidates()
            assert [c.card.id for c in got] == [review.id, plain.id]
            assert (got[0].sla_row, got[0].sla_pressure, got[0].weight) == (
                "review_aging",
                10.0,
                15 + 7.5 + 10,
            )
        finally:
            rt.store.close()
    finally:
        store.close()
