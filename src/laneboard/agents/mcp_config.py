"""laneboard's own MCP server, as an agent session launches it.

A session of a kind with MCP (Codex, Claude Code) is given one stdio server, ``lb mcp``
run by the interpreter that runs laneboard, in remote mode: its environment holds only
what the session's own ``lb`` would use — ``LANEBOARD_URL`` (the board socket the session
already reaches), the session's card-scoped credential (``LANEBOARD_TOKEN_FILE``, which
the runtime keeps current) and ``LANEBOARD_CARD`` — and never a database URL or another
token. The agent starts it as its own child, so it runs inside the session's sandbox.

The server serves only the tools the session may call (``lb mcp --tool NAME``). Each kind
renders it in its own configuration: Codex as a ``mcp_servers.<name>`` override of the
thread's configuration (the same table as ``[mcp_servers.<name>]`` in ``config.toml``);
Claude Code as an ``--mcp-config`` document (``alwaysLoad``: connected before the first
turn), with each tool (``mcp__<name>__<tool>``) added to its permission allowlist.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from laneboard.agents.base import Session
    from laneboard.agents.sandbox import Sandbox
    from laneboard.domain.roles import Role

NAME = "laneboard"
# what the server's process needs of the session's environment: how to reach the board,
# the session's own credential and card, a pinned clock, and how to run lb
PASSED = (
    "LANEBOARD_URL",
    "LANEBOARD_TOKEN_FILE",
    "LANEBOARD_CARD",
    "LANEBOARD_NOW",
    "PATH",
    "PYTHONPATH",
    "LANG",
)  # not HOME: the agent gives its children its own (the session's agent home)
STARTUP_TIMEOUT_S = 60
TOOL_TIMEOUT_S = 900  # as long as a remote lb call may take


@dataclass(frozen=True)
class McpServer:
    """One stdio MCP server and the tools of it the agent may call."""

    name: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] = ()

    def codex_override(self) -> dict[str, Any]:
        """The ``mcp_servers.<name>`` table for a Codex thread's ``config``."""
        table: dict[str, Any] = {
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
            "startup_timeout_sec": STARTUP_TIMEOUT_S,
            "tool_timeout_sec": TOOL_TIMEOUT_S,
        }
        if self.tools:
            table["enabled_tools"] = list(self.tools)
        return {f"mcp_servers.{self.name}": table}

    def claude_tool(self, tool: str) -> str:
        return f"mcp__{self.name}__{tool}"

    def claude_document(self) -> str:
        """The ``--mcp-config`` JSON of Claude Code."""
        # alwaysLoad: connected before the first turn (Claude Code does not otherwise
        # wait for it, and the model would find no tool) and its tools never deferred
        entry = {"type": "stdio", "command": self.command, "args": list(self.args),
                 "env": dict(self.env), "alwaysLoad": True}  # fmt: skip
        return json.dumps({"mcpServers": {self.name: entry}})


def laneboard_server(env: Mapping[str, str], tools: Iterable[str]) -> McpServer | None:
    """laneboard's MCP server in remote mode for a session whose environment is ``env``;
    None when the session has no board address or no credential to give it."""
    if not env.get("LANEBOARD_URL") or not (
        env.get("LANEBOARD_TOKEN_FILE") or env.get("LANEBOARD_TOKEN")
    ):
        return None
    passed = {k: env[k] for k in PASSED if env.get(k)}
    if not passed.get("LANEBOARD_TOKEN_FILE"):
        passed["LANEBOARD_TOKEN"] = env["LANEBOARD_TOKEN"]
    tools = tuple(tools)
    args = ("-m", "laneboard.cli.main", "mcp", *(a for t in tools for a in ("--tool", t)))
    return McpServer(NAME, sys.executable, args, passed, tools)


@runtime_checkable
class McpAdapter(Protocol):
    """An adapter whose sessions can be given MCP servers (Codex, Claude Code)."""

    mcp: bool

    def open_session(
        self,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
        mcp: Sequence[McpServer] = (),
    ) -> Session: ...
