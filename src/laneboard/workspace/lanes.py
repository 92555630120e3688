"""Card lanes: one git checkout and branch per card round, recorded in the store.

A card in a git project runs in ``.worktrees/<card>[-r<round>]`` on branch
``lane/<card>[-r<round>]``. The base is probed: the project's declared ``base_ref``
(missing is an error, never a silent fallback), else the newest earlier round's lane
branch that still resolves, else the project's current branch.

The lane is a repository of its own — its own ``.git`` with its own refs, index, config
and hooks — that borrows the user's objects read-only through ``objects/info/alternates``
(nothing is copied). An agent in its sandbox can commit, branch and inspect history in its
lane and cannot write the user's refs, objects, hooks or config. The runtime, outside the
sandbox, brings the verified commit into the user's repository as ``lane/<card>``
(``publish``), which is what landing merges.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass
from typing import Any

from laneboard.domain.model import Actor, Card, system
from laneboard.store import Row, Store
from laneboard.store.tx import Tx
from laneboard.workspace import git as g
from laneboard.workspace import remote as rm
from laneboard.workspace.admit import AdmissionError

LANES_ACTOR = "Lanes"
WORKTREES = ".worktrees"
LANE_PREFIX = "lane/"
_REF_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
log = logging.getLogger("laneboard.lanes")


def lanes_actor() -> Actor:
    return system(LANES_ACTOR)


def lane_name(ref: str, round_: int) -> str:
    if not _REF_OK.match(ref):
        raise AdmissionError(f"card reference {ref!r} cannot name a lane", code="WORKSPACE_ERROR")
    return ref if round_ <= 1 else f"{ref}-r{round_}"


def lane_branch(ref: str, round_: int) -> str:
    return LANE_PREFIX + lane_name(ref, round_)


# -- records ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Lane:
    id: int
    card_id: int
    round: int
    project_id: int
    repo: str
    path: str
    branch: str
    base: str
    base_commit: str
    state: str
    merge_commit: str | None
    target_branch: str | None
    created_at: int
    updated_at: int
    landed_at: int | None
    cleaned_at: int | None
    machine: str | None = None  # whose lane: the machine that made it (None: not recorded)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def target_dir(self, project_path: str | None) -> str:
        """The directory inside the lane that corresponds to the project directory."""
        if project_path:
            rel = os.path.relpath(os.path.realpath(project_path), self.repo)
            if rel != "." and not rel.startswith(".."):
                return os.path.join(self.path, rel)
        return self.path


def _lane(r: Row) -> Lane:
    return Lane(
        int(r["id"]),
        int(r["card_id"]),
        int(r["round"]),
        int(r["project_id"]),
        r["repo"],
        r["path"],
        r["branch"],
        r["base"],
        r["base_commit"],
        r["state"],
        r["merge_commit"],
        r["target_branch"],
        int(r["created_at"]),
        int(r["updated_at"]),
        r["landed_at"],
        r["cleaned_at"],
        r["machine"],
    )


def lane_for(tx: Tx, card_id: int, round_: int) -> Lane | None:
    r = tx.lane_row(card_id, round_)
    return _lane(r) if r else None


def lane_or_latest(tx: Tx, card_id: int, round_: int) -> Lane | None:
    """The card's lane of ``round_`` or, when that round has none, its newest."""
    r = tx.lane_row_or_latest(card_id, round_)
    return _lane(r) if r else None


def lanes_of(tx: Tx, card_id: int) -> list[Lane]:
    got = tx.lane_rows_of(card_id)
    return [_lane(r) for r in got]


def all_lanes(tx: Tx, states: tuple[str, ...] = ()) -> list[Lane]:
    return [_lane(r) for r in tx.lane_rows(states)]


def lanes_and_ended(tx: Tx) -> tuple[list[Lane], list[Lane]]:
    """Every lane, and those of them ``terminal_lanes`` names, in one read."""
    got = tx.lane_rows_ended()
    every = [_lane(r) for r in got]
    ended = [
        lane
        for lane, r in zip(every, got, strict=True)
        if r["card_ended"] and lane.state in ("active", "landed")
    ]
    return every, ended


def terminal_lanes(tx: Tx, card_id: int | None = None) -> list[Lane]:
    """The active or landed lanes of done or canceled cards (of one card if given)."""
    return [_lane(r) for r in tx.terminal_lane_rows(card_id)]


