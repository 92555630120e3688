"""Each agent kind's recorded stream becomes the same transcript shape."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
from tests.adapters.test_adapters_parsing import CLAUDE, CODEX, PI, SID

from laneboard.agents.base import AgentEvent
from laneboard.agents.claude import ClaudeParser
from laneboard.agents.codex import CodexParser
from laneboard.agents.command import CommandSession
from laneboard.agents.jsonlines import TurnParser
from laneboard.agents.pi import PiParser
from laneboard.agents.procs import LineProcess
from laneboard.agents.scripted import ScriptedSession
from laneboard.domain.roles import Role
from laneboard.domain.transcript import OUTPUT_LIMIT, normalize
from laneboard.ops.turns import ENTRY

ENTRY_FIELDS = ("type", "text", "tool", "call_id", "args", "output", "exit_code", "is_error",
                "paths")  # fmt: skip


def entries(kind: str, events: list[AgentEvent]) -> list[dict[str, Any]]:
    got = [normalize(kind, ev.kind, ev.data) for ev in events]
    out = [e for e in got if e is not None]
    schema = {**ENTRY, "required": list(ENTRY_FIELDS)}
    props = {k: v for k, v in ENTRY["properties"].items() if k in ENTRY_FIELDS}
    for e in out:
        assert sorted(e) == sorted(ENTRY_FIELDS)
        jsonschema.validate(e, {**schema, "properties": props})
    return out


def parse(parser: TurnParser, lines: list[dict[str, Any]]) -> list[AgentEvent]:
    seen: list[AgentEvent] = []
    parser.on_event = seen.append
    for line in lines:
        parser.feed_line(json.dumps(line) + "\n")
    assert seen == parser.events
    return seen


def test_claude_stream_json_normalizes_tool_calls_edits_results_and_usage() -> None:
    edit = {
        "type": "assistant",
        "session_id": SID,
        "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_2", "name": "Edit",
             "input": {"file_path": "src/app.py", "old_string": "a", "new_string": "b"}},
            {"type": "tool_use", "id": "toolu_3", "name": "Grep", "input": {"pattern": "TODO"}},
        ]},
    }  # fmt: skip
    long_result = {
        "type": "user",
        "session_id": SID,
        "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_3", "content": "x" * 5000},
        ]},
    }  # fmt: skip
    got = entries("claude", parse(ClaudeParser(), [*CLAUDE[:3], edit, long_result, *CLAUDE[3:]]))
    assert [e["type"] for e in got] == [
        "info", "lb", "tool_result", "file_edit", "tool_call", "tool_result", "message", "result",
    ]  # fmt: skip
    assert got[1]["text"] == "lb card get WEB-1" and got[1]["tool"] == "Bash"
    assert got[1]["call_id"] == "toolu_1"
    assert got[2]["output"] == "WEB-1 in_progress" and got[2]["call_id"] == "toolu_1"
    assert got[3]["paths"] == ["src/app.py"] and got[3]["tool"] == "Edit"
    assert json.loads(got[4]["args"]) == {"pattern": "TODO"}
    assert len(got[5]["output"]) < OUTPUT_LIMIT + 100  # a bounded view of a long result
    assert got[6]["text"] == "Delivered."
    assert "16 in / 7 out tokens" in got[7]["text"] and "$0.0002" in got[7]["text"]


def test_codex_notifications_normalize_commands_file_changes_and_messages() -> None:
    change = {"method": "item/completed", "params": {"item": {
        "type": "fileChange", "status": "completed",
        "changes": [{"path": "README.md"}, {"path": "src/x.py"}]}}}  # fmt: skip
    failing = {"method": "item/completed", "params": {"item": {
        "type": "commandExecution", "command": "pytest -q", "status": "failed",
        "exitCode": 1}}}  # fmt: skip
    got = entries("codex", parse(CodexParser(request_id=7), [*CODEX[:5], change, failing,
                                                             *CODEX[5:]]))  # fmt: skip
    assert [e["type"] for e in got] == ["lb", "file_edit", "command", "message", "result"]
    assert got[0]["exit_code"] == 0 and not got[0]["is_error"]
    assert got[1]["paths"] == ["README.md", "src/x.py"]
    assert got[2]["text"] == "pytest -q" and got[2]["exit_code"] == 1 and got[2]["is_error"]
    assert got[3]["text"] == "Hello"
    assert "31 in / 10 out tokens" in got[4]["text"]


def test_pi_rpc_events_normalize_tool_calls_results_and_messages() -> None:
    write = [
        {"type": "tool_execution_start", "toolCallId": "c2", "toolName": "write",
         "args": {"path": "notes.txt", "content": "hi"}},
        {"type": "tool_execution_end", "toolCallId": "c2", "toolName": "write",
         "result": {"content": [{"type": "text", "text": "denied"}]}, "isError": True},
    ]  # fmt: skip
    got = entries("pi", parse(PiParser(request_id="lb-2"), [*PI[:4], *write, *PI[4:]]))
    assert [e["type"] for e in got] == [
        "lb", "tool_result", "file_edit", "tool_result", "message", "result",
    ]  # fmt: skip
    assert got[0]["tool"] == "bash" and got[0]["call_id"] == "c1"
    assert got[1]["output"] == "WEB-1" and got[1]["tool"] == "bash"
    assert got[2]["paths"] == ["notes.txt"]
    assert got[3]["is_error"] and got[3]["output"] == "denied"
    assert got[4]["text"] == "Hello there"
    assert "$0.5000" in got[5]["text"]


SCRIPTED_TURN = [
    {"type": "event", "kind": "step", "data": {"write": "notes.txt", "content": "x"}},
    {"type": "event", "kind": "step", "data": {"run": "make test"}},
    {"type": "event", "kind": "command",
     "data": {"command": "make test", "exit_code": 2, "output": "1 failed"}},
    {"type": "event", "kind": "step", "data": {"deliver": "done"}},
    {"type": "event", "kind": "lb",
     "data": {"args": ["card", "report", "WEB-1", "--body", "done"], "exit": 0, "stderr": ""}},
    {"type": "event", "kind": "step", "data": {"say": "all done"}},
    {"type": "event", "kind": "text", "data": {"text": "all done"}},
    {"type": "result", "ok": True, "text": "all done",
     "usage": {"input_tokens": 4, "output_tokens": 2}},
]  # fmt: skip


def test_scripted_agent_lines_normalize_through_its_session(tmp_path: Path) -> None:
    recording = tmp_path / "turn.jsonl"
    recording.write_text("".join(json.dumps(x) + "\n" for x in SCRIPTED_TURN))
    program = textwrap.dedent(f"""
        import sys
        sys.stdin.readline()
        sys.stdout.write(open({str(recording)!r}).read())
        sys.stdout.flush()
        sys.stdin.readline()
    """)
    proc = LineProcess([sys.executable, "-c", program], cwd=str(tmp_path), env={}, stderr_path=None)
    seen: list[AgentEvent] = []
    try:
        result = ScriptedSession(proc, "s-1").send("go", timeout=30, on_event=seen.append)
    finally:
        proc.kill()
    assert result.ok and result.final_text == "all done"
    got = entries("scripted", seen)
    assert [e["type"] for e in got] == ["file_edit", "command", "lb", "message"]
    assert got[0]["paths"] == ["notes.txt"]
    assert got[1]["exit_code"] == 2 and got[1]["is_error"] and got[1]["output"] == "1 failed"
    assert got[2]["text"] == "lb card report WEB-1 --body done"
    assert got[3]["text"] == "all done"


def test_command_agent_output_becomes_the_turn_message(tmp_path: Path) -> None:
    """A command agent streams nothing: its output is the turn's one message, which the
    supervisor's transcript sink adds when the turn ends (tests/agents_view covers it)."""
    session = CommandSession("sh -c 'echo working; echo done'", str(tmp_path), "c-1",
                             Role("worker"), {"PATH": "/usr/bin:/bin"})  # fmt: skip
    seen: list[AgentEvent] = []
    result = session.send("go", timeout=30, on_event=seen.append)
    assert result.ok and seen == []
    assert result.final_text == "working\ndone\n"
