"""Lanes in this machine's clones that no lane record names.

A lane record names one lane per card and round: the lane of the machine whose claim won.
A lane made in a clone can outlive the record that named it: a machine fenced while its
agent ran comes back to find its card taken over (the record now names the other
machine's lane), and a machine killed between admitting a card and removing the lane of a
claim it lost never removed it. Every machine's cleanup pass looks in its own clones for
such lanes: one that holds nothing of its own is removed; one that holds anything (an
agent's work in progress, commits of its own) is left where it is, reported, and looked
at again only after ``LANE_RECHECK_MS``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Collection
from typing import Any

from laneboard.workspace import remote as rm
from laneboard.workspace.land import LANE_RECHECK_MS, LaneRechecks
from laneboard.workspace.lanes import WORKTREES, Lane, holds_nothing_of_its_own

ORPHAN = "orphan"  # what ``LaneRechecks`` looked at: a slot, by its directory's inode
ASIDE_MARKS = (".orphan-", ".making-")  # moved aside by an admission, or half made


def sweep_orphans(
    clones: str,
    machine: str,
    lanes: list[Lane],
    in_use: Callable[[], Collection[str]],
    rechecks: LaneRechecks | None = None,
) -> list[dict[str, Any]]:
    """Remove the lanes in this machine's clones (under ``clones``) that no record of
    ``lanes`` names as this machine's, unless one holds anything of its own or a live
    handoff of this machine runs in it (``in_use``: their directories, read only when a
    lane is unnamed). Returns one entry per such lane: ``removed`` or ``kept``."""
    named = {os.path.realpath(lane.path) for lane in lanes if lane.machine in (None, machine)}
    unnamed = [
        (repo, slot)
        for repo, slot in _slots(rm.clones_root(clones))
        if slot not in named and _due(rechecks, slot)
    ]
    if not unnamed:
        return []
    busy = [os.path.realpath(t) for t in in_use()]
    out: list[dict[str, Any]] = []
    for repo, slot in unnamed:
        if any(t == slot or t.startswith(slot + os.sep) for t in busy):
            continue
        if holds_nothing_of_its_own(repo, slot):
            shutil.rmtree(slot, ignore_errors=True)
            out.append({"path": slot, "action": "removed"})
            continue
        if rechecks is not None:
            rechecks.kept(ORPHAN, os.stat(slot).st_ino, LANE_RECHECK_MS)
        out.append({"path": slot, "action": "kept", "reason": (
            f"it holds work no lane names; see it (git -C {slot} status), then remove it"
        )})  # fmt: skip
    return out


def _slots(root: str) -> list[tuple[str, str]]:
    """(clone, lane directory) of every lane checkout in the clones under ``root``."""
    found: list[tuple[str, str]] = []
    try:
        projects = sorted(os.listdir(root))
    except OSError:
        return found
    for name in projects:
        repo = os.path.realpath(os.path.join(root, name))
        if not rm.is_clone(repo):
            continue
        parent = os.path.join(repo, WORKTREES)
        try:
            entries = sorted(os.listdir(parent))
        except OSError:
            continue
        for entry in entries:
            slot = os.path.join(parent, entry)
            if any(m in entry for m in ASIDE_MARKS) or os.path.islink(slot):
                continue  # a link is never a lane: what it points to is not the clone's
            if _made_as_a_lane(slot):
                found.append((repo, slot))
    return found


def _made_as_a_lane(slot: str) -> bool:
    """Whether ``slot`` was made as a lane (``lanes.make_lane``: a repository of its own
    that borrows the clone's objects), not a ``git worktree`` someone added there."""
    return os.path.isfile(os.path.join(slot, ".git", "objects", "info", "alternates"))


def _due(rechecks: LaneRechecks | None, slot: str) -> bool:
    if rechecks is None:
        return True
    try:
        return rechecks.due(ORPHAN, os.stat(slot).st_ino)
    except OSError:
        return False
