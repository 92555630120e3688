"""The real Codex CLI and the real Claude Code as the coordinator of an orchestrated run,
calling ``orchestrator_control`` as an MCP tool: the runtime gives the session laneboard's
own MCP server (``lb mcp`` in remote mode, under the session's credential); Codex loads the
tool through its ``tool_search``, Claude Code lists it as ``mcp__laneboard__…``; two
scripted specialists deliver and the run publishes. A refusal reaches the model as the
board's one line, verbatim."""

from __future__ import annotations

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
from laneboard.errors import LaneboardError
from laneboard.store import open_store
from laneboard.supervisor.orchestrate import Driver
from laneboard.supervisor.orchestrate_agents import Sessions
from laneboard.workspace.patch import goal_start

CHECK = "test -f src/producer/api.txt && test -f src/consumer/use.txt"
NAMESPACE = "mcp__laneboard"  # how Codex names laneboard's MCP server to the model
PRODUCER = {"verb": "assign", "assignment": "producer", "owner": "specialist-a",
            "brief": "the record", "paths": ["src/producer"],
            "checks": ["test -f src/producer/api.txt"]}  # fmt: skip
OVERLAP = {"verb": "assign", "assignment": "consumer", "owner": "specialist-b",
           "brief": "read it", "paths": ["src/producer/use.txt"], "deps": ["producer"]}  # fmt: skip
CONSUMER = {**OVERLAP, "paths": ["src/consumer"]}
ASSIGNED = '\\"verb\\":\\"assign\\"'  # the tool's JSON result, as a string in the request


def control(args: dict[str, Any]) -> ToolCall:
    return ToolCall("orchestrator_control", args, namespace=NAMESPACE)


def specialist(name: str, path: str) -> dict[str, object]:
    ctl = ["orchestrate", "control"]
    return {"r1": [
        {"lb": [*ctl, "accept", "--assignment", name, "--revision", "1"]},
        {"write": path, "content": f"{name}\n"},
        {"lb": [*ctl, "report", "--assignment", name, "--revision", "1", "--note", "done"]},
    ]}  # fmt: skip


def tool_texts(body: dict[str, Any]) -> list[str]:
    """The text of each tool result a Responses request carries (a string, or text parts)."""
    out: list[str] = []
    for item in body.get("input", []):
        if item.get("type") == "function_call_output":
            got = item.get("output")
            parts = got if isinstance(got, list) else [{"text": got}]
            out += [str(p.get("text", "")) for p in parts if isinstance(p, dict)]
    return out


def tool_results(body: dict[str, Any]) -> list[str]:
    """The text of each tool result an Anthropic Messages request carries."""
    out: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                got = block.get("content")
                parts = got if isinstance(got, list) else [{"text": got}]
                out += [str(p.get("text", "")) for p in parts if isinstance(p, dict)]
    return out


def refusal_line(board: Board, rt: Runtime, spec: dict[str, Any], start: dict[str, Any]) -> str:
    """The line the board refuses the overlapping assign with, on a run of its own."""
    other = rt.create(human("alice"), "P", "the same plan", spec, Budgets(), start)
    orch = Orchestrations(board)
    orch.control(human("alice"), "assign", {**PRODUCER, "run": other.run_id})
    with pytest.raises(LaneboardError) as err:
        orch.control(human("alice"), "assign", {**OVERLAP, "run": other.run_id})
    assert err.value.code == "PATH_OVERLAP"
    return err.value.line()


SPEC = {"allow_paths": ["src/producer", "src/consumer"], "checks": [CHECK],
        "specialists": "scripted", "publish": "patch",
        "scripts": {"producer": specialist("producer", "src/producer/api.txt"),
                    "consumer": specialist("consumer", "src/consumer/use.txt")}}  # fmt: skip


