"""``update`` to a busy specialist steers its running turn when its kind supports it: the
real Codex CLI as a specialist against the scripted model server receives the
coordinator's message inside the turn already running (``turn/steer``) — its next model
request of that turn carries it — and the steer counts against ``--max-model-calls``.
The specialist works through ``orchestrator_control`` as an MCP tool."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agent_kit import Kind
from model_server import ModelServer, Reply, ToolCall

from laneboard.board.orchestrate import Orchestrations
from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.budgets import Budgets
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.supervisor.orchestrate import Driver
from laneboard.supervisor.orchestrate_agents import Sessions
from laneboard.workspace.patch import goal_start

NAMESPACE = "mcp__laneboard"
NOTE = "name the constant KEY-42"
WAIT_S = 120.0


def control(*args: str) -> dict[str, Any]:
    return {"lb": ["orchestrate", "control", *args]}


COORDINATOR = [
    {"turn": 1, **control("assign", "--assignment", "slow", "--owner", "specialist-b",
                          "--brief", "write the constant", "--path", "src/slow",
                          "--check", "grep -q KEY-42 src/slow/out.txt")},
    {"turn": 1, **control("assign", "--assignment", "quick", "--owner", "specialist-a",
                          "--brief", "write a marker", "--path", "src/quick")},
    {"turn": 2, **control("update", "--assignment", "slow", "--note", NOTE)},
    {"turn": 3, **control("complete")},
]  # fmt: skip
QUICK = {"r1": [
    control("accept", "--assignment", "quick", "--revision", "1"),
    {"write": "src/quick/marker.txt", "content": "quick\n"},
    control("report", "--assignment", "quick", "--revision", "1", "--note", "marked"),
]}  # fmt: skip


def mcp(args: dict[str, Any]) -> ToolCall:
    return ToolCall("orchestrator_control", args, namespace=NAMESPACE)


def wait_for(pred: Any, what: str) -> None:
    """Wait for the real processes to reach a state (not for board time to pass)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_update_steers_the_running_codex_turn_and_counts_as_a_model_call(
    tmp_path: Path, repo: Path, server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    kind = Kind("codex", home, server)
    for key, value in kind.env().items():  # what the sessions inherit (the model server)
        if not key.startswith("LANEBOARD_"):
            monkeypatch.setenv(key, value)
    server.add(
        # the first request of the specialist's turn stalls until the test releases it;
        # Codex then drops that sampling and asks again, with the steer
        Reply(text="reading the brief", hold=True, expect=("Assignment 'slow'",)),
        Reply(tool_calls=[ToolCall("tool_search", {"query": "orchestrator_control"},
                                   search=True)], expect=(NOTE,)),
        Reply(tool_calls=[mcp({"verb": "accept", "assignment": "slow", "revision": 1})]),
        Reply(tool_calls=[kind.write(repo, "src/slow/out.txt", "KEY-42")]),
        Reply(tool_calls=[mcp({"verb": "report", "assignment": "slow", "revision": 1,
                               "note": "wrote KEY-42"})]),
        Reply(text="done: KEY-42"),
    )  # fmt: skip
    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    me = human("alice")
    board.add_project(me, "P", path=str(repo))
    start = goal_start(str(repo))
    spec = {"allow_paths": ["src/slow", "src/quick"], "checks": ["test -f src/quick/marker.txt"],
            "coordinator": "scripted", "specialists": "scripted", "publish": "patch",
            "scripts": {"coordinator": COORDINATOR, "quick": QUICK}}  # fmt: skip
    rt = Runtime(board)
    budgets = Budgets(debounce_ms=0)
    o = rt.create(me, "P", "a slow and a quick one", spec, budgets, start.to_dict())
    # laneboard's own sandbox is the boundary: Codex's nested bubblewrap cannot always set
    # up its user namespace inside it on a busy host
    codex = {**kind.config(tmp_path), "allow_all_tools": True,
             "allow_all_tools_reason": "the test runs Codex inside laneboard's sandbox"}  # fmt: skip
    config = SupervisorConfig(default_agent="scripted", state_dir=str(tmp_path / "state"),
                              agent_kinds={"codex": codex}).validate()  # fmt: skip
    kinds = {"coordinator": "scripted", "specialist-b": "codex", "*": "scripted"}
    sessions = Sessions(rt, o.run_id, config, start.repo, kinds)
    out: list[dict[str, Any]] = []
    driver = threading.Thread(target=lambda: out.append(Driver(board, o.run_id, sessions).run()))
    driver.start()
    try:
        assert server.wait_hanging(WAIT_S), server.errors

        def steered() -> bool:
            with board.store.read() as tx:
                return bool(tx.events(types=["orchestration.steered"]))

        wait_for(steered, "the steer into the running turn")
        server.release()
        driver.join(WAIT_S * 2)
        assert not driver.is_alive()
    finally:
        server.release()
        driver.join(WAIT_S)
    assert server.errors == [], server.errors
    assert out and out[0]["applied"], out
    assert (repo / "src/slow/out.txt").read_text().strip() == "KEY-42"
    turns = rt.turns(o.run_id)
    slow = [t for t in turns if t["assignment"] == "slow"]
    assert [t["purpose"] for t in slow] == ["work"]  # the message did not need a turn
    plan = Orchestrations(board).plan(o.run_id)
    assert plan["slow"].messages == () and plan["slow"].verified == 1
    # every dispatched turn, plus the one steer
    assert Orchestrations(board).get(o.run_id).usage.model_calls == len(turns) + 1
