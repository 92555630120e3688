"""Card lanes: one git worktree and branch per card round, recorded in the store.

A card in a git project runs in ``.worktrees/<card>[-r<round>]`` on branch
``lane/<card>[-r<round>]``. The base is probed: the project's declared ``base_ref``
(missing is an error, never a silent fallback), else the newest earlier round's lane
branch that still resolves, else the project's current branch.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Actor, Card, Project, system
from laneboard.store import Row, Store
from laneboard.store.tx import Tx
from laneboard.workspace import git as g
from laneboard.workspace.admit import AdmissionError

if TYPE_CHECKING:
    from laneboard.board.service import Board

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
    )


def lane_for(tx: Tx, card_id: int, round_: int) -> Lane | None:
    r = tx.one("SELECT * FROM lanes WHERE card_id = ? AND round = ?", (card_id, round_))
    return _lane(r) if r else None


def latest_lane(tx: Tx, card_id: int) -> Lane | None:
    r = tx.one("SELECT * FROM lanes WHERE card_id = ? ORDER BY round DESC LIMIT 1", (card_id,))
    return _lane(r) if r else None


def lanes_of(tx: Tx, card_id: int) -> list[Lane]:
    got = tx.all("SELECT * FROM lanes WHERE card_id = ? ORDER BY round", (card_id,))
    return [_lane(r) for r in got]


def all_lanes(tx: Tx, states: tuple[str, ...] = ()) -> list[Lane]:
    if states:
        marks = ", ".join("?" * len(states))
        got = tx.all(f"SELECT * FROM lanes WHERE state IN ({marks}) ORDER BY id", states)
    else:
        got = tx.all("SELECT * FROM lanes ORDER BY id")
    return [_lane(r) for r in got]


def record_lane(
    tx: Tx,
    card: Card,
    repo: str,
    path: str,
    branch: str,
    base: str,
    base_commit: str,
    how: str,
) -> Lane:
    """Insert (or refresh) the lane row for the card's round, with its event."""
    now = tx.now()
    old = lane_for(tx, card.id, card.delivery_round)
    if old is None:
        tx.run(
            "INSERT INTO lanes (card_id, round, project_id, repo, path, branch, base, "
            "base_commit, state, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?)",
            (card.id, card.delivery_round, card.project_id, repo, path, branch, base,
             base_commit, now, now),
        )  # fmt: skip
    else:
        tx.run(
            "UPDATE lanes SET repo = ?, path = ?, branch = ?, updated_at = ?, "
            "state = CASE WHEN state = 'cleaned' THEN 'active' ELSE state END WHERE id = ?",
            (repo, path, branch, now, old.id),
        )
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


# -- admission -------------------------------------------------------------------------
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


