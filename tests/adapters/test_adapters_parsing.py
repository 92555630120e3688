"""Each adapter's stream parsing on recorded streams (shapes taken from the pinned CLIs),
including truncated and malformed lines, and the turn driver on a real child process."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from laneboard.agents.base import TurnResult
from laneboard.agents.claude import ClaudeParser
from laneboard.agents.codex import CodexParser
from laneboard.agents.jsonlines import TurnDriver, TurnParser
from laneboard.agents.pi import PiParser
from laneboard.agents.procs import LineProcess

SID = "668a7bda-4bf6-4541-843f-3a4df5226c9f"

CLAUDE = [
    {
        "type": "system",
        "subtype": "init",
        "cwd": "/lane",
        "session_id": SID,
        "tools": ["Bash", "Read"],
        "model": "claude-x",
        "permissionMode": "dontAsk",
    },
    {
        "type": "assistant",
        "session_id": SID,
        "message": {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "Bash",
                    "input": {"command": "lb card get WEB-1"},
                }
            ],
        },
    },
    {
        "type": "user",
        "session_id": SID,
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": False,
                    "content": "WEB-1 in_progress",
                }
            ],
        },
    },
    {
        "type": "assistant",
        "session_id": SID,
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Delivered."}]},
    },
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 71,
        "num_turns": 2,
        "result": "Delivered.",
        "session_id": SID,
        "total_cost_usd": 0.00023,
        "usage": {
            "input_tokens": 11,
            "cache_creation_input_tokens": 2,
            "cache_read_input_tokens": 3,
            "output_tokens": 7,
        },
    },
]

TID, TURN = "01a22e2f-776d-7ff3", "01a22e2f-777c-79c3"
CODEX = [
    {"id": 7, "result": {"turn": {"id": TURN, "items": [], "status": "inProgress"}}},
    {"method": "turn/started", "params": {"threadId": TID, "turn": {"id": TURN}}},
    {"method": "item/agentMessage/delta", "params": {"itemId": "m1", "delta": "Hel"}},
    {
        "method": "item/completed",
        "params": {
            "item": {
                "type": "commandExecution",
                "command": "/bin/bash -c 'lb card get WEB-1'",
                "status": "completed",
                "exitCode": 0,
            }
        },
    },
    {
        "method": "thread/tokenUsage/updated",
        "params": {"tokenUsage": {"last": {"inputTokens": 11, "outputTokens": 7}, "total": {}}},
    },
    {"method": "item/completed", "params": {"item": {"type": "agentMessage", "text": "Hello"}}},
    {
        "method": "thread/tokenUsage/updated",
        "params": {"tokenUsage": {"last": {"inputTokens": 20, "outputTokens": 3}, "total": {}}},
    },
    {
        "method": "turn/completed",
        "params": {
            "threadId": TID,
            "turn": {"id": TURN, "status": "completed", "durationMs": 130, "items": []},
        },
    },
]

PI_ASSISTANT = {
    "role": "assistant",
    "content": [{"type": "text", "text": "Hello there"}],
    "usage": {"input": 11, "output": 7, "cacheRead": 1, "cacheWrite": 0, "cost": {"total": 0.5}},
    "stopReason": "stop",
}
PI = [
    {"id": "lb-2", "type": "response", "command": "prompt", "success": True},
    {"type": "agent_start"},
    {
        "type": "tool_execution_start",
        "toolCallId": "c1",
        "toolName": "bash",
        "args": {"command": "lb card get WEB-1"},
    },
    {
        "type": "tool_execution_end",
        "toolCallId": "c1",
        "toolName": "bash",
        "result": {"content": [{"type": "text", "text": "WEB-1"}]},
        "isError": False,
    },
    {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "Hel"}},
    {"type": "message_end", "message": PI_ASSISTANT},
    {"type": "agent_end", "messages": []},
]


def feed(parser: TurnParser, lines: list[dict[str, object] | str]) -> TurnParser:
    for line in lines:
        parser.feed_line(line if isinstance(line, str) else json.dumps(line) + "\n")
    return parser


def test_claude_stream_gives_text_session_usage_and_cost() -> None:
    result = feed(ClaudeParser(), list(CLAUDE)).result()
    assert result.ok and result.error is None
    assert result.final_text == "Delivered."
    assert result.session_id == SID
    assert result.usage.input_tokens == 16 and result.usage.output_tokens == 7
    assert result.usage.cost_usd == 0.00023 and result.usage.duration_ms == 71
    assert [e.kind for e in result.events] == ["init", "tool_use", "tool_result", "text", "result"]


def test_claude_error_result_fails_the_turn_with_its_reason() -> None:
    bad = {
        **CLAUDE[-1],
        "subtype": "error_during_execution",
        "is_error": True,
        "result": None,
        "errors": ["API Error: 400 model server: unexpected request"],
    }
    result = feed(ClaudeParser(), [*CLAUDE[:-1], bad]).result()
    assert not result.ok
    assert result.error is not None and "error_during_execution" in result.error
    assert "unexpected request" in result.error


def test_claude_api_error_reported_as_a_success_result_fails_the_turn() -> None:
    # what the pinned CLI prints when the model's response cannot be parsed
    bad = {**CLAUDE[-1], "subtype": "success", "is_error": True}
    bad["result"] = "API Error: Failed to parse JSON"
    result = feed(ClaudeParser(), [*CLAUDE[:-1], bad]).result()
    assert not result.ok
    assert result.error == "claude turn ended with an error: API Error: Failed to parse JSON"


def test_codex_stream_sums_usage_over_the_turn() -> None:
    result = feed(CodexParser(request_id=7), list(CODEX)).result()
    assert result.ok, result.error
    assert result.final_text == "Hello"
    assert result.usage.input_tokens == 31 and result.usage.output_tokens == 10
    assert result.usage.duration_ms == 130
    kinds = [e.kind for e in result.events]
    assert kinds == ["text_delta", "command", "text", "result"]


def test_codex_failed_and_interrupted_turns() -> None:
    failed = {
        "method": "turn/completed",
        "params": {
            "turn": {"id": TURN, "status": "failed", "error": {"message": "stream disconnected"}}
        },
    }
    result = feed(CodexParser(request_id=7), [*CODEX[:3], failed]).result()
    assert not result.ok and result.error is not None and "stream disconnected" in result.error
    stopped = {
        "method": "turn/completed",
        "params": {"turn": {"id": TURN, "status": "interrupted"}},
    }
    result = feed(CodexParser(request_id=7), [*CODEX[:3], stopped]).result()
    assert result.interrupted and not result.ok


def test_codex_refused_turn_start_ends_the_turn() -> None:
    refused = {"id": 7, "error": {"code": -32600, "message": "thread not found"}}
    result = feed(CodexParser(request_id=7), [refused]).result()
    assert not result.ok and result.error is not None and "thread not found" in result.error


def test_pi_stream_gives_text_usage_and_cost() -> None:
    result = feed(PiParser(request_id="lb-2"), list(PI)).result()
    assert result.ok, result.error
    assert result.final_text == "Hello there"
    assert result.usage.input_tokens == 12 and result.usage.output_tokens == 7
    assert result.usage.cost_usd == 0.5
    assert [e.kind for e in result.events] == [
        "tool_use",
        "tool_result",
        "text_delta",
        "text",
        "result",
    ]


def test_pi_aborted_message_marks_the_turn_interrupted() -> None:
    aborted = {"type": "message_end", "message": {**PI_ASSISTANT, "stopReason": "aborted"}}
    result = feed(PiParser(request_id="lb-2"), [*PI[:2], aborted, PI[-1]]).result()
    assert result.interrupted and not result.ok


def test_a_malformed_line_fails_the_turn_and_keeps_everything_else() -> None:
    for parser, lines in (
        (ClaudeParser(), CLAUDE),
        (CodexParser(request_id=7), CODEX),
        (PiParser(request_id="lb-2"), PI),
    ):
        broken: list[dict[str, object] | str] = [*lines[:2], '{"type": "assist', *lines[2:]]
        result = feed(parser, broken).result()
        assert not result.ok, parser.kind
        assert result.error is not None and "malformed line" in result.error
        assert '{"type": "assist' in result.error
        assert parser.done  # the end event after the bad line was still read
        assert result.final_text  # the text after it was kept
        assert [e for e in result.events if e.kind == "result"]


def test_a_truncated_stream_fails_with_the_exit_code_and_stderr() -> None:
    for parser, lines in (
        (ClaudeParser(), CLAUDE),
        (CodexParser(request_id=7), CODEX),
        (PiParser(request_id="lb-2"), PI),
    ):
        feed(parser, list(lines[:-1]))
        parser.end_of_stream(1, "boom: out of memory")
        result = parser.result(exit_code=1)
        assert not result.ok and result.exit_code == 1
        assert result.error is not None
        assert "exited before the turn finished (exit code 1)" in result.error
        assert "boom: out of memory" in result.error
        assert len(result.events) >= 2  # nothing read before the cut is lost


def test_the_driver_reads_a_real_process_that_dies_mid_turn(tmp_path: Path) -> None:
    recorded = tmp_path / "stream.jsonl"
    recorded.write_text("".join(json.dumps(obj) + "\n" for obj in CLAUDE[:4]) + '{"type":"res')
    script = (
        "import sys; sys.stdout.write(open(sys.argv[1]).read()); sys.stdout.flush(); "
        "sys.stderr.write('agent crashed\\n'); sys.exit(3)"
    )
    err = tmp_path / "stderr.log"
    proc = LineProcess(
        [sys.executable, "-c", script, str(recorded)],
        cwd=str(tmp_path),
        env={"PATH": "/usr/bin:/bin"},
        stderr_path=str(err),
    )
    try:
        parser = ClaudeParser()
        result = TurnDriver(proc, parser, stderr_path=str(err), send_interrupt=lambda: None).run(30)
    finally:
        proc.close()
    assert not result.ok and result.exit_code == 3
    assert result.error is not None
    assert "malformed line" in result.error and "exit code 3" in result.error
    assert "agent crashed" in result.error
    assert result.final_text == "Delivered."
    assert result.session_id == SID


def test_the_driver_interrupts_at_the_deadline_and_stops_a_deaf_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import laneboard.agents.jsonlines as jl

    monkeypatch.setattr(jl, "INTERRUPT_GRACE_S", 0.5)  # a short grace for the test
    proc = LineProcess(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        cwd=str(tmp_path),
        env={"PATH": "/usr/bin:/bin"},
        stderr_path=None,
    )
    sent: list[bool] = []
    try:
        result = TurnDriver(
            proc, ClaudeParser(), stderr_path=None, send_interrupt=lambda: sent.append(True)
        ).run(0.3)
    finally:
        proc.close()
    assert sent == [True]
    assert result.timed_out and result.interrupted and not result.ok
    assert result.error is not None and "did not end the turn after an interrupt" in result.error
    assert not proc.alive()


def test_the_turn_ends_when_a_launcher_dies_and_the_agent_it_started_holds_the_stream(
    tmp_path: Path,
) -> None:
    import os
    import signal
    import time

    from laneboard.agents.procs import pid_alive

    child_pid = tmp_path / "child.pid"
    # a launcher (like a node wrapper) whose child inherits stdout and outlives it
    child = (
        f"import os, time; open({str(child_pid)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    )
    launcher = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(120)"
    )
    proc = LineProcess(
        [sys.executable, "-c", launcher],
        cwd=str(tmp_path),
        env={"PATH": "/usr/bin:/bin"},
        stderr_path=None,
    )
    try:
        deadline = time.monotonic() + 30
        while not child_pid.exists() or not child_pid.read_text():
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # only the launcher dies
        result = TurnDriver(proc, CodexParser(), stderr_path=None, send_interrupt=lambda: None).run(
            60
        )
    finally:
        proc.close()
    assert not result.ok and not result.timed_out  # it ended with the launcher, not at the deadline
    assert result.error is not None and "exited before the turn finished" in result.error
    assert result.exit_code == -signal.SIGKILL
    assert not pid_alive(int(child_pid.read_text()))


def test_killing_a_process_group_returns_only_once_none_of_it_runs(tmp_path: Path) -> None:
    import subprocess as sp
    import time

    from laneboard.agents.procs import group_running, kill_group, pid_alive

    child_pid = tmp_path / "child.pid"
    child = (
        f"import os, time; open({str(child_pid)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    )
    leader = sp.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {child!r}]).wait()",
        ],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not child_pid.exists() or not child_pid.read_text():
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.05)
        assert group_running(leader.pid)
        kill_group(leader.pid)
        # the leader is this test's child: unreaped, it is a zombie, which does not run
        assert not group_running(leader.pid)
        assert not pid_alive(int(child_pid.read_text()))
    finally:
        leader.kill()
        leader.wait()
    assert not group_running(leader.pid)


def _peak_while(run: Callable[[], object]) -> tuple[object, int]:
    """What ``run`` returns, and the most memory Python held meanwhile (every thread)."""
    import tracemalloc

    tracemalloc.start()
    try:
        got = run()
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


FLOOD_MB = 200  # far beyond what the supervisor keeps of one turn's output
FLOOD_LIMIT = 48 << 20  # the most the test lets the reading hold at once


def test_a_line_longer_than_the_limit_is_dropped_as_an_error_not_held(tmp_path: Path) -> None:
    """An agent that writes a line of hundreds of megabytes (no newline) does not make the
    supervisor hold it: the line is dropped, named as the turn's error, and the lines after
    it are read as usual."""
    end = json.dumps(CLAUDE[-1])
    script = (
        "import sys; out = sys.stdout.buffer; chunk = b'x' * (1 << 20)\n"
        f"for _ in range({FLOOD_MB}): out.write(chunk)\n"
        f"out.write(b'\\n' + {end!r}.encode() + b'\\n'); out.flush()"
    )

    def turn() -> object:
        proc = LineProcess([sys.executable, "-c", script], cwd=str(tmp_path),
                           env={"PATH": "/usr/bin:/bin"}, stderr_path=None)  # fmt: skip
        try:
            return TurnDriver(proc, ClaudeParser(), stderr_path=None,
                              send_interrupt=lambda: None).run(120)  # fmt: skip
        finally:
            proc.close()

    result, peak = _peak_while(turn)
    assert isinstance(result, TurnResult)
    assert peak < FLOOD_LIMIT, f"held {peak >> 20} MB"
    assert result.error is not None and "a line of more than" in result.error, result.error
    assert result.final_text == "Delivered."  # the end event after it was read


def test_a_command_agent_that_floods_its_output_is_not_held_whole(tmp_path: Path) -> None:
    """A ``command`` agent writing hundreds of megabytes to stdout and stderr: the turn
    keeps the end of each (the final text, the error's tail), never all of it."""
    from laneboard.agents.command import CommandSession
    from laneboard.domain.roles import Role

    flood = f"head -c {FLOOD_MB << 20} /dev/zero | tr '\\0' x"
    script = tmp_path / "agent.sh"
    script.write_text(f"#!/bin/sh\n{flood}\n{flood} >&2\necho; echo the end\nexit 3\n")
    script.chmod(0o755)
    worker = Role(id="worker", agent="command")
    session = CommandSession(str(script), str(tmp_path), "s1", worker, {"PATH": "/usr/bin:/bin"})
    result, peak = _peak_while(lambda: session.send("go", timeout=120))
    assert isinstance(result, TurnResult)
    assert peak < FLOOD_LIMIT, f"held {peak >> 20} MB"
    assert result.exit_code == 3 and result.final_text.endswith("\nthe end\n")
    assert result.error is not None and result.error.startswith("exit 3: xxx")
