"""The lane admitter: the ``Admitter`` that gives each card of a git project its lane.

It probes the base (``lanes.probe_base``, or the remote's for a project with a remote),
makes the lane's checkout (``lanes.make_lane``) and records it (``lanes.record_lane``);
a project with a remote has its lanes made in this machine's own clone of it. A card
outside a git project, or a project with lanes turned off, runs in the project's
directory as it is.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Card, Project
from laneboard.errors import LaneboardError
from laneboard.store import Store
from laneboard.store.tx import Tx
from laneboard.workspace import git as g
from laneboard.workspace import remote as rm
from laneboard.workspace.admit import AdmissionError, project_dir
from laneboard.workspace.lanes import (
    LANE_PREFIX,
    WORKTREES,
    Lane,
    conflict_to_resolve,
    delivered_commit,
    drop_lane_record,
    holds_nothing_of_its_own,
    lane_for,
    lane_name,
    make_lane,
    probe_base,
    probe_remote_base,
    record_lane,
)

if TYPE_CHECKING:
    from laneboard.board.service import Board

log = logging.getLogger("laneboard.lanes")


class LaneAdmitter:
    """The ``Admitter`` that gives every card in a git project its own lane; a project with
    a remote has its lanes made in this machine's clone of it (under ``clones``)."""

    CHECKOUT_TTL_S = 2.0  # one poll pass admits several cards of a project: ask git once

    def __init__(
        self,
        board: Board,
        *,
        warn: Callable[[str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        clones: str | None = None,
        machine: str | None = None,
    ) -> None:
        self.board = board
        self.clones = clones
        self.machine = machine or rm.this_machine()  # named in the lanes it records
        self._mine: dict[int, Lane] = {}  # card id -> the lane admitted here (a remote's)
        self.store: Store = board.store
        self.warn = warn or log.warning
        self._warned: set[str] = set()
        self._monotonic = monotonic
        self._checkouts: dict[str, tuple[float, str | None]] = {}
        self._stored: Mapping[int, Mapping[str, Any]] = {}  # one poll pass's board settings
        self._read_at: float | None = None  # when that pass had read its cards (monotonic)

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
        if project.remote:
            return self._admit_remote(card, project)
        path = project_dir(project)
        cfg = self.settings(project)
        if str(cfg.get("workspace", "lanes")) == "shared":
            self._warn_shared(card, project)
            return path
        try:
            repo = self.primary_checkout(path)
            if repo is None:
                return path  # not a git project: the card runs in place
            lane = self._lane(card, project, repo, cfg)
        except g.GitError as exc:
            raise AdmissionError(str(exc), code="WORKSPACE_ERROR") from None
        except OSError as exc:
            raise AdmissionError(
                f"cannot prepare the lane: {exc}", code="WORKSPACE_ERROR"
            ) from None
        target = lane.target_dir(path)
        os.makedirs(target, exist_ok=True)
        return target

    def _admit_remote(self, card: Card, project: Project) -> str:
        """A lane in this machine's clone of the remote, from the remote's base."""
        clone = rm.clone_dir(self.clones, project)
        repo = self._clone(project, clone, self._read_at)
        try:
            cfg = self.settings(replace(project, path=repo))  # its file, as the remote has it
            lane = self._lane(card, project, repo, cfg, remote=True)
        except g.GitError as exc:
            raise AdmissionError(
                f"project {project.key}'s remote {project.remote}: {exc}", code="WORKSPACE_ERROR"
            ) from None
        except OSError as exc:
            raise AdmissionError(
                f"cannot prepare the lane: {exc}", code="WORKSPACE_ERROR"
            ) from None
        return lane.path

    def admit_review(self, review: Card, project: Project, reviewed: Lane) -> str:
        """A review of a lane another machine ran, on this machine: a lane of the review card
        in this machine's clone, at the round's verified commit as pushed to the remote."""
        repo = self._clone(project, rm.clone_dir(self.clones, project), None)
        try:
            commit = delivered_commit(self.store, reviewed.card_id, reviewed.round)
            if commit is None and g.resolves(repo, rm.tracking(reviewed.branch)):
                commit = g.commit_of(repo, rm.tracking(reviewed.branch))
            if commit is None or not g.resolves(repo, commit):
                raise AdmissionError(
                    f"{reviewed.branch} is not on the remote {project.remote} yet",
                    code="WORKSPACE_REVIEW_TARGET_MISSING",
                )
            name = lane_name(review.ref, review.delivery_round)
            branch, slot = LANE_PREFIX + name, os.path.join(repo, WORKTREES, name)
            g.ensure_excluded(repo)
            os.makedirs(os.path.join(repo, WORKTREES), exist_ok=True)
            reuse = os.path.lexists(slot) and g.is_checkout(slot) and g.resolves(slot, "HEAD")
            if reuse and g.commit_of(slot, "HEAD") == commit:
                return self._record(review, repo, slot, branch, "reused",
                                    reviewed.branch, commit).path  # fmt: skip
            if os.path.lexists(slot):
                self._move_aside(slot)
            make_lane(repo, slot, branch, commit)
            return self._record(review, repo, slot, branch, "review", reviewed.branch, commit).path
        except g.GitError as exc:
            raise AdmissionError(
                f"project {project.key}'s remote {project.remote}: {exc}", code="WORKSPACE_ERROR"
            ) from None

    def _clone(self, project: Project, clone: str, read_at: float | None) -> str:
        """This machine's clone of the project's remote, fetched (``remote.ensure_clone``)
        unless a fetch started after ``read_at`` (None: fetched now).
        A remote that cannot be cloned or fetched, or has no base to start from, is the
        project's failure, not a card's: it is not counted toward any card's bound."""
        try:
            declared = self.settings(replace(project, path=clone)).get("base_ref")
            return rm.ensure_clone(
                self.clones, project, str(declared) if declared else None, fetched_since=read_at
            )
        except g.GitError as exc:
            raise AdmissionError(
                f"project {project.key}'s remote {project.remote}: {exc}",
                card_scoped=False,
                code="WORKSPACE_ERROR",
                remote=True,
            ) from None
        except OSError as exc:
            raise AdmissionError(
                f"project {project.key}'s clone {clone}: {exc}",
                card_scoped=False,
                code="WORKSPACE_ERROR",
            ) from None

    @contextmanager
    def within_pass(
        self, stored: Mapping[int, Mapping[str, Any]], read_at: float
    ) -> Iterator[None]:
        """Admissions of one poll pass: a project's board settings come from ``stored`` —
        the pass's one read of every project — rather than a read per card, and a remote
        fetched since ``read_at`` (``time.monotonic()`` once the pass had read its ready
        cards) is not fetched again.

        Whatever a card read then as ready needs from the remote was pushed before that
        read: a dependency's landing, before the dependency was done; an earlier round's
        lane branch, before that round was delivered; the round a conflict round merges
        in, before the conflict was recorded; a person's push, before the card was made. A
        fetch that started after the read holds it all; an older one may not, however
        recent. Admissions outside a pass always fetch."""
        was = self._stored, self._read_at
        self._stored, self._read_at = stored, read_at
        try:
            yield
        finally:
            self._stored, self._read_at = was

    def settings(self, project: Project) -> dict[str, Any]:
        """The project's resolved settings; a bad project file defers its cards uncounted."""
        from laneboard.config import effective_project_config

        stored = self._stored.get(project.id)
        try:
            if stored is None:
                stored = self.board.project_config(project.id)
            return effective_project_config(project, stored)
        except LaneboardError as err:
            raise AdmissionError(err.line(), card_scoped=False, code=err.code) from None

    def _warn_shared(self, card: Card, project: Project) -> None:
        path = os.path.realpath(str(project.path))
        if path in self._warned:
            return
        with self.store.read() as tx:
            others = tx.count_other_in_progress(project.id, card.id)
        if int(others or 0) > 0:
            self._warned.add(path)
            self.warn(
                f'project {project.key} uses workspace = "shared": parallel cards share '
                f"{path} ({card.ref} joins {int(others)} in progress)"
            )

    def _lane(
        self, card: Card, project: Project, repo: str, cfg: dict[str, Any], remote: bool = False
    ) -> Lane:
        name = lane_name(card.ref, card.delivery_round)
        branch = LANE_PREFIX + name
        slot = os.path.join(repo, WORKTREES, name)
        g.ensure_excluded(repo)
        os.makedirs(os.path.join(repo, WORKTREES), exist_ok=True)
        if remote and os.path.lexists(slot) and not self._ours(card, slot):
            self._drop_stale(repo, slot)
        if os.path.lexists(slot):
            checkout = os.path.isdir(slot) and not os.path.islink(slot) and g.is_checkout(slot)
            if checkout and g.resolves(slot, "HEAD"):
                have = g.current_branch(slot)
                if have != branch:
                    raise AdmissionError(
                        f"{slot} is a checkout of {have or 'a detached HEAD'}, not {branch} "
                        f"(move it away or remove it: rm -rf {slot})",
                        code="WORKSPACE_ERROR",
                    )
                return self._record(card, repo, slot, branch, "reused")
            self._move_aside(slot)  # not a checkout, or a lane half made (no commit yet)
        if g.branch_exists(repo, branch):
            make_lane(repo, slot, branch, g.commit_of(repo, f"refs/heads/{branch}"))
            return self._record(card, repo, slot, branch, "reattached")
        declared = cfg.get("base_ref")
        if remote and g.resolves(repo, rm.tracking(branch)):  # pushed from another machine
            make_lane(repo, slot, branch, g.commit_of(repo, rm.tracking(branch)))
            return self._record(card, repo, slot, branch, "reattached")
        if remote:
            target = rm.base_branch(repo, str(declared) if declared else None)
            base, base_commit = probe_remote_base(repo, card, target)
        else:
            base, base_commit = probe_base(repo, card, str(declared) if declared else None)
        merge = _conflicting_round(repo, card, base)
        make_lane(repo, slot, branch, base_commit)
        if merge is not None:
            # the conflicting round merged in, its conflicts left for the worker to resolve
            # (a lane shares the repository's objects, not its refs: merge the commit)
            g.git(slot, "merge", "--no-ff", "--no-commit", merge, check=False, identity=True)
        return self._record(card, repo, slot, branch, "created", base, base_commit)

    def _ours(self, card: Card, slot: str) -> bool:
        """The round's lane record names this slot (a slot it does not name was left by an
        admission here that another machine's claim won)."""
        with self.store.read() as tx:
            rec = lane_for(tx, card.id, card.delivery_round)
        return rec is not None and rec.path == os.path.realpath(slot)

    def _drop_stale(self, repo: str, slot: str) -> None:
        """Remove a leftover lane of a clone that holds nothing of its own (clean, every
        commit in the clone); anything else is moved aside, never lost."""
        if holds_nothing_of_its_own(repo, slot):
            shutil.rmtree(slot)
        else:
            self._move_aside(slot)

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
                base_commit = _fork_point(repo, slot, base)
        path = os.path.realpath(slot)
        me = self.machine
        if not rm.is_clone(repo):
            with self.store.write() as tx:
                return record_lane(tx, card, repo, path, branch, base, base_commit, how, me)
        with self.store.write() as tx:  # several machines may admit a card; one claims it
            fresh = tx.card(card.id, lock=True)  # after a claim committed, or before it
            old = lane_for(tx, card.id, card.delivery_round)
            if old is not None and old.path != path and fresh is not None and fresh.holder:
                got = replace(old, repo=repo, path=path, base=base, base_commit=base_commit,
                              machine=me)  # fmt: skip
            else:
                got = record_lane(tx, card, repo, path, branch, base, base_commit, how, me)
        self._mine[card.id] = got
        return got

    def own(self, tx: Tx, card: Card) -> None:
        """In the claim's transaction: the lane record of the claimed round names this
        machine's lane (another machine may have admitted the card after it)."""
        mine = self._mine.pop(card.id, None)
        if mine is None or mine.round != card.delivery_round:
            return
        cur = lane_for(tx, card.id, card.delivery_round)
        if cur is not None and (cur.path, cur.base_commit, cur.machine) != (
            mine.path,
            mine.base_commit,
            mine.machine,
        ):
            tx.refresh_lane(cur.id, mine.repo, mine.path, mine.branch, mine.base,
                            mine.base_commit, mine.machine)  # fmt: skip

    def abandon(self, card: Card) -> None:
        """After a claim this machine lost: the lane it admitted for the card's round in
        its clone of a remote is removed, when it holds nothing but what the admission
        made, and so is the lane record when it still names that lane (the machine that
        won records its own lane; a review it runs in the reviewed round's lane records
        none). Without this, every card another machine won would leave a checkout here
        that no pass ever cleans. A lane holding anything else is left as it is."""
        mine = self._mine.pop(card.id, None)
        if mine is None or mine.round != card.delivery_round or not rm.is_clone(mine.repo):
            return
        with self.store.write() as tx:
            cur = lane_for(tx, card.id, mine.round)
            if cur is not None and (cur.path, cur.machine) == (mine.path, self.machine):
                drop_lane_record(tx, cur, reason="claim lost")
        if holds_nothing_of_its_own(mine.repo, mine.path):
            shutil.rmtree(mine.path, ignore_errors=True)


def _fork_point(repo: str, slot: str, base: str) -> str:
    """Where the lane at ``slot`` left ``base`` of the user's repository, for a lane with no
    record (a process killed between making and recording it, or a branch left by hand).

    Asked in the lane: it reads the repository's objects (``make_lane``) and holds its own
    commits, which reach the repository's branches only with a delivery. Without a common
    commit, the lane's own head."""
    tip = g.commit_of(slot, "HEAD")
    mb = g.git(slot, "merge-base", tip, g.commit_of(repo, base), check=False)
    return mb.out.strip() if mb.ok and mb.out.strip() else tip


def _conflicting_round(repo: str, card: Card, base: str) -> str | None:
    """The commit a round resolving a landing conflict merges in (the round that conflicted
    with ``base``), or None. Refused when ``repo`` lacks it: the lane would silently start
    without that round's work."""
    resolve = conflict_to_resolve(card)
    if resolve is None or base != resolve.get("onto"):
        return None
    commit = str(resolve["lane_commit"])
    if not g.resolves(repo, commit):
        raise AdmissionError(
            f"round {resolve.get('from_round')} of {card.ref} ({commit[:12]}), which this "
            f"round merges in to resolve its landing conflict, is not in {repo}",
            code="WORKSPACE_ERROR",
        )
    return commit