class LaneAdmitter:
    """The ``Admitter`` that gives every card in a git project its own lane."""

    CHECKOUT_TTL_S = 2.0  # one poll pass admits several cards of a project: ask git once

    def __init__(
        self,
        board: Board,
        *,
        warn: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.board = board
        self.store: Store = board.store
        self.warn = warn or log.warning
        self._warned: set[str] = set()
        self._monotonic = monotonic
        self._checkouts: dict[str, tuple[float, str | None]] = {}

    def primary_checkout(self, path: str) -> str | None:
        """``git.primary_checkout``, remembered for a couple of seconds per directory."""
        now = self._monotonic()
        seen = self._checkouts.get(path)
        if seen is not None and now - seen[0] < self.CHECKOUT_TTL_S:
            return seen[1]
        repo = g.primary_checkout(path)
        self._checkouts[path] = (now, repo)
        return repo

    def admit(self, card: Card, project: Project) -> str:
        if not project.path:
            raise AdmissionError(f"project {project.key} has no directory", code="PROJECT_UNMAPPED")
        if not os.path.isdir(project.path):
            raise AdmissionError(
                f"project directory {project.path} does not exist", code="PROJECT_DIR_MISSING"
            )
        cfg = self.board.project_config(project.id)
        if str(cfg.get("workspace", "lanes")) == "shared":
            self._warn_shared(card, project)
            return project.path
        try:
            repo = self.primary_checkout(project.path)
            if repo is None:
                return project.path  # not a git project: the card runs in place
            lane = self._lane(card, project, repo, cfg)
        except g.GitError as exc:
            raise AdmissionError(str(exc), code="WORKSPACE_ERROR") from None
        except OSError as exc:
            raise AdmissionError(
                f"cannot prepare the lane: {exc}", code="WORKSPACE_ERROR"
            ) from None
        target = lane.target_dir(project.path)
        os.makedirs(target, exist_ok=True)
        return target

    def _warn_shared(self, card: Card, project: Project) -> None:
        path = os.path.realpath(str(project.path))
        if path in self._warned:
            return
        with self.store.read() as tx:
            others = tx.scalar(
                "SELECT count(*) AS n FROM cards WHERE project_id = ? AND status = 'in_progress' "
                "AND id <> ?",
                (project.id, card.id),
            )
        if int(others or 0) > 0:
            self._warned.add(path)
            self.warn(
                f'project {project.key} uses workspace = "shared": parallel cards share '
                f"{path} ({card.ref} joins {int(others)} in progress)"
            )

    def _lane(self, card: Card, project: Project, repo: str, cfg: dict[str, Any]) -> Lane:
        name = lane_name(card.ref, card.delivery_round)
        branch = LANE_PREFIX + name
        slot = os.path.join(repo, WORKTREES, name)
        g.ensure_excluded(repo)
        os.makedirs(os.path.join(repo, WORKTREES), exist_ok=True)
        if os.path.lexists(slot):
            if os.path.isdir(slot) and not os.path.islink(slot) and g.is_checkout(slot):
                have = g.current_branch(slot)
                if have != branch:
                    raise AdmissionError(
                        f"{slot} is a checkout of {have or 'a detached HEAD'}, not {branch} "
                        f"(move it away or remove it with: git worktree remove {slot})",
                        code="WORKSPACE_ERROR",
                    )
                return self._record(card, repo, slot, branch, "reused")
            self._move_aside(slot)
        g.git(repo, "worktree", "prune")
        if g.branch_exists(repo, branch):
            g.git(repo, "worktree", "add", slot, branch)
            return self._record(card, repo, slot, branch, "reattached")
        declared = project.base_ref or cfg.get("base_ref")
        base, base_commit = probe_base(repo, card, str(declared) if declared else None)
        g.git(repo, "worktree", "add", "-b", branch, slot, base_commit)
        return self._record(card, repo, slot, branch, "created", base, base_commit)

    def _move_aside(self, slot: str) -> None:
        stamp = self.store.clock.now_ms()
        dest = f"{slot}.orphan-{stamp}"
        n = 1
        while os.path.lexists(dest):
            dest = f"{slot}.orphan-{stamp}-{n}"
            n += 1
        shutil.move(slot, dest)
        self.warn(f"moved a non-checkout directory out of the lane slot: {slot} -> {dest}")

    def _record(
        self,
        card: Card,
        repo: str,
        slot: str,
        branch: str,
        how: str,
        base: str | None = None,
        base_commit: str | None = None,
    ) -> Lane:
        if base is None or base_commit is None:
            with self.store.read() as tx:
                old = lane_for(tx, card.id, card.delivery_round)
            if old is not None:
                base, base_commit = old.base, old.base_commit
            else:  # an unrecorded branch: its fork point from the current branch
                base = g.current_branch(repo) or "HEAD"
                mb = g.git(repo, "merge-base", base, f"refs/heads/{branch}", check=False)
                base_commit = mb.out.strip() if mb.ok else g.commit_of(repo, branch)
        path = os.path.realpath(slot)
        with self.store.write() as tx:
            return record_lane(tx, card, repo, path, branch, base, base_commit, how)
