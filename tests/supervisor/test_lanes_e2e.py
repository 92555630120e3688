"""Lanes end to end: scripted cards in git worktrees, verified, landed and cleaned up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store

from .helpers import RealNowClock, Running, config, settled, wait_for


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_six_cards_land_and_leave_nothing_behind(
    store_url: str, repo: Path, tmp_path: Path
) -> None:
    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "S", path=str(repo))
    refs = []
    for i in range(6):
        name = f"mod{i}.py"
        script = [
            {"write": name, "content": f"VALUE = {i}\n"},
            # a stray file outside the card's scope on the first attempt: refused, then removed
            {"write": "stray.txt", "content": "nope\n", "attempt": 1}
            if i == 0
            else {"run": "true"},
            {"deliver": f"{name} added", "attempt": 1},
            {"run": "rm -f stray.txt", "attempt": 2},
            {"deliver": f"{name} added again", "attempt": 2},
        ]
        refs.append(
            board.create_card(
                human(),
                "S",
                f"add {name}",
                acceptance_mode="off",
                allowed_paths=[name],
                checks=[f"python3 -c 'import mod{i}; assert mod{i}.VALUE == {i}'"],
                meta={"script": script},
            ).ref
        )
    with Running(store_url, config(tmp_path, max_concurrency=3), clock):
        wait_for(
            lambda: all(board.get(r).status.value == "done" for r in refs),
            timeout=120,
            what="all cards landed",
        )
        wait_for(
            lambda: settled(store) and not _git(repo, "branch", "--list", "lane/*"),
            what="lanes cleaned",
        )
    files = sorted(_git(repo, "ls-tree", "--name-only", "main").splitlines())
    assert files == ["README.md"] + [f"mod{i}.py" for i in range(6)]  # exactly the verified work
    for r in refs:
        assert board.get(r).meta.get("merge_commit")
    assert _git(repo, "worktree", "list").count("\n") == 0  # only the main checkout
    assert not (repo / ".worktrees").exists() or not any((repo / ".worktrees").iterdir())
    assert _git(repo, "status", "--porcelain") == ""
    store.close()


def test_lb_demo_exits_zero(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    assert summary["ok"] is True
    assert [c["status"] for c in summary["cards"]] == ["done"] * 3
    assert summary["cards"][1]["turns"][0] == "failed"  # the first delivery failed its check
    assert summary["worktrees_left"] == [] and summary["lane_branches_left"] == []
    assert not Path(summary["project"]).exists()  # removed without --keep
