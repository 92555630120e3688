"""A human's own session worktrees (``lb worktree``): ``.worktrees/NAME``, never lanes.

``git worktree list`` is the only registry. Removal deletes only a clean tree whose
branch is already merged into the primary checkout's current branch; everything else
is reported and kept. ``lane/`` branches belong to the supervisor and are refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from laneboard.errors import LaneboardError, bad_input
from laneboard.workspace import git as g
from laneboard.workspace.lanes import LANE_PREFIX, WORKTREES

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
SESSION_PREFIX = "wt/"


def _refuse_lane(branch: str | None, what: str) -> None:
    if branch is not None and branch.startswith(LANE_PREFIX):
        raise LaneboardError(
            "FORBIDDEN",
            f"{what} is on {branch}: lane/ branches belong to the supervisor",
            "lanes are landed and cleaned up by laneboard; use another branch name",
        )


def _repo(path: str) -> str:
    try:
        top = g.primary_checkout(path)
    except g.GitError as exc:
        raise LaneboardError("WORKSPACE_ERROR", str(exc), "check the repository") from None
    if top is None:
        raise LaneboardError(
            "WORKSPACE_ERROR", f"{path} is not in a git checkout", "run it inside a repository"
        )
    return top


@dataclass(frozen=True)
class TreeState:
    path: str
    branch: str | None
    head: str | None
    kind: str  # primary | lane | session | other
    clean: bool | None
    merged: bool | None
    into: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _state(repo: str, wt: g.Worktree, into: str | None, primary: bool) -> TreeState:
    if primary:
        kind = "primary"
    elif wt.branch and wt.branch.startswith(LANE_PREFIX):
        kind = "lane"
    elif os.path.dirname(wt.path) == os.path.join(repo, WORKTREES):
        kind = "session"
    else:
        kind = "other"
    clean = None
    if os.path.isdir(wt.path) and not wt.prunable:
        clean = not g.status_lines(wt.path)
    merged = None
    if wt.branch and into and not primary:
        merged = g.is_ancestor(repo, f"refs/heads/{wt.branch}", f"refs/heads/{into}")
    return TreeState(wt.path, wt.branch, wt.head, kind, clean, merged, into)


def status(path: str) -> list[TreeState]:
    repo = _repo(path)
    into = g.current_branch(repo)
    trees = g.worktrees(repo)
    return [_state(repo, wt, into, i == 0) for i, wt in enumerate(trees)]


def create(path: str, name: str, branch: str | None = None, start: str | None = None) -> TreeState:
    if not _NAME.match(name):
        raise bad_input(
            f"worktree name {name!r} is not valid", "use letters, digits, '.', '_' and '-'"
        )
    repo = _repo(path)
    if branch is not None:
        _refuse_lane(branch, f"worktree {name}")
        if g.git(repo, "check-ref-format", "--branch", branch, check=False).code != 0:
            raise bad_input(f"{branch!r} is not a valid branch name", "pick another --branch")
    slot = os.path.join(repo, WORKTREES, name)
    if os.path.lexists(slot):
        raise LaneboardError(
            "CONFLICT",
            f"{slot} already exists",
            f"use it, or remove it: lb worktree leave {name} --remove",
        )
    g.ensure_excluded(repo)
    if branch is None:
        branch = name if g.branch_exists(repo, name) else SESSION_PREFIX + name
        _refuse_lane(branch, f"worktree {name}")
    if g.branch_exists(repo, branch):
        if start is not None:
            raise bad_input(f"branch {branch} already exists", "drop --from to attach it")
        res = g.git(repo, "worktree", "add", slot, branch, check=False)
    else:
        base = start or "HEAD"
        if not g.resolves(repo, base):
            raise bad_input(f"{base!r} does not resolve", "pass an existing ref with --from")
        res = g.git(repo, "worktree", "add", "-b", branch, slot, base, check=False)
    if not res.ok:
        raise LaneboardError("WORKSPACE_ERROR", f"cannot create {slot}: {res.detail()}", "")
    return _find(repo, name)


def _find(repo: str, name: str) -> TreeState:
    slot = os.path.realpath(os.path.join(repo, WORKTREES, name))
    into = g.current_branch(repo)
    for i, wt in enumerate(g.worktrees(repo)):
        if i > 0 and os.path.realpath(wt.path) == slot:
            return _state(repo, wt, into, False)
    raise LaneboardError(
        "NOT_FOUND", f"no worktree at {slot}", "list them with: lb worktree status"
    )


def _removable(t: TreeState) -> str | None:
    """Why the tree must survive, or None when it may be removed."""
    if t.kind == "lane":
        return "lane (owned by the supervisor)"
    if t.kind == "primary":
        return "the primary checkout"
    if t.clean is False:
        return "has uncommitted or untracked changes"
    if t.branch is None:
        return "detached HEAD (no branch to compare)"
    if t.into is None:
        return "the primary checkout has no current branch"
    if not t.merged:
        return f"{t.branch} is not merged into {t.into}"
    return None


def _remove(repo: str, t: TreeState) -> None:
    if t.clean is None:
        g.git(repo, "worktree", "prune")
    else:
        g.git(repo, "worktree", "remove", t.path)
    if t.branch:
        g.git(repo, "branch", "-d", t.branch)


def leave(path: str, name: str, *, remove: bool = False) -> dict[str, Any]:
    repo = _repo(path)
    t = _find(repo, name)
    _refuse_lane(t.branch, f"worktree {name}")
    why = _removable(t)
    if not remove:
        hint = (
            f"ready to remove: lb worktree leave {name} --remove" if why is None else f"kept: {why}"
        )
        return {"worktree": t.to_dict(), "removed": False, "note": hint}
    if why is not None:
        raise LaneboardError(
            "WORKSPACE_ERROR",
            f"{t.path} was not removed: {why}",
            f"merge {t.branch or 'the work'} into {t.into or 'your branch'} and clean the tree first",
        )
    _remove(repo, t)
    return {"worktree": t.to_dict(), "removed": True, "note": "removed the tree and its branch"}


def sweep(path: str) -> dict[str, Any]:
    """Remove every clean session tree whose branch is merged; report every survivor."""
    repo = _repo(path)
    removed: list[dict[str, Any]] = []
    survivors: list[dict[str, Any]] = []
    for t in status(repo):
        if t.kind == "primary":
            continue
        why = _removable(t)
        if why is None and t.kind not in ("session",):
            why = "not under .worktrees/"
        if why is None:
            try:
                _remove(repo, t)
            except g.GitError as exc:
                survivors.append({**t.to_dict(), "reason": str(exc)})
                continue
            removed.append(t.to_dict())
        else:
            survivors.append({**t.to_dict(), "reason": why})
    return {"removed": removed, "survivors": survivors}
