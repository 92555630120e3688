"""The agent sessions of an orchestrated run: one per role, resumed by its stored id.

A role's session is bound to a directory (the coordinator's own directory; a
specialist's lane of the revision it works on). When a specialist moves to a new lane
(a new revision, another assignment), its process is closed and the same native session
is resumed there. Every process runs in the session's sandbox with a credential scoped
to the card it works on (the coordinator card or the assignment card) and the board
socket as ``LANEBOARD_URL``: it reaches the board only through the operation table.

A kind with MCP (``mcp_config.McpAdapter``: Codex, Claude Code) is also given laneboard's
own MCP server in remote mode under that same credential, limited to ``MCP_TOOLS``, so
the model calls ``orchestrator_control`` as a tool; every kind can still run
``lb orchestrate control`` in its shell.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from laneboard.agents.base import Adapter, AdapterError, Session, Steerable, TurnResult
from laneboard.agents.env import agent_env
from laneboard.agents.mcp_config import McpAdapter, laneboard_server
from laneboard.agents.registry import adapter_for
from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.tokens import Tokens
from laneboard.config import SupervisorConfig
from laneboard.domain.model import Card
from laneboard.domain.roles import Role
from laneboard.secrets import register as register_secrets
from laneboard.supervisor import board_socket, sandboxing

TOKEN_TTL_MS = 24 * 3600 * 1000
MCP_TOOLS = ("orchestrator_control", "ask", "get_card")  # what a run's session may call


@dataclass
class Live:
    session: Session
    cwd: str
    card_id: int


@dataclass
class Turn:
    result: TurnResult
    output_bytes: int
    elapsed_ms: int


def output_bytes(res: TurnResult) -> int:
    """Reply, reasoning and tool-argument text a turn generated, in UTF-8 bytes."""
    total = len(res.final_text.encode())
    for ev in res.events:
        if ev.kind in ("text", "reasoning", "tool_use", "tool", "tool_call", "lb", "step"):
            for value in ev.data.values():
                if isinstance(value, str):
                    total += len(value.encode())
                elif isinstance(value, list | dict):
                    total += len(str(value).encode())
    return total


class Sessions:
    def __init__(self, rt: Runtime, run_id: int, config: SupervisorConfig, checkout: str,
                 kinds: dict[str, str], adapters: Callable[[str], Adapter] | None = None,
                 turn_timeout: float = 1800.0) -> None:  # fmt: skip
        self.rt = rt
        self.run_id = run_id
        self.config = config
        self.checkout = checkout
        self.kinds = kinds  # role -> agent kind ("*" for every specialist)
        self.adapters = adapters or (lambda kind: adapter_for(kind, config.agent_kinds.get(kind)))
        self.turn_timeout = turn_timeout
        self.live: dict[str, Live] = {}

    def kind_of(self, role: str) -> str:
        return self.kinds.get(role) or self.kinds.get("*") or self.config.default_agent

    def run_turn(self, role: str, card: Card, cwd: str, prompt: str) -> Turn:
        session = self._session(role, card, cwd)
        started = time.monotonic()
        res = session.send(prompt, timeout=self.turn_timeout)
        elapsed = int((time.monotonic() - started) * 1000)
        if not session.alive():
            self.live.pop(role, None)
        return Turn(res, output_bytes(res), elapsed)

    def steer(self, role: str, card_id: int, text: str) -> bool | None:
        """Add ``text`` to the running turn of ``role`` on ``card_id``: True when the agent
        accepted it, False when it could not now (no turn running yet, or just ending),
        None when the session cannot be steered at all (the message waits for its next
        turn)."""
        live = self.live.get(role)
        if live is None or live.card_id != card_id:
            return False  # the turn's session is still opening
        if not isinstance(live.session, Steerable):
            return None
        return live.session.steer(text)

    def _session(self, role: str, card: Card, cwd: str) -> Session:
        live = self.live.get(role)
        same = live is not None and live.cwd == cwd and live.card_id == card.id
        if live is not None and same and live.session.alive():
            return live.session
        if live is not None:
            live.session.close()
            del self.live[role]
        kind = self.kind_of(role)
        adapter = self.adapters(kind)
        env = self._env(role, card, kind)
        box = sandboxing.session_sandbox(
            self.config, kind=kind, lane_key=f"run{self.run_id}-{role}", cwd=cwd, env=env,
            checkout=self.checkout, token=env.get("LANEBOARD_TOKEN_FILE"),
            database_url=self.rt.store.url,
        )  # fmt: skip
        stored = self.rt.roles(self.run_id).get(role, {}).get("session_id")
        r = Role(role, agent=kind, lanes=("worker",), title=role)
        server = laneboard_server(env, MCP_TOOLS)

        def open_session(sid: str | None) -> Session:
            if server is not None and isinstance(adapter, McpAdapter) and adapter.mcp:
                return adapter.open_session(cwd, sid, r, env, box, mcp=[server])
            return adapter.open_session(cwd, sid, r, env, box)

        session: Session | None = None
        if stored:
            try:
                session = open_session(str(stored))
            except AdapterError:
                session = None
        if session is None:
            session = open_session(None)
        self.rt.role(self.run_id, role, kind, session.session_id, card.id)
        self.live[role] = Live(session, cwd, card.id)
        return session

    def _env(self, role: str, card: Card, kind: str) -> dict[str, str]:
        token, _ = Tokens(self.rt.store).create(
            self.rt.actor, role, "agent", card_id=card.id, epoch=card.claim_epoch,
            expires_at=self.rt.store.clock.now_ms() + TOKEN_TTL_MS,
        )  # fmt: skip
        kind_cfg: dict[str, Any] = self.config.agent_kinds.get(kind, {})
        register_secrets([token], kind_cfg.get("secret_env", ()))
        tokfile = sandboxing.token_file(self.config, f"run{self.run_id}-{role}")
        fd = os.open(tokfile + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token)
        os.replace(tokfile + ".tmp", tokfile)
        url = board_socket.serve(self.rt.board, self.config.state_path()).url
        extra = {
            "LANEBOARD_TOKEN_FILE": tokfile,
            "LANEBOARD_AGENT_STATE": self.config.state_path("agents", f"run{self.run_id}"),
            "LANEBOARD_AGENT_STDERR": self.config.state_path(
                "agents", "stderr", f"run{self.run_id}-{role}.log"
            ),
        }
        if os.environ.get("LANEBOARD_NOW"):
            extra["LANEBOARD_NOW"] = os.environ["LANEBOARD_NOW"]
        return agent_env(os.environ, token=token, card_ref=card.ref, board_url=url,
                         secrets=kind_cfg.get("secret_env", ()), extra=extra)  # fmt: skip

    def close(self) -> None:
        for live in self.live.values():
            live.session.close()
        self.live.clear()
        board_socket.stop(self.rt.board)
