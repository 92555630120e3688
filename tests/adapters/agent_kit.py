"""Helpers for driving the real agent CLIs against the scripted model server.

The CLIs are the pinned npm packages that ``scripts/test-deps`` installs into
``.cache/agent-clis``; a test that needs one fails (not skips) when it is missing.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from model_server import ModelServer, ToolCall

from laneboard.agents.env import agent_env
from laneboard.agents.sandbox import Sandbox
from laneboard.agents.sandbox_spec import SessionPaths, build_spec
from laneboard.board.service import Board

ROOT = Path(__file__).resolve().parents[2]
CLI_BIN = ROOT / ".cache" / "agent-clis" / "node_modules" / ".bin"
KINDS = ("claude", "codex", "pi")
CODEX_YIELD_MS = 30_000  # the longest wait for a command Codex's exec_command accepts


def cli_path(kind: str) -> str:
    path = CLI_BIN / kind
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/test-deps to install the pinned agent CLIs")
    return str(path)


def base_path() -> str:
    """PATH for agents: this interpreter's bin (for ``lb``), node, the system."""
    parts = [os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]
    return os.pathsep.join(dict.fromkeys(parts))


def rerun_codex_once(items: list[pytest.Item]) -> None:
    """Give each test of the real Codex CLI one more run when it fails.

    Codex runs each command in a sandbox of its own, which cannot start inside laneboard's
    when laneboard runs as root (docs/sandbox.md). Codex then usually runs the command
    laneboard approved outside its own sandbox, but not always: on a loaded machine one
    command in a few hundred fails, the scripted model has no reply for the turn that
    follows, and the test fails for a reason that is Codex's choice, not laneboard's. A
    second failure is reported as it is."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        codex = callspec is not None and callspec.params.get("kind") == "codex"
        if codex and item.get_closest_marker("flaky") is None:  # each conftest calls it
            item.add_marker(pytest.mark.flaky(reruns=1))


@dataclass
class Kind:
    """How one agent kind is pointed at the model server, and its tool-call shapes."""

    name: str
    home: Path
    server: ModelServer

    def config(self, tmp: Path) -> dict[str, Any]:
        cfg: dict[str, Any] = {"binary": cli_path(self.name), "log_dir": str(tmp / "logs")}
        # the scripted model server listens on this host's loopback, which a sandbox's
        # network of its own does not reach (docs/sandbox.md): its one port is relayed in
        cfg["host_ports"] = [self.server.port]
        if self.name == "pi":
            cfg.update(provider="mock", model="test-model")
        return cfg

    def env(self, **board: str | None) -> dict[str, str]:
        base = {
            "PATH": base_path(),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "LANEBOARD_SECRET_THING": "must-not-leak",
        }
        extra: dict[str, str] = {}
        if self.name == "claude":
            extra = {
                "CLAUDE_CONFIG_DIR": str(self.home / ".claude"),
                "ANTHROPIC_BASE_URL": self.server.url,
                "ANTHROPIC_API_KEY": "test-key",
                "DISABLE_TELEMETRY": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
            }
        elif self.name == "codex":
            codex_home = self.home / "codex"
            codex_home.mkdir(parents=True, exist_ok=True)
            (codex_home / "config.toml").write_text(
                'model = "gpt-5.5"\nmodel_provider = "mock"\n'
                '[model_providers.mock]\nname = "mock"\n'
                f'base_url = "{self.server.url}/v1"\nwire_api = "responses"\n'
                # the scripted server answers each reply once: a retry would take the next
                "stream_max_retries = 0\nrequest_max_retries = 0\n"
            )
            extra = {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "test-key"}
        else:
            pi_dir = self.home / "pi"
            pi_dir.mkdir(parents=True, exist_ok=True)
            (pi_dir / "models.json").write_text(
                json.dumps(
                    {
                        "providers": {
                            "mock": {
                                "baseUrl": f"{self.server.url}/v1",
                                "api": "openai-completions",
                                "apiKey": "test-key",
                                "compat": {
                                    "supportsDeveloperRole": False,
                                    "supportsReasoningEffort": False,
                                },
                                "models": [{"id": "test-model"}],
                            }
                        }
                    }
                )
            )
            extra = {"PI_CODING_AGENT_DIR": str(pi_dir), "PI_OFFLINE": "1"}
        return agent_env(
            base,
            token=board.get("token"),
            card_ref=board.get("card"),
            board_url=board.get("url"),
            extra=extra,
        )

    def sandbox(
        self,
        tmp: Path,
        cwd: Path,
        env: dict[str, str],
        *,
        checkout: Path | None = None,
        lane: Path | None = None,
        name: str = "session",
    ) -> Sandbox:
        """A bubblewrap sandbox for one session, as the pool builds it."""
        state = tmp / "state"
        paths = SessionPaths(
            kind=self.name,
            cwd=str(cwd),
            home=str(state / "agents" / "homes" / f"{self.name}-{name}"),
            tmp=str(state / "agents" / "tmp" / f"{self.name}-{name}"),
            state_dir=str(state),
            checkout=str(checkout) if checkout else None,
            lane=str(lane) if lane else None,
        )
        return Sandbox(build_spec(paths, env, cli_path(self.name)))

    @property
    def requests_per_broken_reply(self) -> int:
        """Model requests one broken response costs: Claude Code follows a broken stream
        with the same request unstreamed; Pi retries a transient failure itself, three
        times by default, within the same turn."""
        return {"claude": 2, "pi": 4}.get(self.name, 1)

    def bash(self, command: str) -> ToolCall:
        if self.name == "claude":
            return ToolCall("Bash", {"command": command, "description": "run a command"})
        if self.name == "codex":
            # exec_command answers "still running" after yield_time_ms (10 s unless given) and
            # the script's next reply would then end the turn before the command did: wait
            # the longest Codex allows, so a slow `lb` on a loaded machine still finishes
            return ToolCall("exec_command", {"cmd": command, "yield_time_ms": CODEX_YIELD_MS})
        return ToolCall("bash", {"command": command})

    def write(self, lane: Path, name: str, content: str) -> ToolCall:
        if self.name == "claude":
            return ToolCall("Write", {"file_path": str(lane / name), "content": content})
        if self.name == "codex":
            body = "".join(f"+{line}\n" for line in content.splitlines())
            patch = f"*** Begin Patch\n*** Add File: {name}\n{body}*** End Patch\n"
            return ToolCall("apply_patch", patch, custom=True)
        return ToolCall("write", {"path": name, "content": content})


@dataclass
class BoardSetup:
    board_url: str
    card: str
    token: str
    board: Board
