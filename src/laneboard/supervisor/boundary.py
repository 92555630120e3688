"""Defence in depth around every turn, and loud failure when a role cannot run.

Before a turn the pool takes a ``fingerprint`` of the user's checkout — HEAD, every ref
outside laneboard's ``lane/`` namespace, the index's entries (not its stat cache, which git
rewrites at will), ``git status``, the repository's config and hooks — and after the turn
takes it again; looking never writes the checkout's index. Any difference that laneboard's own
landings do not explain (the checked-out branch moving only through merge commits recorded
by ``lane.landed`` events during the turn) is a boundary violation: the card is held with
``BOUNDARY_VIOLATION``, an alert is raised (the notifier sends it to ``--notify``), the
evidence — both fingerprints and what differs — is kept on the card, and the card is never
landed. (In laneboard's own clone of a project's remote, whose base branch, working tree
and remote-tracking refs follow the remote at every fetch, the config, the hooks and the
other refs are compared.) Then the lane's own changes are compared with the card's ``allowed_paths`` after
every turn, not only at delivery: a change outside them holds the card (cycle ``scope``,
``outside_allowed_paths``, naming the paths), with the lane kept as it is for a human.

A role for which no agent kind is available is said once per ``NO_KIND_EVERY_S`` in the
log, raised as an alert, and shown by ``lb status`` and ``lb doctor``.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Card, CommentKind
from laneboard.domain.roles import Role
from laneboard.store import boundary_sql
from laneboard.supervisor.alerts import raise_alert
from laneboard.supervisor.holds import place_hold
from laneboard.workspace import git as g

if TYPE_CHECKING:
    from laneboard.supervisor.runtime import Runtime

NO_KIND_EVERY_S = 600.0
_said: dict[tuple[int, str], float] = {}
_said_lock = threading.Lock()


@dataclass(frozen=True)
class Fingerprint:
    head: str
    branch: str | None
    refs: tuple[tuple[str, str], ...]
    index: str
    status: tuple[str, ...]
    config: str
    hooks: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "branch": self.branch,
            "refs": dict(self.refs),
            "index": self.index,
            "status": list(self.status),
            "config": self.config,
            "hooks": self.hooks,
        }


def _digest_file(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return "-"


def _digest_tree(root: str) -> str:
    h = hashlib.sha256()
    if os.path.isdir(root):
        for base, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(base, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                h.update(_digest_file(path).encode())
    return h.hexdigest()


def _index_entries(repo: str) -> str:
    """A digest of the index's entries — each path's mode, object, stage and tag (the
    tag shows an entry hidden from status, ``assume-unchanged`` or ``skip-worktree``) —
    not of the file's bytes: git rewrites those whenever it refreshes its stat cache, the
    same entries in other bytes. Paths are quoted (``core.quotePath``): any name reads as
    ASCII text, whatever its bytes."""
    got = g.git(repo, "-c", "core.quotePath=true", "--no-optional-locks", "ls-files",
                "--stage", "-v")  # fmt: skip
    return hashlib.sha256(got.out.encode()).hexdigest()


def fingerprint(repo: str) -> Fingerprint:
    """The state of the user's checkout that no agent may change."""
    from laneboard.workspace.remote import is_clone

    gitdir = g.common_dir(repo)
    refs = g.git(repo, "for-each-ref", "--format=%(refname) %(objectname)").out.splitlines()
    kept = tuple(
        (name, obj)
        for name, _, obj in (line.partition(" ") for line in refs)
        if not name.startswith("refs/heads/lane/")
    )
    head = g.git(repo, "rev-parse", "--verify", "--quiet", "HEAD", check=False).out.strip()
    if is_clone(repo):  # laneboard's clone of a remote: its base follows the remote's
        branch = g.current_branch(repo)
        moving = ("refs/remotes/", f"refs/heads/{branch}")
        return Fingerprint(
            head="",
            branch=branch,
            refs=tuple((n, o) for n, o in kept if not n.startswith(moving)),
            index="",
            status=(),
            config=_digest_file(os.path.join(gitdir, "config")),
            hooks=_digest_tree(os.path.join(gitdir, "hooks")),
        )
    return Fingerprint(
        head=head,
        branch=g.current_branch(repo),
        refs=kept,
        index=_index_entries(repo),
        status=tuple(g.status_lines(repo)),
        config=_digest_file(os.path.join(gitdir, "config")),
        hooks=_digest_tree(os.path.join(gitdir, "hooks")),
    )


