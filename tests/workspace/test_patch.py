"""Verified-patch mode: integrate lanes in a detached worktree, apply only if unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.workspace.helpers import commit_file, git

from laneboard.errors import LaneboardError
from laneboard.workspace.patch import GoalStart, goal_start, integrate


def two_lanes(repo: Path) -> None:
    for name, path in (("lane/A-1", "a.txt"), ("lane/B-1", "b.txt")):
        git(repo, "branch", name)
        tree = repo.parent / name.replace("/", "-")
        git(repo, "worktree", "add", "-q", str(tree), name)
        commit_file(tree, path, f"{path}\n", f"work on {path}")
        git(repo, "worktree", "remove", str(tree))


def test_the_patch_applies_when_head_and_cleanliness_match(repo: Path) -> None:
    two_lanes(repo)
    head = git(repo, "rev-parse", "HEAD")
    res = integrate(
        goal_start(str(repo)), ["lane/A-1", "lane/B-1"], ["test -f a.txt && test -f b.txt"]
    )
    assert res.applied, res.reason
    assert res.start_head == head and git(repo, "rev-parse", "HEAD") == head  # not committed
    assert (repo / "a.txt").read_text() == "a.txt\n" and (repo / "b.txt").read_text() == "b.txt\n"
    assert sorted(git(repo, "status", "--porcelain").splitlines()) == ["?? a.txt", "?? b.txt"]
    assert res.patch_path is not None and "+++ b/a.txt" in Path(res.patch_path).read_text()
    assert [e.exit_code for e in res.evidence] == [0]
    assert git(repo, "branch", "--list", "lane/*").split() == ["lane/A-1", "lane/B-1"]
    listed = git(repo, "worktree", "list")
    assert "integration-" not in listed  # the integration tree is gone after applying


def test_a_changed_working_tree_leaves_the_patch_for_inspection(repo: Path) -> None:
    two_lanes(repo)
    stray = repo / "stray.txt"
    res = integrate(goal_start(str(repo)), ["lane/A-1"], [f"touch {stray}"])  # the checkout changes
    assert not res.applied and "working tree changed" in res.reason
    assert res.patch_path is not None and Path(res.patch_path).is_file()
    assert res.patch_path in res.reason
    assert not (repo / "a.txt").exists()


def test_a_moved_head_leaves_the_patch_for_inspection(repo: Path) -> None:
    two_lanes(repo)
    start = git(repo, "rev-parse", "HEAD")
    move = f"git -C {repo} -c core.hooksPath=/dev/null commit -q --allow-empty -m moved"
    res = integrate(goal_start(str(repo)), ["lane/A-1"], [move])
    assert not res.applied and f"moved from {start[:12]}" in res.reason
    assert not (repo / "a.txt").exists() and Path(str(res.patch_path)).is_file()


def test_a_failing_check_applies_nothing(repo: Path) -> None:
    two_lanes(repo)
    res = integrate(goal_start(str(repo)), ["lane/A-1", "lane/B-1"], ["test -f c.txt"])
    assert not res.applied and "test -f c.txt" in res.reason and res.patch_path is None
    assert git(repo, "status", "--porcelain") == ""


def test_conflicting_lanes_are_not_integrated(repo: Path) -> None:
    for name, text in (("lane/A-1", "a\n"), ("lane/B-1", "b\n")):
        git(repo, "branch", name)
        tree = repo.parent / name.replace("/", "-")
        git(repo, "worktree", "add", "-q", str(tree), name)
        commit_file(tree, "README.md", text, "edit")
        git(repo, "worktree", "remove", str(tree))
    res = integrate(goal_start(str(repo)), ["lane/A-1", "lane/B-1"], [])
    assert not res.applied and res.conflicts == ["README.md"]
    assert git(repo, "status", "--porcelain") == ""


def test_changes_outside_the_allowed_paths_are_not_applied(repo: Path) -> None:
    two_lanes(repo)
    res = integrate(goal_start(str(repo)), ["lane/A-1", "lane/B-1"], [], allowed_paths=["a.txt"])
    assert not res.applied and "b.txt" in res.reason


def integration_trees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list").splitlines() if "integration-" in line]


def test_head_and_cleanliness_are_those_of_the_goal_start_not_of_the_call(repo: Path) -> None:
    two_lanes(repo)
    start = goal_start(str(repo))
    first = start.head
    commit_file(repo, "later.txt", "later\n", "moved after the goal started")
    res = integrate(start, ["lane/A-1"], [])
    assert not res.applied and f"moved from {first[:12]}" in res.reason
    assert res.start_head == first and not (repo / "a.txt").exists()
    assert res.apply_command is not None and res.apply_command in res.reason


def test_dirt_made_after_the_goal_start_keeps_the_patch(repo: Path) -> None:
    two_lanes(repo)
    start = goal_start(str(repo))
    (repo / "README.md").write_text("edited by hand\n")
    res = integrate(start, ["lane/A-1"], [])
    assert not res.applied and "working tree changed" in res.reason
    assert (repo / "README.md").read_text() == "edited by hand\n" and not (repo / "a.txt").exists()
    assert Path(str(res.patch_path)).is_file()


def test_a_goal_refuses_a_checkout_that_is_not_clean_and_committed(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "dirty.txt").write_text("x\n")
    with pytest.raises(LaneboardError) as err:
        goal_start(str(repo))
    assert err.value.code == "WORKSPACE_ERROR" and "not clean" in err.value.message
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(LaneboardError, match="no commit yet"):
        goal_start(str(empty))
    with pytest.raises(LaneboardError, match="not a git checkout"):
        goal_start(str(tmp_path / "missing"))


def test_refused_integrations_leave_no_worktree_behind(repo: Path) -> None:
    two_lanes(repo)
    start = goal_start(str(repo))
    failed = integrate(start, ["lane/A-1"], ["false"])
    assert not failed.applied and integration_trees(repo) == []
    assert Path(failed.work_dir, "checks").is_dir()  # the logs stay for inspection
    scoped = integrate(start, ["lane/A-1", "lane/B-1"], [], allowed_paths=["a.txt"])
    assert not scoped.applied and integration_trees(repo) == []
    commit_file(repo, "moved.txt", "m\n", "move")
    moved = integrate(start, ["lane/A-1"], [])
    assert not moved.applied and integration_trees(repo) == []
    assert Path(str(moved.patch_path)).is_file()


def test_the_goal_start_round_trips_through_its_stored_form(repo: Path) -> None:
    start = goal_start(str(repo))
    assert GoalStart.from_dict(start.to_dict()) == start
