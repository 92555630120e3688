"""Verified-patch mode: integrate verified lanes away from the user's checkout.

The checkout's HEAD and cleanliness are recorded once, when the goal starts
(``goal_start``, which refuses a checkout that is not clean and committed). Lane
branches are merged one by one in a detached integration worktree (``Integration``:
internal commits only there, repository hooks disabled); at the end the user's checks
run there, the combined change is written as ``verified.patch``, and the patch is
applied to the original checkout (never committed) only when that checkout's HEAD and
cleanliness still match the goal start. Otherwise the patch waits for inspection and
the result says why and how to apply it. A refused integration's worktree is removed;
its directory keeps the patch and the check logs.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Evidence
from laneboard.errors import LaneboardError
from laneboard.workspace import git as g
from laneboard.workspace.verify import (
    DEFAULT_CHECK_TIMEOUT_S,
    changed_paths,
    run_checks,
    scope_violations,
)

if TYPE_CHECKING:
    from laneboard.agents.sandbox import Sandbox


@dataclass(frozen=True)
class GoalStart:
    """The checkout as it was when the goal started: what publication compares against."""

    repo: str
    head: str
    status: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "head": self.head, "status": list(self.status)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GoalStart:
        return cls(str(data["repo"]), str(data["head"]), tuple(data.get("status") or ()))


def goal_start(repo: str) -> GoalStart:
    """Record the checkout's HEAD and cleanliness; refuse one not clean and committed."""
    top = g.toplevel(repo)
    if top is None:
        raise LaneboardError(
            "WORKSPACE_ERROR", f"{repo} is not a git checkout", "give the top of a git repository"
        )
    if not g.resolves(top, "HEAD"):
        raise LaneboardError(
            "WORKSPACE_ERROR", f"{top} has no commit yet", "commit the starting state first"
        )
    status = g.status_lines(top)
    if status:
        raise LaneboardError(
            "WORKSPACE_ERROR",
            f"{top} is not clean: {len(status)} changed or untracked path(s), e.g. {status[0]}",
            "commit or stash the changes, then start the goal again",
        )
    return GoalStart(top, g.commit_of(top, "HEAD"), ())


@dataclass
class PatchResult:
    applied: bool
    reason: str
    start_head: str
    work_dir: str
    patch_path: str | None = None
    integrated_head: str | None = None
    evidence: list[Evidence] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    apply_command: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["evidence"] = [e.to_dict() for e in self.evidence]
        return out


@dataclass(frozen=True)
class Merge:
    ok: bool
    head: str
    reason: str = ""
    conflicts: tuple[str, ...] = ()


