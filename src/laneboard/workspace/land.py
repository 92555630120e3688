"""Landing a lane on acceptance, cleanup of terminal lanes, and the record sweep.

Landing merges the lane branch into the project checkout's current branch with
``git merge --no-ff``. A dirty checkout or a conflict lands nothing: the card keeps
its status, a ``note`` comment says why and what to run, and the lane stays. Cleanup
removes the worktree and then the branch of a terminal card only when that branch is
merged into the project's current branch; unmerged work is never deleted.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from laneboard.domain.model import Card, CommentKind
from laneboard.store import Store
from laneboard.store.tx import Tx
from laneboard.workspace import git as g
from laneboard.workspace.lanes import Lane, all_lanes, lane_for, lanes_actor, latest_lane


@dataclass
class LandResult:
    card: str
    landed: bool = False
    merge_commit: str | None = None
    target_branch: str | None = None
    branch: str | None = None
    skipped: str | None = None  # why there was nothing to land (the card closes anyway)
    blocked: str | None = None  # why landing was refused (the card stays in review)
    commands: list[str] = field(default_factory=list)
    already: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _lane_to_land(tx: Tx, card: Card) -> Lane | None:
    return lane_for(tx, card.id, card.delivery_round) or latest_lane(tx, card.id)


def land(store: Store, card: Card) -> LandResult:
    """Merge the card's lane branch into the project's current branch.

    A refusal whose reason is the one last recorded for the card writes no second note.
    """
    with store.read() as tx:
        lane = _lane_to_land(tx, card)
    res = LandResult(card.ref)
    if lane is None:
        res.skipped = "has no lane record"
        return res
    res.branch = lane.branch
    if lane.state == "landed":
        res.landed, res.already = True, True
        res.merge_commit, res.target_branch = lane.merge_commit, lane.target_branch
        return res
    if lane.state == "cleaned":
        res.skipped = "its lane was already cleaned up"
        return res
    try:
        return _land(store, card, lane, res)
    except g.GitError as exc:
        return _blocked(store, card, lane, res, f"git failed: {exc}", [f"cd {lane.repo}"])


def land_closed(store: Store, limit: int = 50) -> list[dict[str, Any]]:
    """Land ``done`` cards whose current round's lane was never merged.

    A card closed outside the landing gate (by a tool that does not install it) is
    landed here under the same checks; a refusal leaves the card ``done`` and the lane
    in place, with one note per distinct reason.
    """
    with store.read() as tx:
        got = tx.all(
            "SELECT c.id FROM lanes l JOIN cards c ON c.id = l.card_id WHERE l.state = "
            "'active' AND c.status = 'done' AND l.round = c.delivery_round ORDER BY c.id "
            "LIMIT ?",
            (limit,),
        )
        cards = [c for c in (tx.card(int(r["id"])) for r in got) if c is not None]
    return [land(store, c).to_dict() for c in cards]


def _land(store: Store, card: Card, lane: Lane, res: LandResult) -> LandResult:
    repo = lane.repo
    if not os.path.isdir(repo):
        return _blocked(store, card, lane, res, f"the project checkout {repo} is missing", [])
    target = g.current_branch(repo)
    res.target_branch = target
    if target is None:
        return _blocked(
            store, card, lane, res,
            f"the project checkout {repo} has a detached HEAD (no branch to land on)",
            [f"cd {repo}", "git switch <branch>", f"lb land {card.ref}"],
        )  # fmt: skip
    if not g.branch_exists(repo, lane.branch):
        return _blocked(
            store, card, lane, res, f"the lane branch {lane.branch} no longer exists", []
        )
    if g.is_ancestor(repo, f"refs/heads/{lane.branch}", "HEAD"):
        res.already = True
        return _landed(store, card, lane, res, g.commit_of(repo, f"refs/heads/{lane.branch}"))
    dirty = g.status_lines(repo, untracked=False)
    if dirty:
        shown = ", ".join(line[3:] for line in dirty[:10]) + (" …" if len(dirty) > 10 else "")
        return _blocked(
            store, card, lane, res,
            f"the project checkout {repo} has uncommitted changes to tracked files ({shown})",
            [f"cd {repo}", "git status", "git commit -am '...'   # or: git stash",
             f"lb land {card.ref}"],
        )  # fmt: skip
    message = f"Land {card.ref}: {card.title} ({lane.branch})"
    merged = g.git(
        repo, "merge", "--no-ff", "--no-edit", "-m", message, lane.branch,
        check=False, identity=True,
    )  # fmt: skip
    if merged.ok:
        return _landed(store, card, lane, res, g.commit_of(repo, "HEAD"))
    conflicted = [
        p for p in g.git(repo, "diff", "--name-only", "--diff-filter=U", check=False).out.split()
    ]
    if g.resolves(repo, "MERGE_HEAD"):
        g.git(repo, "merge", "--abort", check=False)
    if conflicted:
        reason = f"merging {lane.branch} into {target} conflicts in {', '.join(conflicted[:20])}"
    else:
        reason = f"merging {lane.branch} into {target} failed: {merged.detail()}"
    return _blocked(
        store, card, lane, res, reason,
        [f"cd {repo}", f"git merge --no-ff {lane.branch}", "# resolve, then: git commit",
         f"lb land {card.ref}"],
    )  # fmt: skip


def _landed(store: Store, card: Card, lane: Lane, res: LandResult, commit: str) -> LandResult:
    res.landed, res.merge_commit = True, commit
    with store.write() as tx:
        now = tx.now()
        tx.run(
            "UPDATE lanes SET state = 'landed', merge_commit = ?, target_branch = ?, "
            "landed_at = ?, updated_at = ? WHERE id = ?",
            (commit, res.target_branch, now, now, lane.id),
        )
        fresh = tx.card(card.id)
        if fresh is not None and fresh.status.value == "done" and "merge_commit" not in fresh.meta:
            # closed before it landed (the lanes pass): the card records its merge too
            tx.update_card(
                fresh.id, fresh.version, {"meta": {**fresh.meta, "merge_commit": commit}}
            )
        tx.append_event(
            "lane.landed",
            lanes_actor(),
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={
                "ref": card.ref,
                "branch": lane.branch,
                "into": res.target_branch,
                "merge_commit": commit,
                "already_merged": res.already,
            },
        )
    return res


def _blocked(
    store: Store, card: Card, lane: Lane, res: LandResult, reason: str, commands: list[str]
) -> LandResult:
    res.blocked, res.commands = reason, commands
    body = (
        f"laneboard did not land {card.ref}: {reason}. The lane is kept at {lane.path} "
        f"(branch {lane.branch})."
    )
    if commands:
        body += " To land it by hand:\n\n" + "\n".join(f"    {c}" for c in commands)
    with store.write() as tx:
        if _last_refusal(tx, card.id) == reason:  # said already: no note twice
            return res
        tx.insert_comment(card.id, CommentKind.NOTE.value, body, lanes_actor())
        tx.append_event(
            "lane.land_blocked",
            lanes_actor(),
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={"ref": card.ref, "branch": lane.branch, "reason": reason},
        )
    return res


def _last_refusal(tx: Tx, card_id: int) -> str | None:
    r = tx.one(
        "SELECT type, payload FROM events WHERE card_id = ? AND type IN "
        "('lane.landed', 'lane.land_blocked') ORDER BY id DESC LIMIT 1",
        (card_id,),
    )
    if r is None or r["type"] != "lane.land_blocked":
        return None
    return str(json.loads(r["payload"]).get("reason"))


# -- cleanup -----------------------------------------------------------------------------
def cleanup_terminal(store: Store, card_id: int | None = None) -> list[dict[str, Any]]:
    """Remove the worktree, then the branch, of terminal cards' merged lanes.

    Returns one entry per lane looked at: ``cleaned`` or ``kept`` with the reason.
    """
    with store.read() as tx:
        sql = (
            "SELECT l.id FROM lanes l JOIN cards c ON c.id = l.card_id "
            "WHERE l.state IN ('active', 'landed') AND c.status IN ('done', 'canceled')"
        )
        params: tuple[Any, ...] = ()
        if card_id is not None:
            sql += " AND c.id = ?"
            params = (card_id,)
        ids = [int(r["id"]) for r in tx.all(sql + " ORDER BY l.id", params)]
        lanes = [lane for lane in all_lanes(tx, ("active", "landed")) if lane.id in ids]
    return [_cleanup(store, lane) for lane in lanes]


def _cleanup(store: Store, lane: Lane) -> dict[str, Any]:
    out: dict[str, Any] = {"lane": lane.branch, "path": lane.path, "action": "kept"}
    try:
        if not os.path.isdir(lane.repo):
            out["reason"] = f"repository {lane.repo} is missing"
            return out
        target = g.current_branch(lane.repo)
        if target is None:
            out["reason"] = "the project checkout has a detached HEAD"
            return out
        has_branch = g.branch_exists(lane.repo, lane.branch)
        if has_branch and not g.is_ancestor(lane.repo, f"refs/heads/{lane.branch}", "HEAD"):
            out["reason"] = f"{lane.branch} holds work not merged into {target}"
            return out
        if g.is_checkout(lane.path):
            _keep_runtime_files(lane)
            removed = g.git(lane.repo, "worktree", "remove", lane.path, check=False)
            if not removed.ok:
                out["reason"] = f"the worktree is not clean: {removed.detail()}"
                return out
        g.git(lane.repo, "worktree", "prune")
        if has_branch:
            g.git(lane.repo, "branch", "-d", lane.branch)
    except g.GitError as exc:
        out["reason"] = str(exc)
        return out
    with store.write() as tx:
        now = tx.now()
        tx.run(
            "UPDATE lanes SET state = 'cleaned', cleaned_at = ?, updated_at = ? WHERE id = ?",
            (now, now, lane.id),
        )
        tx.append_event(
            "lane.cleaned",
            lanes_actor(),
            card_id=lane.card_id,
            project_id=lane.project_id,
            payload={"branch": lane.branch, "path": lane.path, "into": target},
        )
    out["action"] = "cleaned"
    return out


def _keep_runtime_files(lane: Lane) -> None:
    """Copy the lane's ``.laneboard/`` (briefs, check logs) into the project checkout."""
    src = os.path.join(lane.path, ".laneboard")
    if os.path.isdir(src):
        dest = os.path.join(lane.repo, ".laneboard", "lanes", os.path.basename(lane.path))
        shutil.copytree(src, dest, dirs_exist_ok=True)
        shutil.rmtree(src, ignore_errors=True)


def sweep_lanes(store: Store) -> list[dict[str, Any]]:
    """Drop lane records whose tree is gone and whose branch no longer resolves.

    A record is dropped only when the git probe actually ran: a missing repository or
    a git failure keeps it.
    """
    with store.read() as tx:
        lanes = all_lanes(tx)
    dropped: list[dict[str, Any]] = []
    for lane in lanes:
        if not os.path.isdir(lane.repo):
            continue
        if os.path.exists(os.path.join(lane.path, ".git")):
            continue  # the tree is there: no git call needed to keep the record
        try:
            if g.toplevel(lane.repo) is None:
                continue
            if os.path.isdir(lane.path) and g.is_checkout(lane.path):
                continue
            if g.branch_exists(lane.repo, lane.branch):
                continue
        except g.GitError:
            continue
        with store.write() as tx:
            tx.run("DELETE FROM lanes WHERE id = ?", (lane.id,))
            tx.append_event(
                "lane.dropped",
                lanes_actor(),
                card_id=lane.card_id,
                project_id=lane.project_id,
                payload={"branch": lane.branch, "path": lane.path, "round": lane.round},
            )
        dropped.append({"lane": lane.branch, "path": lane.path, "card_id": lane.card_id})
    return dropped
