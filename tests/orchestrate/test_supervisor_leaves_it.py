"""The resident supervisor neither claims an orchestrated run's cards nor ticks the run:
lb orchestrate's own runtime drives them."""

from __future__ import annotations

from pathlib import Path

from tests.supervisor.helpers import config

from laneboard.board.orchestrate import Orchestrations
from laneboard.board.orchestrate_runtime import Runtime as OrchRuntime
from laneboard.board.service import Board
from laneboard.domain.budgets import Budgets
from laneboard.domain.model import human
from laneboard.domain.runs import RunOptions
from laneboard.store import Store
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runs import RunsClock
from laneboard.supervisor.runtime import Runtime

ME = human("alice")


def test_the_supervisor_leaves_an_orchestrated_run_to_its_runtime(
    store: Store, tmp_path: Path
) -> None:
    board = Board(store)
    board.add_project(ME, "P")
    o = OrchRuntime(board).create(ME, "P", "orchestrated", {"allow_paths": ["src"]},
                                  Budgets(), {"repo": "/r", "head": "0" * 40})  # fmt: skip
    coordinator = board.get(o.coordinator_card_id or 0)
    Orchestrations(board).control(ME, "assign", {
        "run": o.run_id, "assignment": "api", "owner": "worker", "brief": "b",
        "paths": ["src/api"]})  # fmt: skip
    card = board.get(Orchestrations(board).plan(o.run_id)["api"].card_id or 0)
    plain = board.create_run(ME, "P", "plain", RunOptions())
    ordinary = board.create_card(ME, "P", "ordinary", assignee="worker", run_id=plain["id"])
    rt = Runtime(store, config(tmp_path), "test-machine", LogFile(str(tmp_path / "log")))
    ticked: list[int] = []
    RunsClock(rt, None, lambda _rt, _pool, rid: ticked.append(rid))()
    assert ticked == [plain["id"]]
    with store.read() as tx:
        skipped = tx.run_ids_not_claiming(("active",)) | tx.orchestrated_run_ids()
    assert o.run_id in skipped and plain["id"] not in skipped
    cands = [c.card.id for c in board.candidates(assignees=["worker", "coordinator"])]
    assert card.id in cands and coordinator.id in cands  # claimable by the board's rules …
    assert ordinary.id in cands  # … so the poll pass skips the orchestrated run's cards
