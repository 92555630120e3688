"""The hostile-agent suite reuses the real-CLI kit of the adapter tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
if str(ADAPTERS) not in sys.path:
    sys.path.insert(0, str(ADAPTERS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from agent_kit import rerun_codex_once

    rerun_codex_once(items)


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """A user's home with a checkout, a lane inside it, and laneboard's state beside."""
    home = tmp_path / "home"
    repo = home / "src" / "proj"
    lane = repo / ".worktrees" / "WEB-1"
    state = tmp_path / "state"
    for d in (lane, state / "tokens" / "WEB-1", state / "tokens" / "WEB-2", home / ".ssh"):
        d.mkdir(parents=True)
    (repo / "README.md").write_text("user's file\n")
    (home / ".ssh" / "id_ed25519").write_text("private key\n")
    (state / "tokens" / "WEB-1" / "token").write_text("lbt_mine\n")
    (state / "tokens" / "WEB-2" / "token").write_text("lbt_other\n")
    (home / ".codex").mkdir()
    (home / ".codex" / "auth.json").write_text('{"key": "user-login"}\n')
    return {"home": home, "repo": repo, "lane": lane, "state": state, "tmp": tmp_path}