def coordinate(tmp_path: Path, repo: Path, kind: Kind,
               monkeypatch: pytest.MonkeyPatch) -> tuple[Board, Runtime, int, dict[str, Any]]:  # fmt: skip
    """Run the goal with ``kind`` as the coordinator (not unrestricted: the MCP calls need
    no shell) and scripted specialists; the board, the runtime, the run and its result."""
    for key, value in kind.env().items():  # what the sessions inherit (the model server)
        if not key.startswith("LANEBOARD_"):
            monkeypatch.setenv(key, value)
    board = Board(open_store(f"sqlite:///{tmp_path / 'board.db'}"))
    me = human("alice")
    board.add_project(me, "P", path=str(repo))
    start = goal_start(str(repo))
    rt = Runtime(board)
    spec = {**SPEC, "coordinator": kind.name}
    o = rt.create(me, "P", "a producer and a consumer", spec, Budgets(), start.to_dict())
    config = SupervisorConfig(default_agent="scripted", state_dir=str(tmp_path / "state"),
                              agent_kinds={kind.name: kind.config(tmp_path)}).validate()  # fmt: skip
    kinds = {"coordinator": kind.name, "*": "scripted"}
    sessions = Sessions(rt, o.run_id, config, start.repo, kinds)
    result = Driver(board, o.run_id, sessions).run()
    assert kind.server.errors == [], kind.server.errors
    assert result["applied"], result
    assert (repo / "src/producer/api.txt").read_text() == "producer\n"
    assert (repo / "src/consumer/use.txt").read_text() == "consumer\n"
    plan = Orchestrations(board).plan(o.run_id)
    assert {n: (a.state.value, a.verified, a.paths) for n, a in plan.items()} == {
        "producer": ("completed", 1, ("src/producer",)),
        "consumer": ("completed", 1, ("src/consumer",)),
    }
    coordinator = [t for t in rt.turns(o.run_id) if t["role"] == "coordinator"]
    assert len(coordinator) == 3 and all(t["state"] == "ended" for t in coordinator)
    return board, rt, o.run_id, result


def test_codex_calls_orchestrator_control_through_mcp(
    tmp_path: Path, repo: Path, server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    server.add(
        Reply(tool_calls=[ToolCall("tool_search", {"query": "orchestrator_control"},
                                   search=True)],
              expect=("You coordinate an orchestrated run",)),
        Reply(tool_calls=[control(PRODUCER)], expect=('"name": "orchestrator_control"',)),
        Reply(tool_calls=[control(OVERLAP)], expect=(ASSIGNED,)),
        Reply(tool_calls=[control(CONSUMER)], expect=("error PATH_OVERLAP",)),
        Reply(text="planned: producer, then consumer"),
        Reply(text="the consumer is next", expect=("producer revision 1 is verified",)),
        Reply(tool_calls=[control({"verb": "complete"})],
              expect=("consumer revision 1 is verified",)),
        Reply(text="complete", expect=('\\"verb\\":\\"complete\\"',)),
    )  # fmt: skip
    board, rt, run_id, result = coordinate(tmp_path, repo, Kind("codex", home, server), monkeypatch)
    turns = server.turns()
    assert server.errors == [], [t.body.get("input", [])[-1:] for t in turns]
    assert result["applied"], result
    # the tool reached the model only through MCP: deferred, then loaded by tool_search
    first = turns[0].body
    assert not any(t.get("name") == "orchestrator_control" for t in first["tools"])
    assert any(t.get("type") == "tool_search" for t in first["tools"])
    # the refusal is the board's own line, verbatim, in the tool output the model read
    line = refusal_line(
        board, rt, {**SPEC, "coordinator": "codex"}, Orchestrations(board).get(run_id).start
    )
    outputs = tool_texts(turns[3].body)
    assert line in outputs, (line, outputs)


def test_claude_code_calls_orchestrator_control_through_mcp(
    tmp_path: Path, repo: Path, server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tool = f"{NAMESPACE}__orchestrator_control"
    server.add(
        Reply(tool_calls=[ToolCall(tool, PRODUCER)],
              expect=("You coordinate an orchestrated run", tool)),
        Reply(tool_calls=[ToolCall(tool, OVERLAP)], expect=('\\"verb\\":\\"assign\\"',)),
        Reply(tool_calls=[ToolCall(tool, CONSUMER)], expect=("error PATH_OVERLAP",)),
        Reply(text="planned: producer, then consumer"),
        Reply(text="the consumer is next", expect=("producer revision 1 is verified",)),
        Reply(tool_calls=[ToolCall(tool, {"verb": "complete"})],
              expect=("consumer revision 1 is verified",)),
        Reply(text="complete", expect=('\\"verb\\":\\"complete\\"',)),
    )  # fmt: skip
    kind = Kind("claude", home, server)
    board, rt, run_id, result = coordinate(tmp_path, repo, kind, monkeypatch)
    turns = server.turns()
    assert server.errors == [], [t.body.get("messages", [])[-1:] for t in turns]
    assert result["applied"], result
    # the session's MCP server offers only the run's tools
    mcp = sorted(t["name"] for t in turns[0].body["tools"] if t["name"].startswith(NAMESPACE))
    assert mcp == [f"{NAMESPACE}__{t}" for t in ("ask", "get_card", "orchestrator_control")]
    line = refusal_line(
        board, rt, {**SPEC, "coordinator": "claude"}, Orchestrations(board).get(run_id).start
    )
    outputs = tool_results(turns[2].body)
    assert line in outputs, (line, outputs)
