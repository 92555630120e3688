"""A rolling upgrade of a cluster: once one machine's newer laneboard has migrated the
shared board, an older ``lb start`` or ``lb serve`` refuses to run against it (its
passes and rows may mean something else now), naming the fix; one-off commands, which
read and write through the same checks as ever, still work."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.supervisor.test_loud_failures import LB, lb_env

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.errors import CODES
from laneboard.store import open_store
from laneboard.store.migrations import all_migrations

NEWER = 999_001


def test_an_older_resident_refuses_a_board_a_newer_laneboard_migrated(
    store_url: str, tmp_path: Path
) -> None:
    store = open_store(store_url, create=True)
    Board(store).add_project(human(), "U", path=str(tmp_path))
    with store.write() as tx:
        tx.run(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (NEWER, "from a newer laneboard", tx.now()),
        )
    store.close()
    config = '[supervisor]\nsandbox = "off"\nsandbox_reason = "the upgrade test"\n'
    env = lb_env(tmp_path, store_url, config, os.environ["PATH"])
    known = max(m.version for m in all_migrations())
    for cmd in (["start", "--agent", "scripted", "--for-seconds", "2"], ["serve", "--port", "0"]):
        got = subprocess.run([*LB, *cmd], env=env, capture_output=True, text=True, timeout=120)
        assert got.returncode == CODES["BOARD_NEWER"][1], (cmd, got.stderr)
        line = got.stderr.strip()
        assert line.startswith("error BOARD_NEWER: ") and "\n" not in line, got.stderr
        assert f"migration {NEWER}" in line and f"up to {known}" in line
        assert "pip install -U laneboard" in line
    listed = subprocess.run([*LB, "card", "list"], env=env, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