class Integration:
    """A detached integration worktree at the goal start, in its own directory."""

    def __init__(self, start: GoalStart, work_dir: str) -> None:
        self.start = start
        self.work_dir = work_dir
        self.tree = os.path.join(work_dir, "tree")

    @classmethod
    def open(cls, start: GoalStart, base: str | None = None) -> Integration:
        """Create a fresh integration directory (under ``base``) and its worktree."""
        root = base or os.path.join(g.common_dir(start.repo), "laneboard", "integrations")
        os.makedirs(root, exist_ok=True)
        it = cls(start, tempfile.mkdtemp(prefix="integration-", dir=root))
        g.git(start.repo, "worktree", "add", "--detach", it.tree, start.head)
        return it

    @classmethod
    def at(cls, start: GoalStart, work_dir: str) -> Integration:
        """The integration kept in ``work_dir`` (after a restart)."""
        it = cls(start, work_dir)
        if not os.path.isdir(it.tree):
            raise LaneboardError(
                "WORKSPACE_ERROR",
                f"the integration worktree {it.tree} is gone",
                "inspect the run's lanes and recover the affected assignments",
            )
        return it

    def head(self) -> str:
        return g.commit_of(self.tree, "HEAD")

    def merge(self, branch: str, message: str | None = None) -> Merge:
        """Merge ``branch``; a conflict is aborted and leaves the integration unchanged."""
        merged = g.git(
            self.tree, "merge", "--no-ff", "--no-edit", "-m", message or f"integrate {branch}",
            branch, check=False, identity=True,
        )  # fmt: skip
        if merged.ok:
            return Merge(True, self.head())
        out = g.git(self.tree, "diff", "--name-only", "--diff-filter=U", check=False).out
        conflicts = tuple(out.split())
        g.git(self.tree, "merge", "--abort", check=False)
        why = f"conflicts in {', '.join(conflicts)}" if conflicts else merged.detail()
        return Merge(False, self.head(), f"integrating {branch} failed: {why}", conflicts)

    def changed(self) -> list[str]:
        return changed_paths(self.tree, self.start.head)

    def publish(
        self,
        checks: Sequence[str],
        allowed_paths: Sequence[str],
        timeout: float = DEFAULT_CHECK_TIMEOUT_S,
        *,
        apply: bool = True,
        sandbox: Sandbox | None = None,
    ) -> PatchResult:
        """Check the combined change, write ``verified.patch``, apply it if unchanged."""
        res = PatchResult(False, "", self.start.head, self.work_dir, integrated_head=self.head())
        bad = scope_violations(self.tree, self.changed(), list(allowed_paths))
        if bad:
            res.reason = f"the combined changes leave the allowed paths: {', '.join(bad[:20])}"
            return res
        logs = os.path.join(self.work_dir, "checks")
        res.evidence, failed = run_checks(list(checks), self.tree, logs, timeout, sandbox=sandbox)
        if failed is not None:
            res.reason = (
                f"check `{failed.command}` exited {failed.exit_code} on the combined changes; "
                f"log: {failed.log_path}"
            )
            return res
        patch = g.git(self.tree, "diff", "--binary", self.start.head, "HEAD").out
        res.patch_path = os.path.join(self.work_dir, "verified.patch")
        with open(res.patch_path, "w", encoding="utf-8") as fh:
            fh.write(patch)
        res.apply_command = f"git -C {shlex.quote(self.start.repo)} apply " + shlex.quote(
            res.patch_path
        )
        if apply:
            apply_patch(self.start, res, bool(patch.strip()))
        else:
            res.reason = f"the patch waits at {res.patch_path}"
        return res

    def remove(self) -> None:
        """Remove the worktree (the directory keeps the patch and the logs)."""
        if os.path.isdir(self.tree):
            g.git(self.start.repo, "worktree", "remove", "--force", self.tree, check=False)
        g.git(self.start.repo, "worktree", "prune", check=False)


def unchanged_since(start: GoalStart) -> str | None:
    """Why the checkout no longer matches the goal start, or None when it does."""
    now_head = g.commit_of(start.repo, "HEAD")
    if now_head != start.head:
        return f"the checkout moved from {start.head[:12]} to {now_head[:12]} since the start"
    if tuple(g.status_lines(start.repo)) != start.status:
        return "the checkout's working tree changed since the start"
    return None


def apply_patch(start: GoalStart, res: PatchResult, has_change: bool) -> None:
    """Apply ``res.patch_path`` to the checkout when it still matches ``start``."""
    assert res.patch_path is not None
    moved = unchanged_since(start)
    if moved is not None:
        res.reason = f"{moved}; the patch waits at {res.patch_path} (apply: {res.apply_command})"
        return
    if not has_change:
        res.applied, res.reason = True, "nothing to apply: the lanes add no change"
        return
    check = g.git(start.repo, "apply", "--check", res.patch_path, check=False)
    if not check.ok:
        res.reason = f"the patch does not apply cleanly: {check.detail()}"
        return
    g.git(start.repo, "apply", res.patch_path)
    res.applied, res.reason = True, "applied to the checkout (not committed)"


def integrate(
    start: GoalStart,
    lane_branches: Sequence[str],
    checks: Sequence[str],
    *,
    allowed_paths: Sequence[str] = (),
    work_dir: str | None = None,
    timeout: float = DEFAULT_CHECK_TIMEOUT_S,
) -> PatchResult:
    """Integrate ``lane_branches`` on the goal start, check, and apply if unchanged.

    The integration worktree is removed whatever the outcome; its directory keeps the
    patch and the check logs.
    """
    it = Integration.open(start, work_dir)
    try:
        for branch in lane_branches:
            merged = it.merge(branch)
            if not merged.ok:
                res = PatchResult(False, merged.reason, start.head, it.work_dir)
                res.conflicts = list(merged.conflicts)
                return res
        return it.publish(checks, allowed_paths, timeout)
    finally:
        it.remove()
