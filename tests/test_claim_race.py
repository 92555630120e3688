"""Eight OS processes race to claim the same cards: exactly one winner per card.

Runs on both backends. Winners are counted twice: from what the processes report and
from the ``card.claimed`` events. Afterwards the losers' old epochs are fenced off.
"""

from __future__ import annotations

import multiprocessing as mp
import random
from typing import Any

from laneboard.board.service import Board
from laneboard.domain.clock import HOUR_MS, FakeClock
from laneboard.domain.model import agent, human
from laneboard.errors import LaneboardError
from laneboard.store import open_store

PROCESSES = 8
CARDS = 24
ME = human("alice")


def _racer(url: str, index: int, refs: list[str], start: Any, phase2: Any, out: Any) -> None:
    """One claimant process: claim every card in its own order, then write with old epochs."""
    store = open_store(url, FakeClock())
    board = Board(store)
    name = f"w{index}"
    order = list(refs)
    random.Random(index).shuffle(order)
    won: list[tuple[str, int, int]] = []
    lost = 0
    other: list[str] = []
    start.wait(timeout=60)
    for ref in order:
        try:
            card = board.claim(agent(name), ref)
            won.append((ref, card.id, card.claim_epoch))
        except LaneboardError as err:
            if err.code == "CLAIM_CONFLICT":
                lost += 1
            else:
                other.append(err.line())
    out.put({"name": name, "won": won, "lost": lost, "other": other})
    phase2.wait(timeout=120)  # the parent has taken every card over by now
    fenced: list[str] = []
    for ref, card_id, epoch in won:
        try:
            board.heartbeat(agent(name, card_id=card_id, epoch=epoch), ref)
            fenced.append("accepted")
        except LaneboardError as err:
            fenced.append(err.code)
    out.put({"name": name, "fenced": fenced})
    store.close()


def test_racing_processes_get_exactly_one_winner_per_card(store_url: str) -> None:
    clock = FakeClock()
    store = open_store(store_url, clock)
    board = Board(store)
    try:
        board.add_project(ME, "RACE")
        refs = [board.create_card(ME, "RACE", f"card {i}").ref for i in range(CARDS)]
        ctx = mp.get_context("spawn")
        start = ctx.Barrier(PROCESSES)
        phase2 = ctx.Barrier(PROCESSES + 1)
        out = ctx.Queue()
        procs = [
            ctx.Process(target=_racer, args=(store_url, i, refs, start, phase2, out))
            for i in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in procs]

        assert all(r["other"] == [] for r in results), [r["other"] for r in results]
        winners: dict[str, list[str]] = {}
        for r in results:
            for ref, _id, epoch in r["won"]:
                assert epoch == 1
                winners.setdefault(ref, []).append(r["name"])
        assert sorted(winners) == sorted(refs)
        assert all(len(w) == 1 for w in winners.values()), winners
        assert all(len(r["won"]) + r["lost"] == CARDS for r in results)
        assert sum(r["lost"] for r in results) == CARDS * (PROCESSES - 1)

        claimed = [e for e in board.events(limit=10_000) if e.type == "card.claimed"]
        by_events: dict[str, list[str]] = {}
        for e in claimed:
            by_events.setdefault(e.payload["ref"], []).append(e.payload["holder"])
        assert by_events == winners
        for ref in refs:
            card = board.get(ref)
            assert (card.status.value, card.holder, card.claim_epoch) == (
                "in_progress",
                winners[ref][0],
                1,
            )

        # every card is taken over after 6 h; the old holders' epoch-1 writes are refused
        clock.advance(6 * HOUR_MS)
        for ref in refs:
            assert board.claim(agent("rescuer"), ref).claim_epoch == 2
        phase2.wait(timeout=120)
        fenced = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        codes = [code for f in fenced for code in f["fenced"]]
        assert codes == ["STALE_CLAIM"] * CARDS
        assert all(board.get(ref).holder == "rescuer" for ref in refs)
    finally:
        store.close()


def _next_racer(url: str, index: int, start: Any, out: Any) -> None:
    """One process taking the next ready card until none is left."""
    store = open_store(url, FakeClock())
    board = Board(store)
    me = agent(f"n{index}")
    won: list[str] = []
    errors: list[str] = []
    start.wait(timeout=60)
    while True:
        try:
            won.append(board.claim_next(me, include_unassigned=True).ref)
        except LaneboardError as err:
            if err.code == "NOTHING_READY":
                break
            errors.append(err.line())
            if len(errors) > 20:
                break
    out.put({"name": me.name, "won": won, "errors": errors})
    store.close()


def test_racing_claim_next_takes_each_card_once(store_url: str) -> None:
    store = open_store(store_url, FakeClock())
    board = Board(store)
    try:
        board.add_project(ME, "NEXT")
        refs = [
            board.create_card(ME, "NEXT", f"card {i}", priority=i % 4).ref for i in range(CARDS * 2)
        ]
        ctx = mp.get_context("spawn")
        start = ctx.Barrier(PROCESSES)
        out = ctx.Queue()
        procs = [
            ctx.Process(target=_next_racer, args=(store_url, i, start, out))
            for i in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        # a claimant that lost every candidate of a read may see CLAIM_CONFLICT; never more
        assert all(
            all(e.startswith("error CLAIM_CONFLICT") for e in r["errors"]) for r in results
        ), results
        taken = [ref for r in results for ref in r["won"]]
        assert sorted(taken) == sorted(refs)  # every card once, none twice
        claimed = [e.payload["ref"] for e in board.events(limit=10_000) if e.type == "card.claimed"]
        assert sorted(claimed) == sorted(refs)
        for r in results:
            for ref in r["won"]:
                card = board.get(ref)
                assert (card.status.value, card.holder, card.claim_epoch) == (
                    "in_progress",
                    r["name"],
                    1,
                )
    finally:
        store.close()


def test_claim_next_takes_the_heaviest_ready_card(store_url: str) -> None:
    store = open_store(store_url, FakeClock())
    board = Board(store)
    try:
        board.add_project(ME, "W")
        low = board.create_card(ME, "W", "low", priority=3)
        high = board.create_card(ME, "W", "high", priority=0)
        blocked = board.create_card(ME, "W", "waits on low", priority=0)
        board.link(ME, blocked.ref, low.ref)
        mine = board.create_card(ME, "W", "assigned elsewhere", priority=0, assignee="other")
        me = agent("worker")
        assert board.claim_next(me, include_unassigned=True).ref == high.ref
        assert board.claim_next(me, include_unassigned=True).ref == low.ref
        try:
            board.claim_next(me, include_unassigned=True)
            raise AssertionError("expected NOTHING_READY")
        except LaneboardError as err:
            assert err.code == "NOTHING_READY"
        assert board.claim_next(agent("other")).ref == mine.ref  # its own assignment
        try:
            board.claim_next(agent("worker", card_id=high.id, epoch=1))
            raise AssertionError("expected FORBIDDEN")
        except LaneboardError as err:
            assert err.code == "FORBIDDEN"
        assert board.get(blocked.ref).status.value == "todo"
    finally:
        store.close()
