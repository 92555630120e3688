"""Assignments of an orchestrated run: the rules the runtime holds the coordinator to.

A coordinator plans assignments; specialists do them. Every transition a model proposes
is one function here that returns the new records or raises a ``LaneboardError`` with a
stable code (the model sees the refusal verbatim). Nothing here does I/O: the board
loads the run's plan, calls these rules, and writes the result in one transaction.

Rules: each owned path has exactly one owner among the live assignments (a path overlaps
another when equal or when one is a directory of the other); owned paths stay inside the
goal's allowed paths; dependencies must already exist, so the graph stays acyclic, and
its depth is bounded; at most ``MAX_ROLES`` roles own assignments. A specialist accepts
each revision before reporting it; a report names its revision and an old one is refused.
Revising an assignment bumps it and, transitively, every assignment depending on it;
unrelated assignments keep their revision. Only verification (not a report) completes an
assignment, and only completed producers release their dependents.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from laneboard.domain.status import Status
from laneboard.errors import LaneboardError

MAX_ROLES = 16
MAX_ASSIGNMENTS = 64
COORDINATOR = "coordinator"
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


class AState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_INPUT = "waiting_for_input"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# the one table from assignment states to the status of the assignment's card
CARD_STATUS: dict[AState, Status] = {
    AState.QUEUED: Status.TODO,
    AState.RUNNING: Status.IN_PROGRESS,
    AState.WAITING_FOR_INPUT: Status.AWAITING,
    AState.COMPLETED: Status.DONE,
    AState.FAILED: Status.BLOCKED,
    AState.CANCELLED: Status.CANCELED,
}
LIVE = frozenset({AState.QUEUED, AState.RUNNING, AState.WAITING_FOR_INPUT, AState.COMPLETED})
ACTIVE = frozenset({AState.RUNNING, AState.WAITING_FOR_INPUT})
RECOVER_DECISIONS = ("retry", "keep", "cancel")


@dataclass(frozen=True)
class Assignment:
    """One assignment at its current revision."""

    name: str  # the coordinator's id for it ("producer")
    owner: str  # the specialist role that does it
    brief: str
    paths: tuple[str, ...]
    deps: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    deadline_at: int | None = None
    revision: int = 1
    accepted: int = 0  # the revision its owner accepted (0: none yet)
    reported: int = 0  # the revision its owner reported (0: none yet)
    verified: int = 0  # the revision the runtime verified and integrated (0: none)
    state: AState = AState.QUEUED
    uncertain: bool = False  # interrupted mid-turn: needs an explicit recover
    checkpoint: str | None = None  # the checkpoint recorded at the current revision
    dispatched: int = 0  # the revision last dispatched to a turn (each once)
    detail: str = ""  # why it failed, or the last runtime note
    card_id: int | None = None
    evidence: tuple[dict[str, Any], ...] = field(default=())
    messages: tuple[str, ...] = ()  # the coordinator's updates, delivered with the next turn

    @property
    def card_status(self) -> Status:
        return CARD_STATUS[self.state]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "owner": self.owner,
            "brief": self.brief,
            "paths": list(self.paths),
            "deps": list(self.deps),
            "checks": list(self.checks),
            "deadline_at": self.deadline_at,
            "revision": self.revision,
            "accepted": self.accepted,
            "reported": self.reported,
            "verified": self.verified,
            "state": self.state.value,
            "uncertain": self.uncertain,
            "checkpoint": self.checkpoint,
            "dispatched": self.dispatched,
            "detail": self.detail,
            "card_id": self.card_id,
            "evidence": list(self.evidence),
            "messages": list(self.messages),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Assignment:
        return Assignment(
            name=str(d["name"]),
            owner=str(d["owner"]),
            brief=str(d.get("brief", "")),
            paths=tuple(d.get("paths") or ()),
            deps=tuple(d.get("deps") or ()),
            checks=tuple(d.get("checks") or ()),
            deadline_at=d.get("deadline_at"),
            revision=int(d.get("revision", 1)),
            accepted=int(d.get("accepted", 0)),
            reported=int(d.get("reported", 0)),
            verified=int(d.get("verified", 0)),
            state=AState(d.get("state", "queued")),
            uncertain=bool(d.get("uncertain", False)),
            checkpoint=d.get("checkpoint"),
            dispatched=int(d.get("dispatched", 0)),
            detail=str(d.get("detail", "")),
            card_id=d.get("card_id"),
            evidence=tuple(d.get("evidence") or ()),
            messages=tuple(d.get("messages") or ()),
        )


Plan = Mapping[str, Assignment]


def refuse(code: str, message: str, fix: str) -> LaneboardError:
    return LaneboardError(code, message, fix)


def check_name(name: str, what: str = "an assignment name") -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise refuse(
            "BAD_INPUT",
            f"{what} {name!r} is not a short lowercase name",
            "use 1-40 of a-z, 0-9 and '-', starting with a letter (e.g. producer)",
        )
    return name


def overlaps(a: str, b: str) -> bool:
    """True when one repository path is the other or lies under it."""
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def inside(path: str, allowed: Iterable[str]) -> bool:
    path = path.rstrip("/")
    return any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in allowed)


def get(plan: Plan, name: str) -> Assignment:
    a = plan.get(name)
    if a is None:
        known = ", ".join(sorted(plan)) or "none yet"
        raise refuse(
            "NOT_FOUND", f"no assignment {name!r} in this run", f"known assignments: {known}"
        )
    return a


def depth(plan: Plan, name: str) -> int:
    """The length of the longest dependency chain ending at ``name`` (1: no deps)."""
    memo: dict[str, int] = {}

    def walk(n: str) -> int:
        if n not in memo:
            memo[n] = 1 + max((walk(d) for d in plan[n].deps if d in plan), default=0)
        return memo[n]

    return walk(name)


def dependents(plan: Plan, name: str) -> list[str]:
    """Every assignment that depends on ``name``, transitively, in plan order."""
    found: set[str] = set()
    stack = [name]
    while stack:
        n = stack.pop()
        for other in plan.values():
            if n in other.deps and other.name not in found:
                found.add(other.name)
                stack.append(other.name)
    return [n for n in plan if n in found]


def check_paths(plan: Plan, new: Assignment, allowed: Iterable[str]) -> None:
    allowed = list(allowed)
    if not new.paths:
        raise refuse("BAD_INPUT", f"assignment {new.name!r} owns no path", "give --path PATH")
    for p in new.paths:
        if allowed and not inside(p, allowed):
            raise refuse(
                "OUT_OF_SCOPE",
                f"path {p!r} is outside the goal's allowed paths ({', '.join(allowed)})",
                "own only paths inside the goal's --allow-path list",
            )
    for other in plan.values():
        if other.name == new.name or other.state not in LIVE:
            continue
        for p in new.paths:
            for q in other.paths:
                if overlaps(p, q):
                    raise refuse(
                        "PATH_OVERLAP",
                        f"path {p!r} overlaps {q!r}, owned by assignment {other.name!r}",
                        "each path has exactly one owner: revise that assignment instead",
                    )


def check_deps(plan: Plan, new: Assignment, max_depth: int) -> None:
    for d in new.deps:
        if d == new.name or d not in plan:
            raise refuse(
                "UNKNOWN_DEPENDENCY",
                f"assignment {new.name!r} depends on {d!r}, which does not exist yet",
                "assign the producer first; dependencies must already exist",
            )
        if plan[d].state is AState.CANCELLED:
            raise refuse(
                "UNKNOWN_DEPENDENCY",
                f"assignment {new.name!r} depends on {d!r}, which is cancelled",
                "depend on a live assignment",
            )
    got = depth({**plan, new.name: new}, new.name)
    if got > max_depth:
        raise refuse(
            "DEPTH_LIMIT",
            f"assignment {new.name!r} would be at dependency depth {got} (limit {max_depth})",
            "flatten the plan or raise --max-depth",
        )


def assign(
    plan: Plan, new: Assignment, *, allowed: Iterable[str] = (), max_depth: int = 8
) -> Assignment:
    """A new assignment (revision 1, queued), checked against the plan."""
    check_name(new.name)
    check_name(new.owner, "a specialist role")
    if new.owner == COORDINATOR:
        raise refuse("BAD_INPUT", "the coordinator owns no assignment", "name a specialist role")
    old = plan.get(new.name)
    if old is not None and old.state in LIVE:
        raise refuse(
            "DUPLICATE_ASSIGNMENT",
            f"assignment {new.name!r} already exists (revision {old.revision}, {old.state})",
            "revise it instead, or pick another name",
        )
    if old is None and len(plan) >= MAX_ASSIGNMENTS:
        raise refuse(
            "PLAN_LIMIT", f"the plan already has {MAX_ASSIGNMENTS} assignments", "revise instead"
        )
    roles = {a.owner for a in plan.values() if a.state in LIVE} | {new.owner}
    if len(roles) + 1 > MAX_ROLES:  # the coordinator is a role too
        raise refuse(
            "ROLE_LIMIT",
            f"a run has at most {MAX_ROLES} roles; {new.owner!r} would be one more",
            "give this work to an existing specialist",
        )
    check_paths(plan, new, allowed)
    check_deps(plan, new, max_depth)
    revision = old.revision + 1 if old is not None else 1
    return replace(new, revision=revision, state=AState.QUEUED, accepted=0, reported=0,
                   verified=0, uncertain=False, checkpoint=None, detail="")  # fmt: skip


def _needs_checkpoint(a: Assignment, active: Iterable[str]) -> None:
    if a.name in set(active):
        raise refuse(
            "TURN_ACTIVE",
            f"assignment {a.name!r} has an active turn",
            "wait for its turn to end (its owner records a checkpoint first), then retry",
        )
    if a.state in ACTIVE and a.accepted == a.revision and a.checkpoint is None:
        raise refuse(
            "CHECKPOINT_REQUIRED",
            f"assignment {a.name!r} is active at revision {a.revision} with no checkpoint",
            "ask its owner to record a checkpoint, then revise",
        )


def revise(
    plan: Plan,
    name: str,
    changes: Mapping[str, Any],
    *,
    active: Iterable[str] = (),
    allowed: Iterable[str] = (),
    max_depth: int = 8,
) -> dict[str, Assignment]:
    """The assignments a revision changes: ``name`` and its dependents, each bumped."""
    a = get(plan, name)
    if a.state is AState.CANCELLED:
        raise refuse("ILLEGAL_TRANSITION", f"assignment {name!r} is cancelled", "assign anew")
    active = list(active)
    touched = [name, *dependents(plan, name)]
    for n in touched:
        _needs_checkpoint(plan[n], active)
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()}
    unknown = set(fields) - {"brief", "paths", "deps", "checks", "deadline_at"}
    if unknown:
        raise refuse("BAD_INPUT", f"cannot revise {', '.join(sorted(unknown))}", "change "
                     "brief, paths, deps, checks or deadline_at")  # fmt: skip
    new = replace(a, **fields)
    if "paths" in fields:
        check_paths(plan, new, allowed)
    if "deps" in fields:
        check_deps({k: v for k, v in plan.items() if k not in touched[1:]}, new, max_depth)
    out: dict[str, Assignment] = {}
    for n in touched:
        base = new if n == name else plan[n]
        out[n] = replace(base, revision=base.revision + 1, state=AState.QUEUED, accepted=0,
                         reported=0, uncertain=False, checkpoint=None, detail="")  # fmt: skip
    return out


def cancel(plan: Plan, name: str, *, active: Iterable[str] = ()) -> dict[str, Assignment]:
    """Cancel ``name``; its dependents go back to the queue to be revised or cancelled."""
    a = get(plan, name)
    if a.state is AState.CANCELLED:
        raise refuse("ILLEGAL_TRANSITION", f"assignment {name!r} is already cancelled", "")
    _needs_checkpoint(a, active)
    return {name: replace(a, state=AState.CANCELLED, uncertain=False)}


def _own(a: Assignment, role: str, revision: int, verb: str) -> None:
    if role != a.owner:
        raise refuse(
            "FORBIDDEN",
            f"{role} may not {verb} assignment {a.name!r}, owned by {a.owner}",
            "act only on your own assignment",
        )
    if a.state is AState.CANCELLED or a.state is AState.FAILED:
        raise refuse("ILLEGAL_TRANSITION", f"assignment {a.name!r} is {a.state}", "stop work")
    if revision != a.revision:
        raise refuse(
            "STALE_REVISION",
            f"assignment {a.name!r} is at revision {a.revision}, not {revision}",
            f"inspect it and accept revision {a.revision}",
        )


def accept(a: Assignment, role: str, revision: int) -> Assignment:
    _own(a, role, revision, "accept")
    if a.state is AState.COMPLETED:
        raise refuse("ILLEGAL_TRANSITION", f"assignment {a.name!r} is completed", "nothing to do")
    return replace(a, accepted=revision, state=AState.RUNNING)


def checkpoint(a: Assignment, role: str, revision: int, note: str) -> Assignment:
    _own(a, role, revision, "checkpoint")
    return replace(a, checkpoint=note or "checkpoint")


def report(a: Assignment, role: str, revision: int) -> Assignment:
    """Record a report; the assignment stays running until the runtime verifies it."""
    _own(a, role, revision, "report")
    if a.accepted != a.revision:
        raise refuse(
            "NOT_ACCEPTED",
            f"revision {a.revision} of assignment {a.name!r} was not accepted",
            f"accept revision {a.revision} before reporting",
        )
    if a.state is AState.COMPLETED:
        raise refuse("ILLEGAL_TRANSITION", f"assignment {a.name!r} is completed", "nothing to do")
    return replace(a, reported=revision, state=AState.RUNNING)


def fail(a: Assignment, role: str, revision: int, why: str) -> Assignment:
    _own(a, role, revision, "fail")
    return replace(a, state=AState.FAILED, detail=why)


def verified(a: Assignment, revision: int, evidence: Iterable[dict[str, Any]]) -> Assignment:
    """The runtime's verified completion of ``revision`` (only the current one counts)."""
    if revision != a.revision or a.reported != revision:
        raise refuse(
            "STALE_REVISION",
            f"evidence for revision {revision} of {a.name!r} is not its reported revision "
            f"{a.revision}",
            "older results stay as unverified evidence",
        )
    return replace(a, verified=revision, state=AState.COMPLETED, evidence=tuple(evidence))


