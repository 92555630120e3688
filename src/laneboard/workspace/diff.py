"""A card's lane as a diff against its base, for a person reading the card."""

from __future__ import annotations

import os
from typing import Any

from laneboard.store import Store
from laneboard.workspace import git as g
from laneboard.workspace.lanes import latest_lane

DIFF_LIMIT = 64 * 1024  # characters of diff shown; the rest is cut with a note


def lane_diff(store: Store, card_id: int) -> dict[str, Any] | None:
    """The latest lane's changes since its base commit (None: the card has no lane).

    A lane whose tree is present is compared as it stands, uncommitted edits included; a
    removed tree by its branch; a landed and cleaned lane by its merge commit.
    """
    with store.read() as tx:
        lane = latest_lane(tx, card_id)
    if lane is None:
        return None
    out: dict[str, Any] = {
        "branch": lane.branch,
        "round": lane.round,
        "state": lane.state,
        "base": lane.base,
        "base_commit": lane.base_commit[:12],
        "stat": "",
        "text": None,
        "truncated": False,
        "note": None,
    }
    try:
        if g.is_checkout(lane.path):
            cwd, args = lane.path, [lane.base_commit]
        elif os.path.isdir(lane.repo) and g.branch_exists(lane.repo, lane.branch):
            cwd, args = lane.repo, [lane.base_commit, f"refs/heads/{lane.branch}"]
        elif lane.merge_commit and os.path.isdir(lane.repo) and g.resolves(
            lane.repo, lane.merge_commit
        ):
            cwd, args = lane.repo, [f"{lane.merge_commit}^1", lane.merge_commit]
        else:
            out["note"] = "the lane's tree and branch are gone"
            return out
        stat = g.git(cwd, "diff", "--stat", *args, check=False)
        full = g.git(cwd, "diff", *args, check=False)
    except g.GitError as exc:
        out["note"] = f"git failed: {exc}"
        return out
    if not full.ok:
        out["note"] = f"git diff failed: {full.detail()}"
        return out
    out["stat"] = stat.out.strip()
    out["truncated"] = len(full.out) > DIFF_LIMIT
    out["text"] = full.out[:DIFF_LIMIT]
    return out
