"""The patrol finds the cards it may alert on by one indexed read per threshold; on SQLite,
whose planner has no statistics, a read must not walk every running card to find the
few review cards that are aging (it did: the status index, not the review keys')."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.store import open_store
from laneboard.supervisor.patrol_rows import PatrolSettings, due_card_ids

ME = human("alice")


def test_each_due_card_read_is_an_indexed_search(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'board.db'}")
    board = Board(store)
    board.add_project(ME, "P")
    for i in range(6):
        card = board.create_card(ME, "P", f"running {i}")
        board.claim(agent("worker"), card.ref)
    seen: list[tuple[str, tuple[Any, ...]]] = []
    with store.read() as tx:
        read = tx.all

        def spy(sql: str, params: Any = ()) -> Any:
            seen.append((sql, tuple(params)))
            return read(sql, params)

        tx.all = spy  # type: ignore[method-assign]
        due_card_ids(tx, store.clock.now_ms(), PatrolSettings())
        tx.all = read  # type: ignore[method-assign]
        plans = {sql: [str(r["detail"]) for r in tx.all(f"EXPLAIN QUERY PLAN {sql}", p)]
                 for sql, p in seen}  # fmt: skip
    store.close()
    assert len(plans) >= 5
    for sql, steps in plans.items():
        assert not any(s.startswith("SCAN cards") for s in steps), (sql, steps)
    review = [steps for sql, steps in plans.items() if "idempotency_key" in sql]
    assert review and all(any("cards_idempotency_key" in s for s in r) for r in review), review
