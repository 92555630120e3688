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
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laneboard.domain.clock import MINUTE_MS
from laneboard.domain.model import Card, CommentKind, Project
from laneboard.store import Store
from laneboard.store.tx import Tx
from laneboard.workspace import git as g
from laneboard.workspace.lanes import (
    LANE_PREFIX,
    Lane,
    all_lanes,
    delivered_commit,
    drop_lane_record,
    lane_or_latest,
    lanes_actor,
    publish,
    publish_verified,
    remove_tree,
    terminal_lanes,
)


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


# Held from a landing's merge until its ``lane.landed`` event is committed: the post-turn
# boundary check reads the checkout under it, so a merge it sees is always one it can
# explain (supervisor.boundary.check_after_turn).
LANDING = threading.RLock()
# a lane the clean-up or the sweep kept (work not merged; a branch still there) is judged
# again after this long: each judgement is a few git commands, a fetch for a clone
LANE_RECHECK_MS = 10 * MINUTE_MS
# a done card whose landing the lanes pass was refused (a dirty checkout, a conflict) is
# tried again after this long: a person may be fixing it (``lb land REF`` lands at once)
LAND_RETRY_MS = MINUTE_MS


class LaneRechecks:
    """When what the lanes' passes looked at and left is looked at again: a lane the
    clean-up or the sweep kept, a card whose landing was refused. A process's memory, not
    the board's (a supervisor that starts looks at everything once). Those passes run at
    nearly every move on the board; without it, each kept lane or refused landing cost its
    git commands at every tick for as long as it lasted."""

    def __init__(self, now: Callable[[], int]) -> None:
        self._now = now
        self._next: dict[tuple[str, int], int] = {}  # (what looked, lane or card id) -> when

    def due(self, what: str, key: int) -> bool:
        return self._next.get((what, key), 0) <= self._now()

    def kept(self, what: str, key: int, after_ms: int = LANE_RECHECK_MS) -> None:
        self._next[what, key] = self._now() + after_ms

    def waiting(self, what: str) -> int:
        """How many of ``what`` are not due yet."""
        now = self._now()
        return sum(1 for (w, _), at in self._next.items() if w == what and at > now)

    def prune(self) -> None:
        """Forget what is due anyway (a due entry and no entry are the same)."""
        now = self._now()
        for key in [k for k, at in self._next.items() if at <= now]:
            del self._next[key]


def _lane_to_land(tx: Tx, card: Card) -> Lane | None:
    return lane_or_latest(tx, card.id, card.delivery_round)


def land(store: Store, card: Card, clones: str | None = None) -> LandResult:
    """Merge the card's lane branch into the project's current branch — for a project with
    a remote, onto the remote's base branch, from this machine's clone (under ``clones``).

    A refusal whose reason is the one last recorded for the card writes no second note.
    """
    with store.autocommit() as tx:  # two rows that need not agree: no snapshot to open
        lane = _lane_to_land(tx, card)
        project = tx.project(id=card.project_id)
    res = LandResult(card.ref)
    if lane is None:
        res.skipped = "has no lane record"
        return res
    res.branch = lane.branch
    if project is not None and project.remote and card.meta.get("review_of") is not None:
        res.skipped = "is a review: its lane holds the reviewed round, which lands itself"
        return res
    if lane.state == "landed":
        res.landed, res.already = True, True
        res.merge_commit, res.target_branch = lane.merge_commit, lane.target_branch
        return res
    if lane.state == "cleaned":
        res.skipped = "its lane was already cleaned up"
        return res
    try:
        with LANDING:  # the merge and its lane.landed event, as one step for this process
            if project is not None and project.remote:
                return _land_remote(store, card, lane, res, project, clones)
            return _land(store, card, lane, res)
    except g.GitError as exc:
        return _blocked(store, card, lane, res, f"git failed: {exc}", [f"cd {lane.repo}"])