def drop_lane_record(tx: Tx, lane: Lane, **why: Any) -> None:
    """Delete a lane's record, with its ``lane.dropped`` event (``why``: more of its payload)."""
    tx.delete_lane(lane.id)
    tx.append_event(
        "lane.dropped",
        lanes_actor(),
        card_id=lane.card_id,
        project_id=lane.project_id,
        payload={"branch": lane.branch, "path": lane.path, "round": lane.round, **why},
    )


def record_lane(
    tx: Tx,
    card: Card,
    repo: str,
    path: str,
    branch: str,
    base: str,
    base_commit: str,
    how: str,
    machine: str | None = None,
) -> Lane:
    """Insert (or refresh) the lane row for the card's round, with its event; ``machine``
    names the machine whose lane it is."""
    old = lane_for(tx, card.id, card.delivery_round)
    if old is None:
        tx.insert_lane(card.id, card.delivery_round, card.project_id, repo, path, branch, base,
                       base_commit, machine)  # fmt: skip
    elif rm.is_clone(repo):  # another machine's lane of this round before: its base too
        tx.refresh_lane(old.id, repo, path, branch, base, base_commit, machine)
    else:
        tx.refresh_lane(old.id, repo, path, branch, machine=machine)
    tx.append_event(
        "lane.created" if old is None else "lane.refreshed",
        lanes_actor(),
        card_id=card.id,
        project_id=card.project_id,
        run_id=card.run_id,
        payload={
            "ref": card.ref,
            "round": card.delivery_round,
            "path": path,
            "branch": branch,
            "base": base,
            "base_commit": base_commit,
            "how": how,
        },
    )
    got = lane_for(tx, card.id, card.delivery_round)
    assert got is not None
    return got


# -- the lane's own repository ------------------------------------------------------------
IDENTITY_KEYS = ("user.name", "user.email")


