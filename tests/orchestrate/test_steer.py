"""``update`` to a busy specialist: a kind that cannot be steered (the scripted agent)
keeps the message for the specialist's next turn, and nothing counts as a steer; the
runtime's record of an accepted steer takes the messages off the queue and counts one
model call against the budget. (The steer itself, with the real Codex CLI:
tests/adapters/test_orchestrate_mcp_steer.py.)"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from tests.orchestrate.scripts import control
from tests.orchestrate.test_control import Run
from tests.orchestrate.test_refusals_e2e import run

from laneboard.board.orchestrate import Orchestrations
from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.service import Board
from laneboard.domain.budgets import Budgets
from laneboard.errors import LaneboardError
from laneboard.store import open_store

NOTE = "name the constant KEY-42"


def test_an_update_to_a_busy_scripted_specialist_waits_for_its_next_turn(
    tmp_path: Path, repo: Path
) -> None:
    # right's turn goes on only once the update is queued on its assignment: it arrives
    # while that turn runs
    queued = (f"until {sys.executable} -m laneboard.cli.main orchestrate control inspect "
              "--assignment right --json | grep -q KEY-42; do sleep 0.1; done")  # fmt: skip
    script = {
        "coordinator": [
            {"turn": 1, **control("assign", "--assignment", "left", "--owner", "specialist-a",
                                  "--brief", "the left half", "--path", "src/producer/left")},
            {"turn": 1, **control("assign", "--assignment", "right", "--owner", "specialist-b",
                                  "--brief", "the right half", "--path", "src/producer/right")},
            {"turn": 2, **control("update", "--assignment", "right", "--note", NOTE)},
            {"turn": 4, **control("complete")},
        ],
        "left": {"r1": [
            control("accept", "--assignment", "left", "--revision", "1"),
            {"write": "src/producer/left/out.txt", "content": "left\n"},
            control("report", "--assignment", "left", "--revision", "1"),
        ]},
        "right": {"r1": [
            {"turn": 1, **control("accept", "--assignment", "right", "--revision", "1")},
            {"turn": 1, "run": queued},
            {"turn": 1, "write": "src/producer/right/out.txt", "content": "right\n"},
            {"turn": 1, **control("report", "--assignment", "right", "--revision", "1")},
            {"turn": 2, "say": "noted: KEY-42"},
        ]},
    }  # fmt: skip
    code, doc, err = run(tmp_path, repo, script)
    assert code == 0 and doc["phase"] == "completed", err
    assert "steered" not in err
    assert "right's owner specialist-b answers: noted: KEY-42" in err
    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    (rid,) = [r["id"] for r in board.runs()]
    turns = Runtime(board).turns(rid)
    right = [t["purpose"] for t in turns if t["assignment"] == "right"]
    assert right == ["work", "clarify"]  # the message went with the next turn
    orch = Orchestrations(board)
    assert orch.plan(rid)["right"].messages == ()
    assert orch.get(rid).usage.model_calls == len(turns)  # no steer was counted
    with board.store.read() as tx:
        assert tx.events(run_id=rid, types=["orchestration.steered"]) == []


def test_a_steer_delivers_the_queued_messages_and_counts_as_a_model_call(board: Board) -> None:
    r = Run(board, Budgets(max_model_calls=3))
    r.assign_two()
    producer = r.orch.plan(r.id)["producer"]
    r.rt.dispatch(r.id, "specialist-a", "work", producer)
    r.call(r.coordinator, "update", assignment="producer", note="first")
    r.call(r.coordinator, "update", assignment="producer", note="second")
    r.rt.steered(r.id, "producer", 1)  # the turn accepted the first one only
    assert r.orch.plan(r.id)["producer"].messages == ("second",)
    assert r.orch.get(r.id).usage.model_calls == 2
    with board.store.read() as tx:
        (event,) = tx.events(run_id=r.id, types=["orchestration.steered"])
    assert event.payload == {"assignment": "producer", "revision": 1, "messages": 1}
    r.rt.steered(r.id, "producer", 1)
    with pytest.raises(LaneboardError) as err:  # the steers used the budget up
        r.rt.dispatch(r.id, "coordinator", "coordinate")
    assert err.value.code == "BUDGET_EXHAUSTED" and "model_calls" in err.value.message


class SteerableSessions:
    """The driver's sessions, as far as steering goes: records each steer, accepts it."""

    def __init__(self) -> None:
        self.steers: list[tuple[str, int, str]] = []

    def steer(self, role: str, card_id: int, text: str) -> bool:
        self.steers.append((role, card_id, text))
        return True

    def close(self) -> None:
        return None


def _driver_with_a_running_turn(board: Board, max_calls: int) -> tuple[Run, Any, SteerableSessions]:
    from concurrent import futures

    from laneboard.supervisor.orchestrate import Driver

    r = Run(board, Budgets(max_model_calls=max_calls))
    r.assign_two()
    producer = r.orch.plan(r.id)["producer"]
    r.rt.dispatch(r.id, "specialist-a", "work", producer)  # one model call: its turn runs
    r.call(r.coordinator, "update", assignment="producer", note="use KEY-42")
    sessions = SteerableSessions()
    driver = Driver(board, r.id, sessions)  # type: ignore[arg-type]
    driver.running["producer"] = ("specialist-a", futures.Future())  # not done: running
    return r, driver, sessions


def test_an_update_is_not_steered_once_the_model_call_budget_is_used_up(board: Board) -> None:
    r, driver, sessions = _driver_with_a_running_turn(board, max_calls=1)
    try:
        assert driver._steer_updates() is False
    finally:
        driver.pool.shutdown()
    assert sessions.steers == []  # a steer is a model call: none is left
    assert r.orch.plan(r.id)["producer"].messages == ("use KEY-42",)  # kept for later
    assert r.orch.get(r.id).usage.model_calls == 1
    with board.store.read() as tx:
        assert tx.events(run_id=r.id, types=["orchestration.steered"]) == []


def test_an_update_is_steered_while_the_budget_lasts(board: Board) -> None:
    r, driver, sessions = _driver_with_a_running_turn(board, max_calls=2)
    try:
        assert driver._steer_updates() is False  # sent: nothing waits to be tried again
    finally:
        driver.pool.shutdown()
    producer = r.orch.plan(r.id)["producer"]
    assert [(role, card) for role, card, _ in sessions.steers] == [
        ("specialist-a", producer.card_id)
    ]
    assert "use KEY-42" in sessions.steers[0][2]
    assert producer.messages == ()
    assert r.orch.get(r.id).usage.model_calls == 2