def _land_remote(
    store: Store, card: Card, lane: Lane, res: LandResult, project: Project, clones: str | None
) -> LandResult:
    """Land on the remote's base branch: fetch, merge the round's verified commit without a
    working tree, push with a lease on the base; a base that moved meanwhile is retried."""
    from laneboard.workspace import remote as rm
    from laneboard.workspace.verify import settings

    declared = settings(store, project.id, rm.clone_dir(clones, project)).get("base_ref")
    clone = rm.ensure_clone(clones, project, str(declared) if declared else None)
    base = rm.base_branch(clone, str(declared) if declared else None, project.key)
    res.target_branch = base
    here = (
        os.path.realpath(lane.repo) == os.path.realpath(clone)
        and lane.machine in (None, rm.this_machine())
        and os.path.isdir(lane.path)
    )
    commit = delivered_commit(store, lane.card_id, lane.round)
    if commit is not None and here:
        publish(lane, commit)  # this machine's lane: make sure the remote has it
    if commit is None:  # not verified by the runtime: the lane branch as pushed
        for ref in (rm.tracking(lane.branch), f"refs/heads/{lane.branch}"):
            if g.resolves(clone, ref):
                commit = g.commit_of(clone, ref)
                break
    if commit is None or not g.resolves(clone, commit):
        what = f"the verified commit {commit[:12]} of" if commit else "the lane branch"
        return _blocked(
            store, card, lane, res,
            f"{what} {lane.branch} is not on the remote {project.remote} (the machine that "
            "ran the lane has not pushed it)",
            [f"git -C {lane.path} push {project.remote} HEAD:refs/heads/{lane.branch}",
             f"lb land {card.ref}"],
        )  # fmt: skip
    message = f"Land {card.ref}: {card.title} ({lane.branch})"
    got = rm.land_on_remote(clone, base, commit, message)
    if got.merge_commit is not None:
        res.already = got.already
        return _landed(store, card, lane, res, got.merge_commit, retries=got.retries)
    if got.conflicts:
        conflict = {
            "round": lane.round,
            "files": got.conflicts,
            "branch": lane.branch,
            "onto": base,
            "onto_commit": got.onto_commit,
            "lane_commit": commit,
        }
        return _blocked(
            store, card, lane, res,
            f"merging {lane.branch} into {base} conflicts in {', '.join(got.conflicts)}",
            [f"git clone {project.remote} && cd <clone>", f"git fetch origin {lane.branch}",
             f"git merge --no-ff FETCH_HEAD   # on {base}; resolve, commit, push",
             f"lb land {card.ref}"],
            conflict,
        )  # fmt: skip
    return _blocked(store, card, lane, res, str(got.error), [f"lb land {card.ref}"])


def land_closed(
    store: Store,
    limit: int = 50,
    clones: str | None = None,
    rechecks: LaneRechecks | None = None,
) -> list[dict[str, Any]]:
    """Land ``done`` cards whose current round's lane was never merged.

    A card closed outside the landing gate (by a tool that does not install it) is
    landed here under the same checks; a refusal leaves the card ``done`` and the lane
    in place, with one note per distinct reason. ``rechecks``: a card refused before is
    tried again only once it is due (``LAND_RETRY_MS``).
    """
    waiting = rechecks.waiting("land") if rechecks is not None else 0
    with store.read() as tx:
        got = tx.done_cards_with_active_lanes(limit + waiting)
        if rechecks is not None:
            got = [i for i in got if rechecks.due("land", i)][:limit]
        cards = [c for c in (tx.card(i) for i in got) if c is not None]
    out = []
    for card in cards:
        res = land(store, card, clones).to_dict()
        if rechecks is not None and not res.get("landed"):
            rechecks.kept("land", card.id, LAND_RETRY_MS)
        out.append(res)
    return out


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
    publish_verified(store, lane)
    if not g.branch_exists(repo, lane.branch):
        return _blocked(
            store, card, lane, res, f"the lane branch {lane.branch} no longer exists", []
        )
    if g.is_ancestor(repo, f"refs/heads/{lane.branch}", "HEAD"):
        res.already = True  # merged by hand: record the commit that brought it in
        return _landed(store, card, lane, res, merged_by(repo, f"refs/heads/{lane.branch}"))
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
    conflict: dict[str, Any] | None = None
    if g.resolves(repo, "MERGE_HEAD"):
        g.git(repo, "merge", "--abort", check=False)
    untracked = _untracked_collisions(merged.err)
    if untracked:
        reason = (
            f"merging {lane.branch} into {target} would overwrite untracked files in the "
            f"checkout: {', '.join(untracked[:20])}"
        )
    elif conflicted:
        reason = f"merging {lane.branch} into {target} conflicts in {', '.join(conflicted[:20])}"
        conflict = _conflict(lane, target, conflicted[:20])
    else:
        reason = f"merging {lane.branch} into {target} failed: {merged.detail()}"
    return _blocked(
        store, card, lane, res, reason,
        [f"cd {repo}", f"git merge --no-ff {lane.branch}", "# resolve, then: git commit",
         f"lb land {card.ref}"],
        conflict,
    )  # fmt: skip


