"""A candidate is read again before its admission once REREAD_MS have passed since the
candidates were read: a card claimed elsewhere meanwhile costs no lane, brief or claim."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human
from laneboard.store import open_store
from laneboard.supervisor import poll
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime

from .helpers import RealNowClock, config


@pytest.mark.parametrize("later_ms", [0, poll.REREAD_MS])
def test_a_candidate_claimed_elsewhere_is_left_alone_once_read_again(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later_ms: int
) -> None:
    # time moves only when told: on a loaded machine the real clock alone may pass
    # REREAD_MS between the read and the admission
    clock = FakeClock(time.time_ns() // 1_000_000)
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "R", path=str(tmp_path))
    card = board.create_card(human(), "R", "raced")
    rt = Runtime(store, config(tmp_path), "m", LogFile(str(tmp_path / "log")),
                 pool_alive=lambda: True)  # fmt: skip
    read = rt.board.candidates
    admitted: list[str] = []

    def candidates_then_claimed_elsewhere(**kw: Any) -> Any:
        got = read(**kw)
        board.claim(agent("elsewhere"), card.ref)  # another machine's poll, just after
        clock.advance(seconds=later_ms / 1000)
        return got

    assert rt.admitter is not None
    admit = rt.admitter.admit

    def admitting(c: Any, p: Any) -> str:
        admitted.append(c.ref)
        return admit(c, p)

    monkeypatch.setattr(rt.board, "candidates", candidates_then_claimed_elsewhere)
    monkeypatch.setattr(rt.admitter, "admit", admitting)
    res = poll.poll(rt)
    assert res.claimed == []  # claimed once, elsewhere
    # read again after REREAD_MS: left alone before its admission; read just now: the
    # claim's compare-and-swap refuses it after the admission
    assert admitted == ([] if later_ms else [card.ref])
    store.close()


def test_the_poll_reads_the_projects_again_on_a_projects_news_only(
    store_url: str, tmp_path: Path
) -> None:
    from laneboard.supervisor import ticker as ticks

    store = open_store(store_url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "P", path=str(tmp_path))
    rt = Runtime(store, config(tmp_path), "m", LogFile(str(tmp_path / "log")),
                 pool_alive=lambda: True)  # fmt: skip
    ticker = ticks.Ticker(rt)
    ticker.resident = True  # lb start's ticker: it keeps the projects between polls
    ticker.tick(force=True)
    seen = rt.projects_seen
    assert seen is not None and [p.key for p in seen[0]] == ["P"]
    board.create_card(human(), "P", "one")
    assert ticker.tick(news={"card.created"}).passes["poll"]["claimed"] == ["P-1"]
    assert rt.projects_seen is seen  # no project's news: the projects as read before
    (tmp_path / "q").mkdir()
    board.add_project(human(), "Q", path=str(tmp_path / "q"))
    board.create_card(human(), "Q", "two")
    got = ticker.tick(news={"project.added", "card.created"})
    assert got.passes["poll"]["claimed"] == ["Q-1"]
    assert rt.projects_seen is not seen
    assert [p.key for p in rt.projects_seen[0]] == ["P", "Q"]
    board.set_project_config(human(), "Q", {"workspace": "shared"})
    board.create_card(human(), "Q", "three")
    assert ticker.tick(news={"project.configured", "card.created"}).passes["poll"]["claimed"]
    q = board.project("Q")
    assert rt.projects_seen[1][q.id] == {"workspace": "shared"}  # admitted with the edit
    store.close()


def test_after_a_lost_claim_the_next_candidates_are_taken_in_a_random_order(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Machines polling at once try the same cards in the same order: one that lost a
    claim spreads over the next ones instead of racing the winner for each in turn."""
    from laneboard.errors import LaneboardError

    store = open_store(store_url, RealNowClock())
    board = Board(store)
    board.add_project(human(), "S", path=str(tmp_path))
    refs = [board.create_card(human(), "S", f"c{n}").ref for n in range(5)]
    rt = Runtime(store, config(tmp_path), "m", LogFile(str(tmp_path / "log")),
                 pool_alive=lambda: True)  # fmt: skip
    claim = rt.board.claim_in

    def first_taken_elsewhere(tx: Any, actor: Any, card_id: int, *a: Any) -> Any:
        if card_id == board.get(refs[0]).id:
            raise LaneboardError("CLAIM_CONFLICT", "claimed by another machine", "next")
        return claim(tx, actor, card_id, *a)

    class Reversing:
        def shuffle(self, items: list[Any]) -> None:
            items.reverse()

    monkeypatch.setattr(rt.board, "claim_in", first_taken_elsewhere)
    monkeypatch.setattr(poll, "_rng", Reversing())
    res = poll.poll(rt)
    assert res.lost == 1
    assert res.claimed == list(reversed(refs[1:]))  # the next ones, in the spread order
    store.close()
