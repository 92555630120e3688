"""Pushed wake-ups: the supervisor's loop is woken by writes, never by waiting out a poll.

The polling interval and the fallback tick are both set far beyond the test's timeout, so
only a push can reach the loop in time: a write through the supervisor's own ``Store``
(what an agent's call on the board socket is) on both backends, and a write by another
process through NOTIFY on PostgreSQL.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.model import human
from laneboard.store import open_store

from .helpers import RealNowClock, Running, config, wait_for


def _slow_polling(tmp_path: Path) -> SupervisorConfig:
    cfg = config(tmp_path, event_poll_ms=60_000)
    return replace(cfg, time=replace(cfg.time, tick_interval=1500)).validate()


def _card(board: Board, marker: Path) -> None:
    board.create_card(
        human("alice"),
        "E",
        "late card",
        acceptance_mode="off",
        meta={"script": [{"run": f"touch {marker}"}, {"deliver": "ok"}]},
    )


@pytest.mark.parametrize("writer", ["same store", "another process"])
def test_a_write_wakes_the_supervisor_without_a_poll(
    store_url: str, tmp_path: Path, writer: str
) -> None:
    if writer == "another process" and store_url.startswith("sqlite"):
        pytest.skip("SQLite's writers in other processes send nothing: they are polled")
    clock = RealNowClock()
    proj = tmp_path / "proj"
    proj.mkdir()
    other = open_store(store_url, clock)
    Board(other).add_project(human("alice"), "E", path=str(proj))
    with Running(store_url, _slow_polling(tmp_path), clock) as run:
        wait_for(lambda: run.sup.ticks >= 1, what="first tick")
        if writer == "another process":
            wait_for(lambda: run.sup.wakeups.listening, what="the listener")
        wait_for(lambda: run.sup.wakeups.waiting >= 1, what="the loop asleep")
        marker = proj / "started"
        _card(run.rt.board if writer == "same store" else Board(other), marker)
        wait_for(marker.exists, timeout=30, what="agent started")
        assert run.sup.ticker.next_due_ms > clock.now_ms() + 60_000  # no fallback tick was due
    other.close()