def differences(before: Fingerprint, after: Fingerprint) -> list[str]:
    out = []
    for name in ("head", "branch", "index", "config", "hooks"):
        if getattr(before, name) != getattr(after, name):
            out.append(name)
    if before.refs != after.refs:
        changed = sorted(set(before.refs) ^ set(after.refs))
        out.append("refs " + ", ".join(sorted({n for n, _ in changed})))
    if before.status != after.status:
        out.append("status")
    return out


def landed_commits(rt: Runtime, since_event: int) -> set[str]:
    with rt.store.autocommit() as tx:
        return boundary_sql.landed_merges(tx, since_event)


def explained_by_landings(
    repo: str, before: Fingerprint, after: Fingerprint, merges: set[str]
) -> bool:
    """The branch moved only through laneboard's own landing merges (and nothing else did)."""
    if not merges or before.branch is None or before.branch != after.branch:
        return False
    rest = {"index", f"refs refs/heads/{before.branch}", "head"}
    if not set(differences(before, after)) <= rest or before.status != after.status:
        return False
    commit = after.head
    for _ in range(len(merges)):
        if commit not in merges:
            return False
        parent = g.git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^1", check=False)
        commit = parent.out.strip()
        if commit == before.head:
            return True
    return False


def check_after_turn(
    rt: Runtime, card: Card, repo: str | None, before: Fingerprint | None, since_event: int
) -> list[str]:
    """Compare the checkout with its state before the turn; hold the card on a violation.
    Returns what differs (empty: nothing did)."""
    if repo is None or before is None:
        return []
    from laneboard.workspace.land import LANDING

    with LANDING:  # a landing running now finishes first: its merge is then explained
        try:
            after = fingerprint(repo)
        except g.GitError as exc:
            rt.log.warn(
                "boundary", f"cannot read the checkout after the turn: {exc}", card=card.ref
            )
            return []
        merges = landed_commits(rt, since_event)
    diff = differences(before, after)
    if not diff or explained_by_landings(repo, before, after, merges):
        return []
    hold_violation(rt, card, repo, diff, before, after)
    return diff


def check_lane_scope(rt: Runtime, card: Card) -> list[str]:
    """After a turn: the lane's changes lie within ``allowed_paths`` (and no symlink leaves
    the repository); otherwise the card is held. Returns the paths outside."""
    from laneboard.workspace import lanes
    from laneboard.workspace.verify import changed_paths, scope_violations

    with rt.store.autocommit() as tx:
        lane = lanes.lane_for(tx, card.id, card.delivery_round)
    if lane is None or lane.state == "cleaned" or not os.path.isdir(lane.path):
        return []
    try:
        bad = scope_violations(lane.path, changed_paths(lane.path, lane.base_commit),
                               card.allowed_paths)  # fmt: skip
    except g.GitError as exc:
        rt.log.warn("boundary", f"cannot read the lane after the turn: {exc}", card=card.ref)
        return []
    if bad:
        hold_out_of_scope(rt, card, lane.path, bad)
    return bad


def hold_out_of_scope(rt: Runtime, card: Card, lane: str, bad: list[str]) -> None:
    shown = ", ".join(bad[:20]) + (" …" if len(bad) > 20 else "")
    scope = ", ".join(card.allowed_paths) or "the repository"
    reason = (
        f"OUTSIDE_ALLOWED_PATHS: the turn changed paths outside {card.ref}'s allowed paths "
        f"({scope}): {shown}"
    )
    with rt.store.write() as tx:
        current = tx.card(card.id)
        if current is None:
            return
        held = place_hold(rt, tx, current, "scope", 1, reason + ".", reason="outside_allowed_paths")
        if held.version == current.version:
            return  # no longer holdable (landed, canceled, already held)
        evidence = {"lane": lane, "allowed_paths": list(card.allowed_paths), "outside": bad}
        tx.insert_comment(
            card.id,
            CommentKind.FINDING.value,
            f"{reason}. laneboard does not land this card; the lane is kept as it is. "
            f"Evidence: {boundary_sql.dumps(evidence)}",
            rt.actor,
        )
    rt.log.error("boundary", reason, card=card.ref)


