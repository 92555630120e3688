"""``lb land``, ``lb worktree`` and the delivery gate through the real ``lb``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.workspace.helpers import claimed, commit_file, deliver, gated, git, project

from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent
from laneboard.store import open_store

_BIN = Path(sys.executable).parent / "lb"
LB = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "laneboard.cli.main"]


def lb(url: str | None, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env["LANEBOARD_USER"] = "alice"
    if url:
        env["LANEBOARD_DATABASE_URL"] = url
    return subprocess.run(
        [*LB, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def ok(url: str | None, *args: str, cwd: Path | None = None) -> Any:
    p = lb(url, *args, "--json", cwd=cwd)
    assert (p.returncode, p.stderr) == (0, ""), p.stderr
    return json.loads(p.stdout)


def refused(url: str | None, code: str, *args: str, cwd: Path | None = None) -> str:
    p = lb(url, *args, cwd=cwd)
    assert p.returncode == 1 and p.stderr.startswith(f"error {code}: "), p.stderr
    assert p.stderr.count("\n") == 1
    return p.stderr


def test_lb_land_lands_and_retries_after_a_blocked_landing(store_url: str, repo: Path) -> None:
    store = open_store(store_url, FakeClock())
    try:
        board = gated(store)
        project(board, repo)
        card, lane = claimed(board, acceptance_mode="off")
        commit_file(lane, "feature.txt", "new\n", "work")
        deliver(board, card)
        other, _ = claimed(board, title="not delivered")
    finally:
        store.close()
    (repo / "README.md").write_text("dirty\n")
    err = refused(store_url, "LANDING_BLOCKED", "land", "P-1")
    assert "uncommitted changes" in err and "lb land P-1" in err
    detail = ok(store_url, "card", "get", "P-1")
    assert detail["status"] == "in_review"
    assert "lb land P-1" in detail["comments"][-1]["body"]
    git(repo, "checkout", "--", "README.md")
    got = ok(store_url, "land", "P-1")
    head = git(repo, "rev-parse", "HEAD")
    assert got == {"card": "P-1", "status": "done", "landed": True, "merge_commit": head}
    assert (repo / "feature.txt").is_file()
    again = ok(store_url, "land", "P-1")  # a done card: the landing is already recorded
    assert again["landed"] and again["already"] and again["merge_commit"] == head
    refused(store_url, "ILLEGAL_TRANSITION", "land", other.ref)


def test_lb_card_move_runs_the_delivery_gate(store_url: str, repo: Path) -> None:
    store = open_store(store_url, FakeClock())
    try:
        board = gated(store)
        project(board, repo)
        card, lane = claimed(board, allowed_paths=["src"], checks=["true"])
        Path(lane, "outside.txt").write_text("x\n")
        board.report(agent("worker", card.id, card.claim_epoch), card.ref, "done")
    finally:
        store.close()
    err = refused(store_url, "VERIFICATION_FAILED", "card", "move", "P-1", "in_review")
    assert "outside.txt" in err
    assert ok(store_url, "card", "get", "P-1")["status"] == "in_progress"


def test_lb_worktree_create_status_leave_and_sweep(repo: Path) -> None:
    made = ok(None, "worktree", "create", "spike", "--repo", str(repo))
    assert made["branch"] == "wt/spike" and made["kind"] == "session"
    tree = Path(made["path"])
    assert tree == repo.resolve() / ".worktrees" / "spike"
    refused(None, "FORBIDDEN", "worktree", "create", "x", "--branch", "lane/x", "--repo", str(repo))
    git(repo, "worktree", "add", "-q", "-b", "lane/P-9", str(repo / ".worktrees" / "P-9"))
    refused(None, "FORBIDDEN", "worktree", "leave", "P-9", "--remove", "--repo", str(repo))
    # from inside the session tree, --repo defaults to here
    commit_file(tree, "idea.txt", "idea\n", "spike work")
    listed = {Path(t["path"]).name: t for t in ok(None, "worktree", "status", cwd=tree)}
    assert listed["spike"]["merged"] is False and listed["spike"]["clean"] is True
    assert listed["P-9"]["kind"] == "lane" and listed["repo"]["kind"] == "primary"
    err = refused(None, "WORKSPACE_ERROR", "worktree", "leave", "spike", "--remove", cwd=tree)
    assert "not merged into main" in err and tree.is_dir()
    kept = ok(None, "worktree", "leave", "spike", "--repo", str(repo))
    assert kept["removed"] is False and "kept" in kept["note"]
    git(repo, "merge", "-q", "--ff-only", "wt/spike")
    second = ok(None, "worktree", "create", "dirty", "--repo", str(repo))
    Path(second["path"], "scratch.txt").write_text("uncommitted\n")
    swept = ok(None, "worktree", "sweep", "--repo", str(repo))
    assert [Path(t["path"]).name for t in swept["removed"]] == ["spike"]
    survivors = {Path(t["path"]).name: t["reason"] for t in swept["survivors"]}
    assert survivors == {
        "P-9": "lane (owned by the supervisor)",
        "dirty": "has uncommitted or untracked changes",
    }
    assert not tree.exists() and "wt/spike" not in git(repo, "branch", "--list")
    assert "lane/P-9" in git(repo, "branch", "--list")
    text = lb(None, "worktree", "sweep", "--repo", str(repo))
    assert text.returncode == 0 and "kept " in text.stdout and "P-9" in text.stdout


def test_lb_worktree_leave_remove_deletes_a_clean_merged_tree(repo: Path) -> None:
    made = ok(None, "worktree", "create", "fix", "--repo", str(repo))
    commit_file(made["path"], "fix.txt", "fixed\n", "fix")
    git(repo, "merge", "-q", "--ff-only", "wt/fix")
    got = ok(None, "worktree", "leave", "fix", "--remove", "--repo", str(repo))
    assert got["removed"] is True and not Path(made["path"]).exists()
    assert "wt/fix" not in git(repo, "branch", "--list")
    p = lb(None, "worktree", "create", "bad/name", "--repo", str(repo))
    assert p.returncode == 2 and p.stderr.startswith("error BAD_INPUT")
