"""A candidate is read again before its admission once REREAD_MS have passed since the
candidates were read: a card claimed elsewhere meanwhile costs no lane, brief or claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
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
    clock = RealNowClock()
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
