"""The real Codex CLI as the coordinator of an orchestrated run, against the scripted model
server: it plans two scripted specialists with ``lb orchestrate control`` in its shell
(remote mode, under its session's credential), they deliver, and the run publishes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agent_kit import Kind
from model_server import ModelServer, Reply

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

CHECK = "test -f src/producer/api.txt && test -f src/consumer/use.txt"


def specialist(name: str, path: str) -> dict[str, object]:
    ctl = ["orchestrate", "control"]
    return {"r1": [
        {"lb": [*ctl, "accept", "--assignment", name, "--revision", "1"]},
        {"write": path, "content": f"{name}\n"},
        {"lb": [*ctl, "report", "--assignment", name, "--revision", "1", "--note", "done"]},
    ]}  # fmt: skip


def test_codex_coordinates_two_specialists_to_a_published_patch(
    tmp_path: Path, repo: Path, server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    kind = Kind("codex", home, server)
    for key, value in kind.env().items():  # what the sessions inherit (the model server)
        if not key.startswith("LANEBOARD_"):
            monkeypatch.setenv(key, value)
    ctl = "lb orchestrate control"
    server.add(
        Reply(tool_calls=[kind.bash(
            f"{ctl} assign --assignment producer --owner specialist-a --brief 'the record' "
            "--path src/producer --check 'test -f src/producer/api.txt'")],
            expect=("You coordinate an orchestrated run",)),
        Reply(tool_calls=[kind.bash(
            f"{ctl} assign --assignment consumer --owner specialist-b --brief 'read it' "
            "--path src/consumer --dep producer")]),
        Reply(text="planned: producer, then consumer"),
        Reply(text="the consumer is next", expect=("producer revision 1 is verified",)),
        Reply(tool_calls=[kind.bash(f"{ctl} complete")],
              expect=("consumer revision 1 is verified",)),
        Reply(text="complete"),
    )  # fmt: skip
    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    me = human("alice")
    board.add_project(me, "P", path=str(repo))
    start = goal_start(str(repo))
    spec = {"allow_paths": ["src/producer", "src/consumer"], "checks": [CHECK],
            "coordinator": "codex", "specialists": "scripted", "publish": "patch",
            "scripts": {"producer": specialist("producer", "src/producer/api.txt"),
                        "consumer": specialist("consumer", "src/consumer/use.txt")}}  # fmt: skip
    rt = Runtime(board)
    o = rt.create(me, "P", "a producer and a consumer", spec, Budgets(), start.to_dict())
    # laneboard's own sandbox is the boundary here: Codex's nested bubblewrap cannot always
    # set up its user namespace inside it on a busy host, which would fail a shell call
    codex = {
        **kind.config(tmp_path),
        "allow_all_tools": True,
        "allow_all_tools_reason": "the test runs Codex inside laneboard's sandbox",
    }
    config = SupervisorConfig(default_agent="scripted", state_dir=str(tmp_path / "state"),
                              agent_kinds={"codex": codex}).validate()  # fmt: skip
    sessions = Sessions(rt, o.run_id, config, start.repo, {"coordinator": "codex", "*": "scripted"})
    result = Driver(board, o.run_id, sessions).run()
    assert server.errors == [], [t.body.get("input", [])[-1:] for t in server.turns()]
    assert result["applied"], result
    assert (repo / "src/producer/api.txt").read_text() == "producer\n"
    assert (repo / "src/consumer/use.txt").read_text() == "consumer\n"
    plan = Orchestrations(board).plan(o.run_id)
    assert {n: (a.state.value, a.verified) for n, a in plan.items()} == {
        "producer": ("completed", 1),
        "consumer": ("completed", 1),
    }
    coordinator = [t for t in rt.turns(o.run_id) if t["role"] == "coordinator"]
    assert len(coordinator) == 3 and all(t["state"] == "ended" for t in coordinator)
    sid = rt.roles(o.run_id)["coordinator"]["session_id"]
    assert sid and os.path.isdir(tmp_path / "state")  # one Codex thread, resumed each wake