def make_lane(repo: str, slot: str, branch: str, commit: str) -> None:
    """A repository at ``slot`` sharing ``repo``'s objects, on ``branch`` at ``commit``.

    It is built beside the slot and renamed into place, so a process killed half-way
    leaves no half-made lane at ``slot`` (only a ``.making-`` directory, removed later).
    """
    parent, name = os.path.split(slot)
    for stale in os.listdir(parent):  # left by a process killed while making a lane
        if stale.startswith(name + ".making-"):
            shutil.rmtree(os.path.join(parent, stale), ignore_errors=True)
    tmp = f"{slot}.making-{os.getpid()}"
    try:
        g.git(repo, "init", "-q", "--template=", tmp)  # no sample hooks
        with open(os.path.join(tmp, ".git", "objects", "info", "alternates"), "w") as fh:
            fh.write(os.path.join(g.common_dir(repo), "objects") + "\n")
        for key in IDENTITY_KEYS:  # commits in the lane carry the user's identity
            got = g.git(repo, "config", "--get", key, check=False)
            if got.ok and got.out.strip():
                g.git(tmp, "config", key, got.out.strip())
        g.git(tmp, "update-ref", f"refs/heads/{branch}", commit)
        g.git(tmp, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
        g.git(tmp, "reset", "-q", "--hard", commit)
        g.ensure_excluded(tmp)
        os.rename(tmp, slot)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish(lane: Lane, commit: str) -> None:
    """Bring ``commit`` of the lane into the user's repository as the lane branch; in a
    clone of a project's remote, push it to the remote as that branch too."""
    if not g.resolves(lane.repo, commit):
        g.git(lane.repo, "fetch", "-q", "--no-tags", lane.path, commit)
    g.git(lane.repo, "update-ref", f"refs/heads/{lane.branch}", commit)
    if rm.is_clone(lane.repo):
        rm.push_lane(lane.repo, lane.branch, commit)


def delivered_commit(store: Store, card_id: int, round_: int) -> str | None:
    """The lane commit the runtime verified for a round (its report's ``git:`` evidence)."""
    with store.read() as tx:
        rep = tx.report(card_id, round_)
    for ev in reversed(rep.evidence if rep else []):
        if ev.command == "git rev-parse HEAD" and ev.digest.startswith("git:"):
            return ev.digest.removeprefix("git:")
    return None


def publish_verified(store: Store, lane: Lane) -> None:
    """Before landing: the lane branch holds the round's verified commit (the pool may not
    have published it yet when a landing runs right after the delivery)."""
    commit = delivered_commit(store, lane.card_id, lane.round)
    if commit is not None and os.path.isdir(lane.path):
        try:
            publish(lane, commit)
        except g.GitError as exc:
            log.warning("cannot publish %s of %s: %s", commit[:12], lane.branch, exc)


def publish_delivery(store: Store, card: Card) -> str | None:
    """After a turn: publish the verified commit of the turn's round (``card`` as the turn
    began), if any. Its lane is read right before: a lane landed and cleaned meanwhile
    must not get its branch back."""
    with store.autocommit() as tx:
        lane = lane_for(tx, card.id, card.delivery_round)
    if lane is None or lane.state != "active" or not os.path.isdir(lane.path):
        return None
    commit = delivered_commit(store, card.id, card.delivery_round)
    if commit is None:
        return None
    try:
        publish(lane, commit)
    except g.GitError as exc:
        log.warning("cannot publish %s of %s: %s", commit[:12], card.ref, exc)
        return None
    return commit


def holds_nothing_of_its_own(repo: str, slot: str) -> bool:
    """Whether the lane at ``slot`` holds nothing of its own: a clean checkout whose head
    is a commit of ``repo`` (a brief or check logs under ``.laneboard/`` are not part of its
    status). Such a lane may be removed: nothing in it is lost."""
    try:
        if not (os.path.isdir(slot) and g.is_checkout(slot)) or g.status_lines(slot):
            return False
        head = g.git(slot, "rev-parse", "--verify", "--quiet", "HEAD", check=False).out.strip()
        return bool(head) and g.resolves(repo, head)
    except g.GitError:
        return False


def remove_tree(lane: Lane, into: str = "HEAD") -> str | None:
    """Delete a lane's directory when everything in it is merged into the user's current
    branch (``into``) and nothing is uncommitted; else say why not (unmerged work is never
    lost)."""
    dirty = g.status_lines(lane.path)
    if dirty:
        return f"the lane has uncommitted changes ({', '.join(d[3:] for d in dirty[:5])})"
    head = g.commit_of(lane.path, "HEAD")
    if not g.resolves(lane.repo, head) or not g.is_ancestor(lane.repo, head, into):
        return f"the lane's {lane.branch} at {head[:12]} holds work not merged into the checkout"
    shutil.rmtree(lane.path)
    return None


# -- admission -------------------------------------------------------------------------
def conflict_to_resolve(card: Card) -> dict[str, Any] | None:
    """``meta.conflict_resolve`` when this round exists to resolve a landing conflict."""
    info = card.meta.get("conflict_resolve")
    if isinstance(info, dict) and info.get("round") == card.delivery_round:
        return info
    return None


def probe_base(repo: str, card: Card, declared: str | None) -> tuple[str, str]:
    """The base ref for a new lane branch and the commit it names now."""
    if declared:
        if not g.resolves(repo, declared):
            raise AdmissionError(
                f"declared base_ref {declared!r} does not resolve in {repo} "
                f"(fix the project's base_ref or create the ref)",
                code="WORKSPACE_BASE_UNRESOLVED",
            )
        return declared, g.commit_of(repo, declared)
    resolve = conflict_to_resolve(card)
    if resolve is not None and g.branch_exists(repo, str(resolve["onto"])):
        onto = str(resolve["onto"])  # a landing conflict: start from where it must land
        return onto, g.commit_of(repo, f"refs/heads/{onto}")
    for rnd in range(card.delivery_round - 1, 0, -1):
        prev = lane_branch(card.ref, rnd)
        if g.branch_exists(repo, prev):
            return prev, g.commit_of(repo, f"refs/heads/{prev}")
    current = g.current_branch(repo)
    if current is not None:
        return current, g.commit_of(repo, f"refs/heads/{current}")
    if g.resolves(repo, "HEAD"):
        return "HEAD", g.commit_of(repo, "HEAD")
    raise AdmissionError(
        f"{repo} has no commit to start a lane from (commit something first)",
        code="WORKSPACE_BASE_UNRESOLVED",
    )


def probe_remote_base(clone: str, card: Card, base: str) -> tuple[str, str]:
    """The base of a new lane in a clone of the project's remote: where a landing conflict
    must land, else the newest earlier round's lane branch (this machine's or the
    remote's), else the remote's base branch as fetched now."""
    resolve = conflict_to_resolve(card)
    if resolve is not None and g.resolves(clone, rm.tracking(str(resolve["onto"]))):
        onto = str(resolve["onto"])
        return onto, g.commit_of(clone, rm.tracking(onto))
    for rnd in range(card.delivery_round - 1, 0, -1):
        prev = lane_branch(card.ref, rnd)
        if g.branch_exists(clone, prev):
            return prev, g.commit_of(clone, f"refs/heads/{prev}")
        if g.resolves(clone, rm.tracking(prev)):
            return prev, g.commit_of(clone, rm.tracking(prev))
    return base, g.commit_of(clone, rm.tracking(base))
