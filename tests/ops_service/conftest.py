"""An isolated home for operations tests: XDG directories, HOME and no LANEBOARD_* leaks.

Nothing here reaches the machine's real crontab, systemd user manager or launchd: every
scheduler tool is looked up only in ``LANEBOARD_SERVICE_TOOLS`` (fakes that record their
argv) and the crontab is a file (``LANEBOARD_CRONTAB_FILE``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Home:
    root: Path
    env: dict[str, str]

    @property
    def config(self) -> Path:
        return self.root / "config" / "laneboard"

    @property
    def state(self) -> Path:
        return self.root / "state" / "laneboard"

    def user_file(self, text: str) -> Path:
        self.config.mkdir(parents=True, exist_ok=True)
        path = self.config / "config.toml"
        path.write_text(text)
        return path

    def lb(
        self,
        *args: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "laneboard.cli.main", *args],
            env={**self.env, **(env or {})},
            cwd=cwd or self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


AGENT_CLIS = Path(__file__).resolve().parents[2] / ".cache" / "agent-clis" / "node_modules" / ".bin"


def clean_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(
        PATH=f"{AGENT_CLIS}{os.pathsep}{os.environ.get('PATH', '')}",
        HOME=str(root / "home"),
        XDG_CONFIG_HOME=str(root / "config"),
        XDG_STATE_HOME=str(root / "state"),
        XDG_DATA_HOME=str(root / "data"),
        LANEBOARD_SERVICE_TOOLS=str(root / "tools"),
        LANEBOARD_CRONTAB_FILE=str(root / "crontab"),
        LANEBOARD_MACHINE="opsbox",
    )
    for name in ("home", "tools"):
        (root / name).mkdir(exist_ok=True)
    return env


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    env = clean_env(tmp_path)
    for key in list(os.environ):
        if key.startswith("LANEBOARD_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield Home(tmp_path, env)
