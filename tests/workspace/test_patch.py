"""Verified-patch mode: integrate lanes in a detached worktree, apply only if unchanged."""

from __future__ import annotations

from pathlib import Path

from tests.workspace.helpers import commit_file, git

from laneboard.workspace.patch import integrate


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
    res = integrate(str(repo), ["lane/A-1", "lane/B-1"], ["test -f a.txt && test -f b.txt"])
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
    res = integrate(str(repo), ["lane/A-1"], [f"touch {stray}"])  # the checkout changes
    assert not res.applied and "working tree changed" in res.reason
    assert res.patch_path is not None and Path(res.patch_path).is_file()
    assert res.patch_path in res.reason
    assert not (repo / "a.txt").exists()


def test_a_moved_head_leaves_the_patch_for_inspection(repo: Path) -> None:
    two_lanes(repo)
    start = git(repo, "rev-parse", "HEAD")
    move = f"git -C {repo} -c core.hooksPath=/dev/null commit -q --allow-empty -m moved"
    res = integrate(str(repo), ["lane/A-1"], [move])
    assert not res.applied and f"moved from {start[:12]}" in res.reason
    assert not (repo / "a.txt").exists() and Path(str(res.patch_path)).is_file()


def test_a_failing_check_applies_nothing(repo: Path) -> None:
    two_lanes(repo)
    res = integrate(str(repo), ["lane/A-1", "lane/B-1"], ["test -f c.txt"])
    assert not res.applied and "test -f c.txt" in res.reason and res.patch_path is None
    assert git(repo, "status", "--porcelain") == ""


def test_conflicting_lanes_are_not_integrated(repo: Path) -> None:
    for name, text in (("lane/A-1", "a\n"), ("lane/B-1", "b\n")):
        git(repo, "branch", name)
        tree = repo.parent / name.replace("/", "-")
        git(repo, "worktree", "add", "-q", str(tree), name)
        commit_file(tree, "README.md", text, "edit")
        git(repo, "worktree", "remove", str(tree))
    res = integrate(str(repo), ["lane/A-1", "lane/B-1"], [])
    assert not res.applied and res.conflicts == ["README.md"]
    assert git(repo, "status", "--porcelain") == ""


def test_changes_outside_the_allowed_paths_are_not_applied(repo: Path) -> None:
    two_lanes(repo)
    res = integrate(str(repo), ["lane/A-1", "lane/B-1"], [], allowed_paths=["a.txt"])
    assert not res.applied and "b.txt" in res.reason