def _landed(
    store: Store, card: Card, lane: Lane, res: LandResult, commit: str, retries: int = 0
) -> LandResult:
    res.landed, res.merge_commit = True, commit
    with store.write() as tx:
        tx.mark_lane_landed(lane.id, commit, res.target_branch)
        fresh = tx.card(card.id, lock=True)
        if fresh is not None and fresh.status.value == "done" and "merge_commit" not in fresh.meta:
            # closed before it landed (the lanes pass): the card records its merge too
            meta = {**fresh.meta, "merge_commit": commit}
            if not tx.update_card(fresh.id, fresh.version, {"meta": meta}):
                raise g.GitError(  # never a landing the card does not record
                    f"{card.ref} changed while its merge {commit} was recorded; "
                    f"run lb land {card.ref} again"
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
                **({"push_retries": retries} if retries else {}),
            },
        )
    return res


def merged_by(repo: str, tip: str) -> str:
    """The commit of the current branch that brought ``tip`` in: the oldest first-parent
    commit descending from it (a merge made by hand), else ``tip`` itself."""
    got = g.git(
        repo, "rev-list", "--first-parent", "--ancestry-path", f"{tip}..HEAD", check=False
    ).out.split()  # fmt: skip
    return got[-1] if got else g.commit_of(repo, tip)


def _untracked_collisions(detail: str) -> list[str]:
    """The files git names when a merge would overwrite untracked files."""
    lines = detail.splitlines()
    for i, line in enumerate(lines):
        if "untracked working tree files would be overwritten" in line:
            out = []
            for name in lines[i + 1 :]:
                if not name.startswith(("\t", " ")) or not name.strip():
                    break
                out.append(name.strip())
            return out
    return []


def _conflict(lane: Lane, onto: str, files: list[str]) -> dict[str, Any]:
    """What conflicted, for the workflow to send the round back to its worker (in the
    ``lane.land_blocked`` event): the files, the branch it conflicts with, both commits."""
    return {
        "round": lane.round,
        "files": files,
        "branch": lane.branch,
        "onto": onto,
        "onto_commit": g.commit_of(lane.repo, f"refs/heads/{onto}"),
        "lane_commit": g.commit_of(lane.repo, f"refs/heads/{lane.branch}"),
    }


def last_conflict(tx: Tx, card_id: int) -> dict[str, Any] | None:
    """The conflict of the card's last landing refusal, if its last landing event is one."""
    r = tx.last_landing_event(card_id)
    if r is None or r["type"] != "lane.land_blocked":
        return None
    got = json.loads(r["payload"]).get("conflict")
    return got if isinstance(got, dict) else None


def _blocked(
    store: Store,
    card: Card,
    lane: Lane,
    res: LandResult,
    reason: str,
    commands: list[str],
    conflict: dict[str, Any] | None = None,
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
            payload={
                "ref": card.ref,
                "branch": lane.branch,
                "reason": reason,
                **({"conflict": conflict} if conflict else {}),
            },
        )
    return res


