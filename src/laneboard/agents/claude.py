"""The Claude Code adapter: one resident ``claude -p`` stream-json process per session.

The process is started directly::

    claude -p --input-format stream-json --output-format stream-json --verbose \\
        --session-id <uuid> | --resume <id>   <role's tool flags>

rather than through the ``claude-agent-sdk`` Python package. The SDK would wrap the very
same stream-json protocol, but it bundles its own multi-hundred-megabyte CLI binary and
adds an async runtime; talking to the user's installed ``claude`` directly keeps laneboard
small, uses the version the user already runs and configures, and lets ``lb agents check``
report exactly that binary.

A new session gets its id up front (``--session-id``), so the pool can store it before the
first turn; a stored id is resumed with ``--resume``. A turn is one ``user`` line in and
events until the ``result`` line, which carries the usage and cost. An interrupt is a
``control_request`` of subtype ``interrupt``; the turn then ends with an error result.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from laneboard.agents.base import AdapterError, EventSink, ProbeResult, TurnResult
from laneboard.agents.jsonlines import TurnDriver, TurnParser, tail
from laneboard.agents.mcp_config import McpServer
from laneboard.agents.permissions import allow_all_reason, claude_args, policy_for
from laneboard.agents.procs import LineProcess
from laneboard.agents.sandbox import Sandbox
from laneboard.domain.roles import Role

KIND = "claude"
MCP_CONNECT_TIMEOUT_MS = 60_000


class ClaudeParser(TurnParser):
    kind = KIND

    def feed(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if obj.get("session_id") and isinstance(obj["session_id"], str):
            self.session_id = obj["session_id"]
        if kind == "system":
            if obj.get("subtype") == "init":
                self.emit(
                    "init",
                    session_id=obj.get("session_id"),
                    model=obj.get("model"),
                    tools=obj.get("tools"),
                    permission_mode=obj.get("permissionMode"),
                )
            return
        if kind == "assistant":
            for block in _blocks(obj):
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    self.text_parts.append(block["text"])
                    self.emit("text", text=block["text"])
                elif block.get("type") == "tool_use":
                    self.emit(
                        "tool_use",
                        name=block.get("name"),
                        input=block.get("input"),
                        id=block.get("id"),
                    )
            return
        if kind == "user":
            for block in _blocks(obj):
                if block.get("type") == "tool_result":
                    self.emit(
                        "tool_result",
                        id=block.get("tool_use_id"),
                        is_error=bool(block.get("is_error")),
                        content=_clip_content(block.get("content")),
                    )
            return
        if kind == "result":
            self.done = True
            raw_usage = obj.get("usage")
            usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
            self.usage.input_tokens = (
                _int(usage.get("input_tokens"))
                + _int(usage.get("cache_creation_input_tokens"))
                + _int(usage.get("cache_read_input_tokens"))
            )
            self.usage.output_tokens = _int(usage.get("output_tokens"))
            cost = obj.get("total_cost_usd")
            self.usage.cost_usd = float(cost) if isinstance(cost, int | float) else None
            self.usage.duration_ms = _int(obj.get("duration_ms"))
            if isinstance(obj.get("result"), str):
                self.final_text = obj["result"]
            subtype = obj.get("subtype")
            if obj.get("is_error") or subtype != "success":
                detail = obj.get("result") if isinstance(obj.get("result"), str) else ""
                errors = obj.get("errors")
                if isinstance(errors, list) and errors:
                    detail = "; ".join(str(e) for e in errors)
                what = "an error" if subtype == "success" else subtype  # is_error on a "success"
                self.fail(f"claude turn ended with {what}" + (f": {detail}" if detail else ""))
            self.emit("result", subtype=subtype, usage=self.usage.to_dict())
            return
        # control_response, stream_event, rate limit notices ...: nothing to record


def _blocks(obj: dict[str, Any]) -> list[dict[str, Any]]:
    msg = obj.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)] if isinstance(content, list) else []


def _clip_content(content: Any) -> str:
    if isinstance(content, list):
        content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content or "")[:1000]


def _int(v: Any) -> int:
    return int(v) if isinstance(v, int | float) else 0


def user_line(prompt: str) -> dict[str, Any]:
    return {
        "type": "user",
        "message": {"role": "user", "content": prompt},
        "parent_tool_use_id": None,
    }


class ClaudeSession:
    def __init__(
        self,
        adapter: ClaudeAdapter,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
        mcp: Sequence[McpServer] = (),
    ) -> None:
        from laneboard.agents.roles import render_role

        self.adapter = adapter
        self.resumed = session_id is not None
        self.session_id: str | None = session_id or str(uuid.uuid4())
        policy = policy_for(KIND, role, adapter.config)
        argv = [
            adapter.binary(),
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
        ]
        argv += ["--resume", self.session_id] if self.resumed else ["--session-id", self.session_id]
        argv += claude_args(policy, mcp_tools=[m.claude_tool(t) for m in mcp for t in m.tools])
        for server in mcp:  # laneboard's own MCP server (``mcp_config``)
            argv += ["--mcp-config", server.claude_document()]
        if adapter.config.get("model"):
            argv += ["--model", str(adapter.config["model"])]
        role_text = render_role(role)
        if role_text:
            argv += ["--append-system-prompt", role_text]
        argv += [str(a) for a in adapter.config.get("args") or ()]
        if mcp and not env.get("MCP_CONNECT_TIMEOUT_MS"):
            # how long the first turn waits for the MCP servers (Claude Code's default 5 s
            # is less than laneboard's server may take to start on a busy machine)
            env = {**env, "MCP_CONNECT_TIMEOUT_MS": str(MCP_CONNECT_TIMEOUT_MS)}
        self.stderr_path = adapter.stderr_path(self.session_id, env)
        try:
            self.proc = LineProcess(
                argv, cwd=cwd, env=env, stderr_path=self.stderr_path, sandbox=sandbox
            )
        except OSError as exc:
            raise AdapterError(f"claude could not start: {exc}") from None
        self._turn_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._driver: TurnDriver | None = None
        self._seq = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.alive()

    def _write(self, obj: dict[str, Any]) -> None:
        with self._write_lock:
            self.proc.write_json(obj)

    def _send_interrupt(self) -> None:
        self._seq += 1
        self._write(
            {
                "type": "control_request",
                "request_id": f"lb-interrupt-{self._seq}",
                "request": {"subtype": "interrupt"},
            }
        )

    def send(self, prompt: str, *, timeout: float, on_event: EventSink | None = None) -> TurnResult:
        with self._turn_lock:
            parser = ClaudeParser(on_event)
            parser.session_id = self.session_id
            if not self.proc.alive():
                parser.end_of_stream(self.proc.proc.poll(), tail(self.stderr_path))
                return parser.result(exit_code=self.proc.proc.poll())
            try:
                self._write(user_line(prompt))
            except (OSError, ValueError) as exc:
                parser.fail(f"claude stopped reading its input: {exc}")
                parser.done = True
                return parser.result(exit_code=self.proc.proc.poll())
            self._driver = TurnDriver(
                self.proc, parser, stderr_path=self.stderr_path, send_interrupt=self._send_interrupt
            )
            try:
                result = self._driver.run(timeout)
            finally:
                self._driver = None
            if parser.session_id:
                self.session_id = parser.session_id
            return result

    def interrupt(self) -> None:
        driver = self._driver
        if driver is not None:
            driver.interrupt_requested.set()

    def close(self) -> None:
        self.proc.close()


class ClaudeAdapter:
    kind = KIND
    mcp = True  # sessions take MCP servers (``open_session(..., mcp=...)``)

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        allow_all_reason(KIND, self.config)  # refuses a bypass without a written reason

    def binary(self) -> str:
        from laneboard.agents.discovery import require_binary

        return require_binary(KIND, self.config)

    def stderr_path(self, session_id: str | None, env: Mapping[str, str]) -> str:
        from laneboard.agents.discovery import stderr_path

        return stderr_path(KIND, self.config, env, session_id)

    def open_session(
        self,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
        mcp: Sequence[McpServer] = (),
    ) -> ClaudeSession:
        return ClaudeSession(self, cwd, session_id, role, env, sandbox, mcp)

    def probe(self, handshake: bool = False) -> ProbeResult:
        from laneboard.agents.discovery import probe

        return probe(KIND, self.config, handshake=handshake)


def handshake_lines() -> list[str]:
    """What ``lb agents check`` sends: an ``initialize`` control request (no model call)."""
    return [
        json.dumps(
            {
                "type": "control_request",
                "request_id": "lb-check",
                "request": {"subtype": "initialize"},
            }
        )
    ]
