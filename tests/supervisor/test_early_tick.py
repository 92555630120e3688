"""An agent's write that lands while a tick runs is news for the next tick."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.supervisor import outcomes, patrol
from laneboard.supervisor import ticker as ticks
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime

from .helpers import RealNowClock, Running, config, settled, wait_for


def test_a_write_during_the_passes_wakes_the_next_tick(store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "E", path=str(tmp_path))
    rt = Runtime(
        store, config(tmp_path), "m", LogFile(str(tmp_path / "log")), pool_alive=lambda: True
    )
    wrote: list[str] = []

    def agent_writes_mid_tick(_rt: Runtime, _dry: bool) -> dict[str, Any]:
        if not wrote:  # as an agent's delivery would, from another connection
            other = open_store(store_url, clock)
            try:
                wrote.append(Board(other).create_card(human(), "E", "x").ref)
            finally:
                other.close()
        return {}

    ticks.PASSES["patrol"] = agent_writes_mid_tick
    try:
        ticker = ticks.Ticker(rt)
        assert ticker.tick().state == "ran"
        assert wrote
        second = ticker.tick()  # not forced and not due: only the new event makes it run
        assert second.state == "ran"
        assert ticker.tick().state == "idle"  # and once seen, it is seen
    finally:
        ticks.PASSES["patrol"] = patrol.patrol_pass
        store.close()


class Monotonic:
    """The supervisor loop's monotonic clock, moved forward by hand."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def test_the_first_write_after_a_quiet_spell_ticks_without_the_debounce(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    """With the longest debounce (1 s), a card created while the supervisor is idle is
    claimed at once: only a write that follows a tick closely waits for the debounce."""
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "Q", path=str(tmp_path))
    run = Running(sqlite_store_url, config(tmp_path, debounce_ms=1000), clock)
    mono = run.sup.monotonic = Monotonic()
    with run:
        wait_for(lambda: run.sup.ticks >= 1, what="the first tick")
        mono.offset += 5  # a quiet spell longer than the debounce
        ref = board.create_card(human(), "Q", "at once", acceptance_mode="off").ref
        wait_for(lambda: board.get(ref).status.value != "todo", what="the claim")
        wait_for(lambda: settled(store), what="turns recorded")
    events = {e.type: e.at for e in reversed(board.events(card=ref, limit=50))}
    assert events["card.claimed"] - events["card.created"] < 1000
    store.close()


def _hold_the_first_row_for_a_tick(run: Running, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Close the first turn's queue row only after a tick that runs meanwhile (or a
    second: ``turn.finished`` is the turn path's own record and wakes no tick itself).
    The row then closes as the turns that do not end their card's part close it — in a
    write of its own after the turn's end — not with the turn's end (``close_left``)."""
    real_finish = outcomes.finish_row
    real_close = outcomes.close_left
    held: list[int] = []

    def close_later(*args: Any) -> bool:
        return bool(held) and real_close(*args)

    monkeypatch.setattr(outcomes, "close_left", close_later)

    def finish_after_a_tick(pool: Any, row: Any, state: str, *, note: str) -> None:
        if not held:
            held.append(run.sup.ticks)
            deadline = time.monotonic() + 1
            while run.sup.ticks == held[0] and time.monotonic() < deadline:
                time.sleep(0.01)
        real_finish(pool, row, state, note=note)

    monkeypatch.setattr(outcomes, "finish_row", finish_after_a_tick)
    return held


def test_a_turn_that_ends_without_news_still_frees_its_slot_at_once(
    sqlite_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's queue row closes after its ``turn.finished`` event, in a write of its own
    with no event. When a tick reads the row still open (no slot left), the row's closing
    must still make a tick run its passes, or the next card waits for the fallback tick
    (10 minutes)."""
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "F", path=str(tmp_path))
    a = board.create_card(human(), "F", "first", acceptance_mode="off")
    b = board.create_card(human(), "F", "next", acceptance_mode="off")
    run = Running(sqlite_store_url, config(tmp_path, max_concurrency=1), clock)
    held = _hold_the_first_row_for_a_tick(run, monkeypatch)
    with run:
        wait_for(lambda: board.get(b.ref).status.value == "done", timeout=30, what="b done")
        wait_for(lambda: settled(store), what="turns recorded")
        assert run.sup.ticker.next_due_ms > clock.now_ms()  # no fallback tick came due
    assert board.get(a.ref).status.value == "done"
    assert held
    store.close()


def test_a_card_released_by_its_own_turn_is_claimed_again_when_the_turn_ends(
    sqlite_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slots to spare, but the released card's own queue row is still open when the ticks
    its release and its turn's end wake run: the row's closing must bring it back."""
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(human(), "G", path=str(tmp_path))
    script = [{"lb": "card release {card}", "attempt": 1}, {"deliver": "back", "attempt": 2}]
    a = board.create_card(human(), "G", "again", acceptance_mode="off", meta={"script": script})
    run = Running(sqlite_store_url, config(tmp_path, max_concurrency=4), clock)
    held = _hold_the_first_row_for_a_tick(run, monkeypatch)
    with run:
        wait_for(lambda: board.get(a.ref).status.value == "done", timeout=30, what="a done")
        wait_for(lambda: settled(store), what="turns recorded")
    assert held
    store.close()
