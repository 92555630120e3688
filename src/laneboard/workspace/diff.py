"""A card's lane as a diff against its base, for a person reading the card."""

from __future__ import annotations

import os
from typing import Any

from laneboard.store import Store
from laneboard.workspace import git as g
from laneboard.workspace.lanes import lanes_of

DIFF_LIMIT = 8 * 1024 * 1024  # characters of diff read; a person pages through less


def lane_diff(store: Store, card_id: int, round_: int | None = None) -> dict[str, Any] | None:
    """A lane's changes since its base commit: the given round's lane, else the latest
    (None: the card has no lane).

    A lane whose tree is present is compared as it stands, uncommitted edits included; a
    removed tree by its branch; a landed and cleaned lane by its merge commit.
    """
    with store.read() as tx:
        lanes = lanes_of(tx, card_id)
    if not lanes:
        return None
    chosen = [x for x in lanes if x.round == round_]
    lane = chosen[0] if chosen else max(lanes, key=lambda x: (x.round, x.id))
    out: dict[str, Any] = {
        "branch": lane.branch,
        "round": lane.round,
        "rounds": sorted({x.round for x in lanes}),
        "state": lane.state,
        "base": lane.base,
        "base_commit": lane.base_commit[:12],
        "text": None,
        "truncated": False,
        "note": None,
    }
    try:
        if g.is_checkout(lane.path):
            cwd, args = lane.path, [lane.base_commit]
        elif os.path.isdir(lane.repo) and g.branch_exists(lane.repo, lane.branch):
            cwd, args = lane.repo, [lane.base_commit, f"refs/heads/{lane.branch}"]
        elif (
            lane.merge_commit
            and os.path.isdir(lane.repo)
            and g.resolves(lane.repo, lane.merge_commit)
        ):
            cwd, args = lane.repo, [f"{lane.merge_commit}^1", lane.merge_commit]
        else:
            out["note"] = "the lane's tree and branch are gone"
            return out
        full = g.git(cwd, "diff", *args, check=False)
    except g.GitError as exc:
        out["note"] = f"git failed: {exc}"
        return out
    if not full.ok:
        out["note"] = f"git diff failed: {full.detail()}"
        return out
    out["truncated"] = len(full.out) > DIFF_LIMIT
    out["text"] = full.out[:DIFF_LIMIT]
    return out
