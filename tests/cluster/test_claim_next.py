"""``claim --next`` answers the truth: a card, or ``NOTHING_READY`` — never a conflict.

Eight OS processes drain one board through ``Board.claim_next`` until each is told
nothing is ready, while another writer keeps taking the cards' row locks in turn; every
card must be claimed exactly once and no call may answer ``CLAIM_CONFLICT``. On PostgreSQL a ready card whose row another write holds locked
(a comment, say) is waited for, not skipped into a conflict.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human
from laneboard.errors import LaneboardError
from laneboard.store import open_store

PROCESSES = 8
CARDS = 160
ME = human("alice")


def _drainer(url: str, index: int, start: Any, out: Any) -> None:
    store = open_store(url, FakeClock())
    board = Board(store)
    me = agent(f"w{index}")
    won: list[int] = []
    answers: Counter[str] = Counter()
    start.wait(timeout=60)
    while True:
        try:
            won.append(board.claim_next(me, include_unassigned=True).id)
        except LaneboardError as err:
            answers[err.code] += 1
            if err.code != "CLAIM_CONFLICT":
                break
    out.put({"won": won, "answers": dict(answers)})
    store.close()


def _locker(url: str, start: Any, stop: Any, out: Any) -> None:
    """Another writer: keeps the last ready card's row locked a while, again and again."""
    store = open_store(url, FakeClock())
    start.wait(timeout=60)
    n = 0
    while not stop.is_set():
        with store.write() as tx:
            ready = tx.ready_cards()
            if ready:  # the card the drainers come to last, so the one left at the end
                tx.card(ready[-1].id, lock=True)  # as a comment or a move does
                time.sleep(0.5)  # the writer's own work, with the row held
        n += 1
    out.put({"locks": n})
    store.close()


def test_racing_claim_next_never_answers_conflict(store_url: str) -> None:
    store = open_store(store_url, FakeClock())
    board = Board(store)
    board.add_project(ME, "P")
    for i in range(CARDS):
        board.create_card(ME, "P", f"card {i}", priority=i % 4)
    store.close()
    pg = store_url.startswith("postgresql")  # SQLite writers hold the board, not one row
    ctx = mp.get_context("spawn")
    start, out, stop = ctx.Barrier(PROCESSES + pg), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_drainer, args=(store_url, i, start, out)) for i in range(PROCESSES)
    ]
    lockers = [ctx.Process(target=_locker, args=(store_url, start, stop, out))] if pg else []
    for p in [*procs, *lockers]:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    stop.set()
    if pg:
        assert out.get(timeout=60)["locks"] > 0
    for p in [*procs, *lockers]:
        p.join(60)
        assert p.exitcode == 0
    answers: Counter[str] = Counter()
    wins: Counter[int] = Counter()
    for r in results:
        answers.update(r["answers"])
        wins.update(r["won"])
    assert answers == {"NOTHING_READY": PROCESSES}, f"answers other than a card: {answers}"
    assert len(wins) == CARDS and set(wins.values()) == {1}


def _until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_an_agent_is_not_offered_cards_assigned_to_others(store_url: str) -> None:
    store = open_store(store_url, FakeClock())
    try:
        board = Board(store)
        board.add_project(ME, "P")
        board.create_card(ME, "P", "bob's", assignee="bob")
        with pytest.raises(LaneboardError) as err:
            board.claim_next(agent("w"), assignees=["bob"])
        assert err.value.code == "NOTHING_READY"
        mine = board.create_card(ME, "P", "w's", assignee="w")
        assert board.claim_next(agent("w"), assignees=["bob", "w"]).id == mine.id
        assert board.claim_next(ME, assignees=["bob"]).assignee == "bob"  # people may
    finally:
        store.close()


@pytest.mark.parametrize("holder_claims", [False, True])
def test_a_locked_ready_card_is_waited_for(store_url: str, holder_claims: bool) -> None:
    """Another write holds the only ready card's row: wait, then take it or say none."""
    if not store_url.startswith("postgresql"):
        pytest.skip("SQLite writers hold the whole board, never one row")
    store, other = open_store(store_url, FakeClock()), open_store(store_url, FakeClock())
    try:
        board, other_board = Board(store), Board(other)
        board.add_project(ME, "P")
        card = board.create_card(ME, "P", "only")
        got: list[Any] = []
        holding, release = threading.Event(), threading.Event()
        pid: list[int] = []

        def holder() -> None:
            with other.write() as tx:
                tx.card(card.id, lock=True)  # as a comment or a move does
                pid.append(int(tx.scalar("SELECT pg_backend_pid()")))
                if holder_claims:
                    other_board.claim_in(tx, ME, card.id, "bob", None)
                holding.set()
                assert release.wait(60)

        def claimant() -> None:
            try:
                got.append(board.claim_next(agent("w"), include_unassigned=True))
            except LaneboardError as err:
                got.append(err.code)

        h = threading.Thread(target=holder)
        h.start()
        assert holding.wait(30)
        c = threading.Thread(target=claimant)
        c.start()

        def blocked_or_done() -> bool:
            if got:
                return True
            with store.autocommit() as tx:
                return bool(
                    tx.scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE ? = ANY(pg_blocking_pids(pid))",
                        (pid[0],),
                    )
                )

        _until(blocked_or_done, "the claimant to wait on the row")
        release.set()
        h.join(30)
        c.join(60)
        if holder_claims:
            assert got == ["NOTHING_READY"]
        else:
            assert len(got) == 1 and not isinstance(got[0], str), f"answered {got}"
            assert got[0].id == card.id and got[0].holder == "w"
    finally:
        store.close()
        other.close()


def test_claim_next_takes_cards_in_the_candidates_order(store_url: str) -> None:
    """Priority, then age, time in status and fan-out: each claim is the first candidate."""
    clock = FakeClock()
    store = open_store(store_url, clock)
    try:
        board = Board(store)
        board.add_project(ME, "P")
        made = []
        for i in range(12):
            made.append(board.create_card(ME, "P", f"c{i}", priority=(i * 7) % 3))
            clock.advance(minutes=5 + (i * 13) % 17)
        blocker = board.create_card(ME, "P", "waited on", priority=2)
        for later in made[-3:]:  # three cards wait on it: 90 minutes of fan-out
            board.link(ME, later.ref, blocker.ref)
        board.move(ME, made[4].ref, "backlog")  # back to todo later: time in status resets
        clock.advance(minutes=30)
        board.move(ME, made[4].ref, "todo")
        claimed = []
        while True:
            expected = [c.card.id for c in board.candidates(include_unassigned=True)]
            try:
                got = board.claim_next(ME, include_unassigned=True)
            except LaneboardError as err:
                assert err.code == "NOTHING_READY" and expected == []
                break
            assert got.id == expected[0]
            claimed.append(got.id)
            if got.id == blocker.id:
                board.report(ME, got.ref, "done")
                board.move(ME, got.ref, "in_review")
                board.move(ME, got.ref, "done")
            clock.advance(minutes=1)
        assert len(claimed) == 13
        assert claimed.index(blocker.id) < claimed.index(made[-1].id)
    finally:
        store.close()