def _last_refusal(tx: Tx, card_id: int) -> str | None:
    r = tx.last_landing_event(card_id)
    if r is None or r["type"] != "lane.land_blocked":
        return None
    return str(json.loads(r["payload"]).get("reason"))


# -- cleanup -----------------------------------------------------------------------------
def cleanup_terminal(
    store: Store,
    card_id: int | None = None,
    clones: str | None = None,
    machine: str | None = None,
    lanes: list[Lane] | None = None,
    rechecks: LaneRechecks | None = None,
) -> list[dict[str, Any]]:
    """Remove the worktree, then the branch, of terminal cards' merged lanes.

    A lane in a clone of a project's remote is cleaned only by its own machine
    (``remote.is_mine``: its clone under this machine's ``clones``, its record naming this
    ``machine``, default ``remote.this_machine()``), whichever machine landed it, once its
    branch is on the remote's base; its branch is then deleted from the remote too.

    Returns one entry per lane looked at: ``cleaned`` or ``kept`` with the reason.
    ``lanes``: those lanes (``terminal_lanes``), when the caller has read them.
    ``rechecks``: a lane kept before is looked at again only once it is due.
    """
    from laneboard.workspace import remote as rm

    if lanes is None:
        with store.autocommit() as tx:
            lanes = terminal_lanes(tx, card_id)
    me = machine or rm.this_machine()
    fetched: dict[str, str | None] = {}  # clone -> why it could not be fetched
    out = []
    for lane in lanes:
        if rechecks is not None and not rechecks.due("cleanup", lane.id):
            continue
        if not rm.is_clone(lane.repo):
            got = _cleanup(store, lane)
        elif not rm.is_mine(lane.repo, lane.machine, clones, me):
            continue  # another machine's lane: that machine cleans it
        else:
            if lane.repo not in fetched:
                try:
                    rm.fetch(lane.repo)
                    fetched[lane.repo] = None
                except g.GitError as exc:
                    fetched[lane.repo] = str(exc)
            why = fetched[lane.repo]
            got = _cleanup(store, lane, remote=True) if why is None else (
                {"lane": lane.branch, "path": lane.path, "action": "kept", "reason": why}
            )  # fmt: skip
        if rechecks is not None and got["action"] == "kept":
            rechecks.kept("cleanup", lane.id)
        out.append(got)
    return out


def _cleanup(store: Store, lane: Lane, remote: bool = False) -> dict[str, Any]:
    from laneboard.workspace import remote as rm

    out: dict[str, Any] = {"lane": lane.branch, "path": lane.path, "action": "kept"}
    try:
        if not os.path.isdir(lane.repo):
            out["reason"] = f"repository {lane.repo} is missing"
            return out
        target = g.current_branch(lane.repo)
        if target is None:
            out["reason"] = "the project checkout has a detached HEAD"
            return out
        into = rm.tracking(target) if remote else "HEAD"  # a clone: the remote's base
        has_branch = g.branch_exists(lane.repo, lane.branch)
        if remote and (held := _held_by_its_base(lane, into, has_branch)) is not None:
            into, target = rm.tracking(held), held
        if has_branch and not g.is_ancestor(lane.repo, f"refs/heads/{lane.branch}", into):
            out["reason"] = f"{lane.branch} holds work not merged into {target}"
            return out
        if g.is_checkout(lane.path):
            _keep_runtime_files(lane)
            refused = remove_tree(lane, into)
            if refused is not None:
                out["reason"] = refused
                return out
        if has_branch:
            g.git(lane.repo, "branch", "-D" if remote else "-d", lane.branch)
        if remote:
            rm.delete_lane(lane.repo, lane.branch)
    except g.GitError as exc:
        out["reason"] = str(exc)
        return out
    with store.write() as tx:
        tx.mark_lane_cleaned(lane.id)
        tx.append_event(
            "lane.cleaned",
            lanes_actor(),
            card_id=lane.card_id,
            project_id=lane.project_id,
            payload={"branch": lane.branch, "path": lane.path, "into": target},
        )
    out["action"] = "cleaned"
    return out


