"""The git side of an orchestrated run: a fresh lane per revision, the runtime's
verification of a reported lane, its integration, and the publication of the whole.

Lanes live in the checkout's ``.worktrees/<card>-r<revision>`` on branch
``lane/<card>-r<revision>``, each created from the integration HEAD (so a dependent
sees its verified producers). The integration worktree and every patch and check log
live under ``<git common dir>/laneboard/orchestrate/run-<id>/``. Git runs with hooks
disabled (``workspace.git``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laneboard.domain.assignments import Assignment
from laneboard.workspace import git as g
from laneboard.workspace.patch import GoalStart, Integration, Merge, PatchResult
from laneboard.workspace.verify import changed_paths, run_checks, scope_violations

if TYPE_CHECKING:
    from laneboard.agents.check_sandbox import CheckSandbox
    from laneboard.agents.sandbox import Sandbox


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    evidence: list[dict[str, Any]] = field(default_factory=list)
    head: str = ""


def run_root(start: GoalStart, run_id: int) -> str:
    return os.path.join(g.common_dir(start.repo), "laneboard", "orchestrate", f"run-{run_id}")


class Workspace:
    def __init__(
        self,
        start: GoalStart,
        run_id: int,
        integration_dir: str | None,
        checks: CheckSandbox | None = None,
    ) -> None:
        self.start = start
        self.run_id = run_id
        self.checks = checks  # the sandbox the checks run in (None: as this process)
        self.root = run_root(start, run_id)
        os.makedirs(self.root, exist_ok=True)
        g.ensure_excluded(start.repo)
        if integration_dir and os.path.isdir(os.path.join(integration_dir, "tree")):
            self.integration = Integration.at(start, integration_dir)
        else:
            self.integration = Integration.open(start, self.root)

    def lane(self, card_ref: str, revision: int) -> tuple[str, str, str]:
        """A fresh lane for this revision from the integration HEAD: branch, dir, base."""
        name = f"{card_ref}-r{revision}"
        branch, lane_dir = f"lane/{name}", os.path.join(self.start.repo, ".worktrees", name)
        base = self.integration.head()
        if os.path.isdir(lane_dir):  # made before a restart: keep it as it is
            return branch, lane_dir, base
        if g.branch_exists(self.start.repo, branch):
            g.git(self.start.repo, "worktree", "add", lane_dir, branch)
        else:
            g.git(self.start.repo, "worktree", "add", "-b", branch, lane_dir, base)
        return branch, lane_dir, base

    def lane_head(self, lane_dir: str) -> str:
        return g.commit_of(lane_dir, "HEAD") if os.path.isdir(lane_dir) else ""

    def restore_lane(self, lane_dir: str, head: str) -> bool:
        """Put a lane back as it was at ``head``; True when a turn had changed it."""
        if not head or not os.path.isdir(lane_dir):
            return False
        changed = bool(g.status_lines(lane_dir)) or self.lane_head(lane_dir) != head
        if changed:
            g.git(lane_dir, "reset", "-q", "--hard", head)
            g.git(lane_dir, "clean", "-q", "-fd")
        return changed

    def verify(self, a: Assignment, lane_dir: str, base: str, timeout: float) -> Verdict:
        """Commit what the turn left, check scope and checks in the lane, then integrate."""
        g.git(lane_dir, "add", "-A")
        if g.status_lines(lane_dir):
            msg = f"{a.name} r{a.revision}: uncommitted work left by the turn"
            g.git(lane_dir, "commit", "-q", "-m", msg, identity=True)
        changed = changed_paths(lane_dir, base)
        if not changed:
            return Verdict(False, "the lane changes nothing")
        bad = scope_violations(lane_dir, changed, list(a.paths))
        if bad:
            return Verdict(False, f"changed paths outside the owned paths: {', '.join(bad[:20])}")
        logs = os.path.join(self.root, "checks", f"{a.name}-r{a.revision}")
        box = self._sandbox(f"worker-{a.name}", lane_dir) if a.checks else None
        evidence, failed = run_checks(list(a.checks), lane_dir, logs, timeout, sandbox=box)
        ev = [e.to_dict() for e in evidence]
        if failed is not None:
            why = f"check `{failed.command}` exited {failed.exit_code}; log: {failed.log_path}"
            return Verdict(False, why, ev)
        merged: Merge = self.integration.merge(
            g.current_branch(lane_dir) or g.commit_of(lane_dir, "HEAD"),
            f"integrate {a.name} revision {a.revision}",
        )
        if not merged.ok:
            return Verdict(False, merged.reason, ev)
        return Verdict(True, "", ev, merged.head)

    def publish(self, checks: list[str], allowed: list[str], timeout: float,
                mode: str) -> PatchResult:  # fmt: skip
        """Check the combined change and publish it (``patch``: apply; ``merge``: land)."""
        tree = self.integration.tree
        box = self._sandbox(f"worker-run{self.run_id}", tree) if checks else None
        res = self.integration.publish(checks, allowed, timeout, apply=mode == "patch", sandbox=box)
        if mode == "merge" and res.patch_path is not None:
            land(self.start, self.run_id, res)
        return res

    def _sandbox(self, name: str, directory: str) -> Sandbox | None:
        """The sandbox of checks run in ``directory`` (writable), the checkout readable."""
        if self.checks is None:
            return None
        return self.checks(name, directory, directory, self.start.repo)

    def finish(self, lane_dirs: list[str]) -> None:
        """The run ended: remove its lane worktrees and the integration worktree (branches,
        patches and logs stay)."""
        for d in lane_dirs:
            if d and os.path.isdir(d):
                g.git(self.start.repo, "worktree", "remove", "--force", d, check=False)
        self.integration.remove()
        if not os.listdir(self.root):
            shutil.rmtree(self.root, ignore_errors=True)


def land(start: GoalStart, run_id: int, res: PatchResult) -> None:
    """``--publish merge``: the integration lands on the checkout's branch as a merge,
    under the same rule as a patch (HEAD and cleanliness as at the goal start)."""
    from laneboard.workspace.patch import unchanged_since

    moved = unchanged_since(start)
    branch = f"laneboard/run-{run_id}"
    assert res.integrated_head is not None
    g.git(start.repo, "branch", "-f", branch, res.integrated_head)
    if moved is not None:
        res.reason = f"{moved}; the integration waits on branch {branch}"
        return
    merged = g.git(start.repo, "merge", "--no-ff", "--no-edit", "-m",
                   f"land orchestrated run {run_id}", branch, check=False, identity=True)  # fmt: skip
    if not merged.ok:
        g.git(start.repo, "merge", "--abort", check=False)
        res.reason = f"merging {branch} failed: {merged.detail()}"
        return
    res.applied, res.reason = True, f"merged {branch} into the checkout's branch"