def rejected(a: Assignment, revision: int, why: str) -> Assignment:
    """Verification refused the report: the owner may fix it in the same revision."""
    if revision != a.revision:
        return a
    return replace(a, reported=0, state=AState.RUNNING, detail=why)


def recover(a: Assignment, decision: str) -> Assignment:
    """The coordinator's decision on interrupted work: retry, keep, or cancel."""
    if not a.uncertain:
        raise refuse(
            "ILLEGAL_TRANSITION",
            f"assignment {a.name!r} is not uncertain",
            "recover applies only to work interrupted mid-turn",
        )
    if decision == "retry":  # a fresh revision: the interrupted turn is never replayed
        return replace(a, uncertain=False, revision=a.revision + 1, state=AState.QUEUED,
                       accepted=0, reported=0, checkpoint=None)  # fmt: skip
    if decision == "keep":  # its effects so far are its report, verified as any other
        return replace(a, uncertain=False, accepted=a.revision, reported=a.revision)
    if decision == "cancel":
        return replace(a, uncertain=False, state=AState.CANCELLED)
    raise refuse("BAD_INPUT", f"unknown recover decision {decision!r}", "use retry, keep or cancel")


MAX_MESSAGES = 16


def update(a: Assignment, note: str) -> Assignment:
    """Queue a coordinator's message for the assignment's owner: delivered with its next
    turn (work, an answer, or — once the assignment is completed — a read-only
    clarification turn)."""
    if a.state in (AState.CANCELLED, AState.FAILED):
        raise refuse("ILLEGAL_TRANSITION", f"assignment {a.name!r} is {a.state}", "assign anew")
    if len(a.messages) >= MAX_MESSAGES:
        raise refuse(
            "PLAN_LIMIT",
            f"assignment {a.name!r} already has {MAX_MESSAGES} undelivered messages",
            "wait for its next turn",
        )
    return replace(a, messages=(*a.messages, note))