def _held_by_its_base(lane: Lane, into: str, has_branch: bool) -> str | None:
    """The lane branch a lane of a clone started from, when the remote's copy of it holds
    everything in the lane (its tree's head and its branch) and the remote's base does not:
    a review's lane, at the reviewed round's commit, or a round that added nothing. Such a
    lane holds no work of its own, whatever becomes of the branch it started from."""
    from laneboard.workspace import remote as rm

    if not lane.base.startswith(LANE_PREFIX):
        return None
    held = rm.tracking(lane.base)
    if not g.resolves(lane.repo, held):
        return None
    tips = [f"refs/heads/{lane.branch}"] if has_branch else []
    if g.is_checkout(lane.path):
        if g.status_lines(lane.path):
            return None  # uncommitted changes: remove_tree says so
        tips.append(g.commit_of(lane.path, "HEAD"))
    if not tips or not all(g.resolves(lane.repo, t) for t in tips):
        return None
    if all(g.is_ancestor(lane.repo, t, into) for t in tips):
        return None  # merged into the base: cleaned as any lane
    return lane.base if all(g.is_ancestor(lane.repo, t, held) for t in tips) else None


def _keep_runtime_files(lane: Lane) -> None:
    """Copy the lane's ``.laneboard/`` (briefs, check logs) into the project checkout."""
    src = os.path.join(lane.path, ".laneboard")
    if os.path.isdir(src):
        dest = os.path.join(lane.repo, ".laneboard", "lanes", os.path.basename(lane.path))
        shutil.copytree(src, dest, dirs_exist_ok=True)
        shutil.rmtree(src, ignore_errors=True)


def sweep_lanes(
    store: Store,
    clones: str | None = None,
    machine: str | None = None,
    lanes: list[Lane] | None = None,
    rechecks: LaneRechecks | None = None,
) -> list[dict[str, Any]]:
    """Drop lane records whose tree is gone and whose branch no longer resolves.

    A record is dropped only when the git probe actually ran: a missing repository or
    a git failure keeps it. A lane in a clone of a project's remote is judged only by its
    own machine (``remote.is_mine``): another machine's clone at the same path has neither
    its tree nor its branch. ``lanes``: every lane, when the caller has read them (the
    records are judged by their tree and branch, whatever state they were read in).
    ``rechecks``: a record the git probe kept before is probed again only once it is due.
    """
    from laneboard.workspace import remote as rm

    if lanes is None:
        with store.autocommit() as tx:
            lanes = all_lanes(tx)
    me = machine or rm.this_machine()
    dropped: list[dict[str, Any]] = []
    for lane in lanes:
        if not os.path.isdir(lane.repo):
            continue
        if rm.is_clone(lane.repo) and not rm.is_mine(lane.repo, lane.machine, clones, me):
            continue
        if os.path.exists(os.path.join(lane.path, ".git")):
            continue  # the tree is there: no git call needed to keep the record
        if rechecks is not None and not rechecks.due("sweep", lane.id):
            continue
        if _still_there(lane):
            if rechecks is not None:
                rechecks.kept("sweep", lane.id)
            continue
        with store.write() as tx:
            drop_lane_record(tx, lane)
        dropped.append({"lane": lane.branch, "path": lane.path, "card_id": lane.card_id})
    return dropped


def _still_there(lane: Lane) -> bool:
    """Whether git says the lane's tree or branch is still there (or cannot tell)."""
    try:
        if g.toplevel(lane.repo) is None:
            return True
        if os.path.isdir(lane.path) and g.is_checkout(lane.path):
            return True
        return g.branch_exists(lane.repo, lane.branch)
    except g.GitError:
        return True
