"""Verified-patch mode: integrate verified lanes away from the user's checkout.

The lane branches are merged in a detached integration worktree, the user's checks run
there, the combined change is written as ``verified.patch``, and the patch is applied
to the original checkout (never committed) only when that checkout's HEAD and
cleanliness still match what was recorded at the start. Otherwise the patch waits for
inspection and the result says why.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from laneboard.domain.model import Evidence
from laneboard.workspace import git as g
from laneboard.workspace.verify import (
    DEFAULT_CHECK_TIMEOUT_S,
    changed_paths,
    run_checks,
    scope_violations,
)


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

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["evidence"] = [e.to_dict() for e in self.evidence]
        return out


def integrate(
    repo: str,
    lane_branches: Sequence[str],
    checks: Sequence[str],
    *,
    allowed_paths: Sequence[str] = (),
    work_dir: str | None = None,
    timeout: float = DEFAULT_CHECK_TIMEOUT_S,
) -> PatchResult:
    """Integrate ``lane_branches`` on the checkout's HEAD, check, and apply if unchanged."""
    top = g.toplevel(repo)
    if top is None:
        raise g.GitError(f"{repo} is not a git checkout")
    start_head = g.commit_of(top, "HEAD")
    start_status = g.status_lines(top)
    base = work_dir or os.path.join(g.common_dir(top), "laneboard", "integrations")
    os.makedirs(base, exist_ok=True)
    wdir = tempfile.mkdtemp(prefix="integration-", dir=base)
    tree = os.path.join(wdir, "tree")
    res = PatchResult(False, "", start_head, wdir)
    g.git(top, "worktree", "add", "--detach", tree, start_head)
    for branch in lane_branches:
        merged = g.git(
            tree, "merge", "--no-ff", "--no-edit", "-m", f"integrate {branch}", branch,
            check=False, identity=True,
        )  # fmt: skip
        if not merged.ok:
            out = g.git(tree, "diff", "--name-only", "--diff-filter=U", check=False).out
            res.conflicts = out.split()
            g.git(tree, "merge", "--abort", check=False)
            res.reason = f"integrating {branch} failed: " + (
                f"conflicts in {', '.join(res.conflicts)}" if res.conflicts else merged.detail()
            )
            return res
    res.integrated_head = g.commit_of(tree, "HEAD")
    bad = scope_violations(tree, changed_paths(tree, start_head), list(allowed_paths))
    if bad:
        res.reason = f"the combined changes leave the allowed paths: {', '.join(bad[:20])}"
        return res
    res.evidence, failed = run_checks(list(checks), tree, os.path.join(wdir, "checks"), timeout)
    if failed is not None:
        res.reason = (
            f"check `{failed.command}` exited {failed.exit_code} on the combined changes; "
            f"log: {failed.log_path}"
        )
        return res
    patch = g.git(tree, "diff", "--binary", start_head, "HEAD").out
    res.patch_path = os.path.join(wdir, "verified.patch")
    with open(res.patch_path, "w", encoding="utf-8") as fh:
        fh.write(patch)
    now_head = g.commit_of(top, "HEAD")
    if now_head != start_head:
        res.reason = (
            f"the checkout moved from {start_head[:12]} to {now_head[:12]} since the start; "
            f"the patch waits at {res.patch_path}"
        )
        return res
    if g.status_lines(top) != start_status:
        res.reason = (
            f"the checkout's working tree changed since the start; "
            f"the patch waits at {res.patch_path}"
        )
        return res
    if not patch.strip():
        res.applied, res.reason = True, "nothing to apply: the lanes add no change"
        return res
    check = g.git(top, "apply", "--check", res.patch_path, check=False)
    if not check.ok:
        res.reason = f"the patch does not apply cleanly: {check.detail()}"
        return res
    g.git(top, "apply", res.patch_path)
    res.applied, res.reason = True, "applied to the checkout (not committed)"
    g.git(top, "worktree", "remove", "--force", tree, check=False)
    return res
