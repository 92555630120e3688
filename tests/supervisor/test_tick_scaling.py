"""A tick costs the same on a board with a long history as on a new one.

Counted in SQLite's virtual-machine steps (a progress handler on the board's connections),
not in time: a full tick (claims, dispatch, workflow, patrol, clean-up) on a board that
has ended 15,000 cards must do about the work of the same tick on one that has ended 300.
A read that walks done cards, their events or reports (a missing index, or SQLite's
planner choosing a worse one, as it has no statistics) makes the ratio grow with the
history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.supervisor.helpers import config

from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.store import Store, open_store
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.ticker import Ticker

ME = human("alice")
STEP = 100  # VM instructions per progress call


def board_with_history(root: Path, ended: int) -> Store:
    """``ended`` done or canceled cards, each with its events and (done) its report; then
    30 ready cards and 5 running ones, made through the board."""
    root.mkdir()
    (root / "proj").mkdir()
    store = open_store(f"sqlite:///{root / 'board.db'}")
    board = Board(store)
    board.add_project(ME, "B", path=str(root / "proj"))
    now = store.clock.now_ms()
    with store.write() as tx:
        pid = tx.project(key="B").id  # type: ignore[union-attr]
        for i in range(1, ended + 1):
            status = "canceled" if i % 10 == 0 else "done"
            at = now - (ended - i) * 1000
            tx.run(
                "INSERT INTO cards (project_id, number, ref, title, status, priority, "
                "status_since, created_at, updated_at, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (pid, i, f"B-{i}", f"old {i}", status, i % 4, at, at, at, json.dumps({})),
            )
            for kind in ("card.created", "card.claimed", "card.moved"):
                tx.run(
                    "INSERT INTO events (at, type, card_id, project_id, actor, actor_kind, "
                    "payload) VALUES (?, ?, ?, ?, 'alice', 'human', '{}')",
                    (at, kind, i, pid),
                )
            if status == "done":
                tx.run(
                    "INSERT INTO reports (card_id, round, body, evidence, author, author_kind, "
                    "created_at) VALUES (?, 1, 'did it', '[]', 'worker', 'agent', ?)",
                    (i, at),
                )
        tx.run("UPDATE projects SET next_number = ?", (ended + 1,))
    for i in range(5):
        board.claim(agent("worker"), board.create_card(ME, "B", f"running {i}").ref)
    for i in range(30):
        board.create_card(ME, "B", f"ready {i}")
    return store


def tick_steps(store: Store, tmp: Path) -> int:
    """The VM steps of one full tick (it claims and dispatches up to its budget)."""
    rt = Runtime(
        store, config(tmp, max_concurrency=8), "m", LogFile(str(tmp / "log")),
        pool_alive=lambda: True,
    )  # fmt: skip
    ticker = Ticker(rt)
    calls = [0]

    def count() -> int:
        calls[0] += 1
        return 0  # go on

    raw: Any = store
    connect = raw._connect

    def counted() -> Any:  # a connection the tick opens is counted too
        conn = connect()
        conn.set_progress_handler(count, STEP)
        return conn

    raw._connect = counted
    for conn in raw._all:
        conn.set_progress_handler(count, STEP)
    result = ticker.tick(force=True)
    raw._connect = connect
    for conn in raw._all:
        conn.set_progress_handler(None, STEP)
    assert len(result.passes["poll"]["claimed"]) == 8, result.passes
    return calls[0] * STEP


def test_a_full_tick_does_the_same_work_whatever_the_history(tmp_path: Path) -> None:
    small = board_with_history(tmp_path / "small", 300)
    large = board_with_history(tmp_path / "large", 15_000)
    try:
        few, many = tick_steps(small, tmp_path / "small"), tick_steps(large, tmp_path / "large")
    finally:
        small.close()
        large.close()
    assert many < 1.5 * few, f"{many} VM steps against {few}: a read grows with the history"
