"""The hostile-agent suite reuses the real-CLI kit of the adapter tests."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
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


@pytest.fixture
def reverser() -> Iterator[int]:
    """A service on this host's loopback only: it answers each connection with the bytes
    it was sent, reversed, once the caller has sent them all."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                got = b""
                while chunk := conn.recv(65536):
                    got += chunk
                conn.sendall(got[::-1])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()
