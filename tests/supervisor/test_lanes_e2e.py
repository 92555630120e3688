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
            # a stray file outside the card's scope, gone before the turn ends (a turn that
            # leaves one holds the card: tests/hostile/test_hostile_command.py)
            {"write": "stray.txt", "content": "nope\n"} if i == 0 else {"run": "true"},
            {"run": "rm -f stray.txt"},
            {"deliver": f"{name} added"},
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
        # a demo's own time limit is for people: a busy machine gets more
        [sys.executable, "-m", "laneboard.cli.main", "demo", "--json", "--timeout", "240"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    assert summary["ok"] is True
    assert [c["status"] for c in summary["cards"]] == ["done"] * 3
    assert summary["cards"][1]["turns"][0] == "failed"  # the first delivery failed its check
    assert summary["worktrees_left"] == [] and summary["lane_branches_left"] == []
    assert not Path(summary["project"]).exists()  # removed without --keep
    assert summary["run"]["status"] == "completed"  # the three cards are one run
    assert summary["run"]["convergence"] == {
        "state": "completed",
        "reason": "all_tasks_and_proposals_terminal",
    }


def test_reviewed_rework_lands_the_approved_round(
    store_url: str, repo: Path, tmp_path: Path
) -> None:
    """An ``auto`` card in a git project: the reviewer rejects round 1 and approves round 2,
    and only then does the lane merge — with the second round's work."""
    clock = RealNowClock()
    store = open_store(store_url, clock)
    board = Board(store)
    board.add_project(human(), "R", path=str(repo))
    say_cwd = f'{sys.executable} -m laneboard.cli.main card comment {{card}} "cwd $PWD"'
    approve = {"verdict": "APPROVE", "body": "checked\n$ python3 -c 'import calc'"}
    approve["evidence"] = ["0:python3 -c 'import calc'"]
    reject = {"verdict": "REJECT", "body": "not yet\n1. Return 4, not 5"}
    card = board.create_card(
        human(),
        "R",
        "add calc.py",
        assignee="worker",
        allowed_paths=["calc.py"],
        checks=["python3 -c 'import calc'"],
        meta={
            "script": {
                "r1": [{"write": "calc.py", "content": "RESULT = 5\n"}, {"deliver": "first"}],
                "r2": [{"write": "calc.py", "content": "RESULT = 4\n"}, {"deliver": "fixed"}],
            },
            "review_script": {
                "r1": [{"run": say_cwd}, reject],
                "r2": [{"run": say_cwd}, approve],
            },
        },
    )
    before = _git(repo, "rev-parse", "main")
    with Running(store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(card.ref).status.value == "done", timeout=120, what="landing")
        wait_for(
            lambda: settled(store) and not _git(repo, "branch", "--list", "lane/*"),
            what="lanes cleaned",
        )
    got = board.get(card.ref)
    assert got.delivery_round == 2 and got.meta["accepted_by"] == "loop-review"
    merge = got.meta["merge_commit"]
    assert _git(repo, "rev-parse", "main") == merge
    assert _git(repo, "rev-parse", f"{merge}^1") == before  # one landing, after the approval
    assert _git(repo, "show", "main:calc.py") == "RESULT = 4"
    assert _git(repo, "ls-tree", "--name-only", "main").splitlines() == ["README.md", "calc.py"]
    # the reviewer read the card's lane (round 1, then the round-2 lane)
    lanes = [
        c.body.split(" ", 1)[1]
        for x in board.list_cards(project="R")
        for c in board.comments(x.ref)
        if c.body.startswith("cwd ")
    ]
    assert [Path(p).name for p in lanes] == [card.ref, f"{card.ref}-r2"]
    store.close()