def ready(plan: Plan) -> list[Assignment]:
    """Queued assignments whose dependencies are all verified, not yet dispatched."""
    out = []
    for a in plan.values():
        if a.state is not AState.QUEUED or a.uncertain or a.dispatched >= a.revision:
            continue
        if all(plan[d].state is AState.COMPLETED for d in a.deps if d in plan):
            out.append(a)
    return out


def check_complete(plan: Plan, active: Iterable[str]) -> None:
    """``complete`` is accepted only when every live assignment is verified and idle."""
    busy = sorted(set(active))
    if busy:
        raise refuse(
            "TURN_ACTIVE",
            f"specialist turns are active: {', '.join(busy)}",
            "wait for them to end, then complete",
        )
    pending = [
        f"{a.name} (revision {a.revision}, {a.state}{', uncertain' if a.uncertain else ''})"
        for a in plan.values()
        if a.state is not AState.CANCELLED
        and (a.state is not AState.COMPLETED or a.verified != a.revision)
    ]
    if pending:
        raise refuse(
            "UNVERIFIED_ASSIGNMENTS",
            f"not every assignment is verified: {', '.join(pending)}",
            "wait for verification, or revise or cancel the rest",
        )
    if not any(a.state is AState.COMPLETED for a in plan.values()):
        raise refuse("UNVERIFIED_ASSIGNMENTS", "the plan has no verified assignment", "assign work")