def hold_violation(
    rt: Runtime, card: Card, repo: str, diff: list[str], before: Fingerprint, after: Fingerprint
) -> None:
    what = ", ".join(diff)
    reason = f"BOUNDARY_VIOLATION: the turn changed the user's checkout {repo} ({what})"
    evidence = {"repo": repo, "changed": diff, "before": before.to_dict(), "after": after.to_dict()}
    with rt.store.write() as tx:
        current = tx.card(card.id)
        if current is None:
            return
        held = place_hold(
            rt, tx, current, "boundary", 1, reason, reason="boundary_violation", announce=False
        )
        tx.update_card(
            held.id,
            held.version,
            {"meta": {**held.meta, "boundary_violation_round": card.delivery_round}},
        )
        tx.insert_comment(
            card.id,
            CommentKind.FINDING.value,
            f"{reason}. laneboard does not land this card. Evidence (before and after the "
            f"turn): {boundary_sql.dumps(evidence)}",
            rt.actor,
        )
        raise_alert(  # this hold's one alert: the notifier sends it to --notify
            tx,
            f"boundary_violation|{card.ref}|r{card.delivery_round}",
            "violation",
            "critical",
            {
                "row": "boundary_violation",
                "card": card.ref,
                "cycle": "boundary",
                "reason": "boundary_violation",
                "detail": reason,
                "repo": repo,
                "changed": diff,
            },
            actor=rt.actor,
            card_id=card.id,
            project_id=card.project_id,
        )
    rt.log.error("boundary", reason, card=card.ref)


def notify(rt: Runtime, body: dict[str, Any]) -> None:
    """Send a body that is not an alert event straight to the notify command (alert
    events reach it through ``notifier.flush``)."""
    settings = getattr(rt, "patrol_settings", None)
    command = getattr(settings, "notify_command", None)
    if command:
        from laneboard.supervisor.patrol import notify as send

        err = send(str(command), body, rt.config.time.subprocess_bound)
        if err:
            rt.log.error("boundary", err)


def no_kind(rt: Runtime, role: Role, detail: str) -> None:
    """No available agent kind runs ``role``: a log line at most every 10 minutes and an
    alert (de-duplicated by the ledger) to the event stream and ``--notify``."""
    key = (id(rt), role.id)
    now = time.monotonic()
    with _said_lock:
        if now - _said.get(key, -NO_KIND_EVERY_S) < NO_KIND_EVERY_S:
            return
        _said[key] = now
    message = f"role {role.id} cannot run: {detail}; this machine claims none of its cards"
    rt.log.error("agents", message, role=role.id)
    body = {"row": "agent_unavailable", "role": role.id, "detail": detail}
    with rt.store.write() as tx:  # the notifier sends it to --notify
        raise_alert(tx, f"agent_unavailable|{role.id}", detail, "warning", body, actor=rt.actor)


# -- checks inside the boundary ------------------------------------------------------------


def _original(rt: Runtime, card: Card) -> Card:
    from laneboard.supervisor.workflow import review_of

    oid = review_of(card)
    return rt.card(oid) if oid is not None else card


def with_checks(
    rt: Runtime, role: Role, card: Card, settings: Mapping[str, Any] | None = None
) -> Role:
    """The card's ``checks`` and the project's review gate join the commands a worker or a
    reviewer may run (for a review card: those of the card it reviews). ``settings``: the
    board settings of the card's project, when the caller has read them."""
    if role.lane == "director":
        return role
    from laneboard.workspace.verify import gate_commands

    original = _original(rt, card)
    if settings is not None and original.project_id == card.project_id:
        cfg = dict(settings)
    else:
        with rt.store.autocommit() as tx:
            cfg = tx.project_config(original.project_id)
    have = list(role.extra.get("check_commands") or ())
    extra = [c for c in gate_commands(original, cfg) if c not in have]
    if not extra:
        return role
    return replace(role, extra={**role.extra, "check_commands": [*have, *extra]})


def review_evidence(rt: Runtime, card: Card) -> str:
    """For a reviewer's prompt: the runtime's own check results for the round it reviews,
    also recorded on the review card (``meta.review_evidence``) beside the verdict."""
    original = _original(rt, card)
    if original.id == card.id:
        return ""
    with rt.store.autocommit() as tx:
        rep = tx.report(original.id, original.delivery_round)
    items = [e.to_dict() for e in (rep.evidence if rep else [])]
    given = {"card": original.ref, "round": original.delivery_round, "evidence": items}
    with rt.store.write() as tx:
        fresh = tx.card(card.id)
        if fresh is not None and fresh.meta.get("review_evidence") != given:
            tx.update_card(
                fresh.id, fresh.version, {"meta": {**fresh.meta, "review_evidence": given}}
            )
    if not items:
        return f"\n\nThe runtime recorded no check results for {original.ref} round {original.delivery_round}."
    lines = [
        f"$ {e['command']}  → exit {e['exit_code']}"
        + (f" ({str(e.get('summary') or '').splitlines()[-1][:120]})" if e.get("summary") else "")
        for e in items[-12:]
    ]
    return (
        f"\n\nThe runtime's own check results for {original.ref} round "
        f"{original.delivery_round} (run by laneboard, not by the worker):\n" + "\n".join(lines)
    )
