"""``lb loop workflow``: the real command, --dry-run changes nothing, --json is exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.clock import SystemClock
from laneboard.store import open_store

from .helpers import delivered, event_count, project


def _lb(url: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(
        LANEBOARD_DATABASE_URL=url,
        LANEBOARD_STATE_DIR=str(tmp / "state"),
        XDG_CONFIG_HOME=str(tmp / "config"),
    )
    return subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_loop_workflow_dry_run_then_apply(sqlite_store_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_store_url, SystemClock())
    board = Board(store)
    key = project(board, tmp_path)
    review_me = delivered(board, key)
    accept_me = delivered(board, key, mode="off")
    before = event_count(store)
    dry = _lb(sqlite_store_url, tmp_path, "loop", "workflow", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True and "results" not in plan
    assert [(a["action"], a["card"]) for a in plan["actions"]] == [
        ("auto_accept", accept_me.ref),
        ("dispatch", review_me.ref),
    ]
    assert event_count(store) == before
    text = _lb(sqlite_store_url, tmp_path, "loop", "workflow")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("workflow pass: read ")
    assert f"auto_accept {accept_me.ref}: acceptance off -> accepted" in text.stdout
    assert f"dispatch {review_me.ref}: needs review -> review card" in text.stdout
    assert board.get(accept_me.ref).status.value == "done"
    reviews = board.list_cards(label="review")
    assert [r.meta["review_of"] for r in reviews] == [review_me.id]
    again = _lb(sqlite_store_url, tmp_path, "loop", "workflow", "--json")
    assert json.loads(again.stdout)["results"] == []
    assert "nothing to do" in _lb(sqlite_store_url, tmp_path, "loop", "workflow").stdout
    assert board.get(review_me.ref).status.value == "in_review"
    store.close()
