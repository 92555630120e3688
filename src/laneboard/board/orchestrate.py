"""Orchestrated runs on the board: the ``orchestrator_control`` verbs and what they read.

The coordinator (the run's coordinator card, or a person) may ``assign``, ``revise``,
``cancel``, ``recover``, ``answer``, ``update``, ``inspect`` and ``complete``; a specialist (a
credential scoped to one of its assignment cards) may ``accept``, ``checkpoint``,
``report``, ``fail`` and ``heartbeat`` the assignments its role owns, and ``inspect``.
Each verb loads the run's plan, applies the pure rule of ``domain.assignments`` and
writes the result — the assignment rows, their cards' statuses and one
``orchestration.<verb>`` event — in one transaction. A refusal writes nothing.

Assignments are cards of the run: their status follows ``assignments.CARD_STATUS``
(the runtime sets it; the card's own transition table does not apply to these cards).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from laneboard.board import inputs
from laneboard.board.service import Board
from laneboard.domain import assignments as asg
from laneboard.domain import budgets as bud
from laneboard.domain.assignments import COORDINATOR, Assignment, AState
from laneboard.domain.budgets import Budgets, Usage
from laneboard.domain.model import Actor, ActorKind, Card, CommentKind, system
from laneboard.errors import LaneboardError, bad_input
from laneboard.store.base import Row
from laneboard.store.tx import Tx

COORDINATOR_VERBS = ("assign", "revise", "cancel", "recover", "answer", "update", "complete")
SPECIALIST_VERBS = ("accept", "checkpoint", "report", "fail", "heartbeat")
VERBS = (*COORDINATOR_VERBS, *SPECIALIST_VERBS, "inspect")
PHASES = ("running", "completing", "publishing", "completed", "failed")
RUNTIME = system("orchestrate")
NOTE_LIMIT = 20_000


@dataclass(frozen=True)
class Orchestration:
    run_id: int
    project_id: int
    goal: str
    spec: dict[str, Any]
    budgets: Budgets
    usage: Usage
    start: dict[str, Any]
    phase: str
    reason: str | None
    result: dict[str, Any] | None
    integration_dir: str | None
    integration_head: str | None
    coordinator_card_id: int | None
    version: int

    @staticmethod
    def from_row(r: Row) -> Orchestration:
        return Orchestration(
            run_id=int(r["run_id"]),
            project_id=int(r["project_id"]),
            goal=r["goal"],
            spec=json.loads(r["spec"]),
            budgets=Budgets.from_dict(json.loads(r["budgets"])),
            usage=Usage.from_dict(json.loads(r["usage"])),
            start=json.loads(r["start"]),
            phase=r["phase"],
            reason=r["reason"],
            result=json.loads(r["result"]) if r["result"] else None,
            integration_dir=r["integration_dir"],
            integration_head=r["integration_head"],
            coordinator_card_id=r["coordinator_card_id"],
            version=int(r["version"]),
        )

    @property
    def allowed(self) -> list[str]:
        return list(self.spec.get("allow_paths") or ())

    @property
    def checks(self) -> list[str]:
        return list(self.spec.get("checks") or ())


def load(tx: Tx, run_id: int) -> Orchestration:
    row = tx.orchestration_row(run_id)
    if row is None:
        raise LaneboardError(
            "NOT_FOUND",
            f"run {run_id} is not an orchestrated run",
            "start one with lb orchestrate --goal …",
        )
    return Orchestration.from_row(row)


def plan_of(tx: Tx, run_id: int) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for r in tx.assignment_rows(run_id):
        a = Assignment.from_dict(json.loads(r["record"]))
        out[a.name] = replace(a, card_id=int(r["card_id"]))
    return out


def active_turns(tx: Tx, run_id: int) -> list[str]:
    """The assignments whose specialist turn is dispatched and not ended."""
    return sorted(
        {
            str(r["assignment"])
            for r in tx.turn_rows(run_id, "dispatched")
            if r["role"] != COORDINATOR and r["assignment"]
        }
    )


def budget_report(tx: Tx, run_id: int) -> dict[str, Any] | None:
    """Usage against each budget of an orchestrated run (None: not orchestrated)."""
    row = tx.orchestration_row(run_id)
    if row is None:
        return None
    o = Orchestration.from_row(row)
    plan = plan_of(tx, run_id)
    running = sum(1 for n in active_turns(tx, run_id) if n in plan
                  and plan[n].state is AState.RUNNING)  # fmt: skip
    return bud.report(o.budgets, o.usage, running)


class Orchestrations:
    """The orchestration service over one board."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self.store = board.store

    # -- reading -----------------------------------------------------------------------
    def get(self, run_id: int) -> Orchestration:
        with self.store.read() as tx:
            return load(tx, run_id)

    def plan(self, run_id: int) -> dict[str, Assignment]:
        with self.store.read() as tx:
            return plan_of(tx, run_id)

    def inspect(self, run_id: int, name: str | None = None) -> dict[str, Any]:
        with self.store.read() as tx:
            return self._inspect(tx, load(tx, run_id), name)

    def _inspect(self, tx: Tx, o: Orchestration, name: str | None) -> dict[str, Any]:
        plan = plan_of(tx, o.run_id)
        active = active_turns(tx, o.run_id)
        if name is not None:
            a = asg.get(plan, name)
            assert a.card_id is not None
            return {
                "run": o.run_id,
                "assignment": self._view(tx, a),
                "revisions": [_revision(r) for r in tx.revision_rows(a.card_id)],
                "questions": self._questions(tx, a.card_id),
            }
        return {
            "run": o.run_id,
            "goal": o.goal,
            "phase": o.phase,
            "reason": o.reason,
            "allow_paths": o.allowed,
            "checks": o.checks,
            "assignments": [self._view(tx, a) for a in plan.values()],
            "ready": [a.name for a in asg.ready(plan)],
            "active": active,
            "budgets": budget_report(tx, o.run_id),
            "result": o.result,
        }

    def _view(self, tx: Tx, a: Assignment) -> dict[str, Any]:
        out = a.to_dict()
        card = tx.card(a.card_id) if a.card_id is not None else None
        out["card"] = card.ref if card else None
        out["status"] = card.status.value if card else None
        return out

    @staticmethod
    def _questions(tx: Tx, card_id: int) -> list[dict[str, Any]]:
        return [
            {"id": c.id, "kind": c.kind.value, "author": c.author, "body": c.body}
            for c in tx.comments(card_id)
            if c.kind in (CommentKind.QUESTION, CommentKind.ANSWER)
        ]

    # -- who calls ---------------------------------------------------------------------
    def resolve(self, tx: Tx, actor: Actor, run: int | None) -> tuple[Orchestration, str]:
        """The run and the caller's role in it (``coordinator`` or a specialist role)."""
        if actor.kind is not ActorKind.AGENT:
            if run is None:
                raise bad_input("which run?", "pass --run RUN (lb run list shows them)")
            return load(tx, run), COORDINATOR
        card = tx.card(actor.card_id) if actor.card_id is not None else None
        if card is None or card.run_id is None:
            raise LaneboardError(
                "FORBIDDEN",
                "this credential belongs to no orchestrated run",
                "only the run's coordinator and specialists use orchestrator_control",
            )
        if run is not None and run != card.run_id:
            raise LaneboardError(
                "FORBIDDEN",
                f"this credential belongs to run {card.run_id}, not run {run}",
                "act only on your own run",
            )
        o = load(tx, card.run_id)
        if card.id == o.coordinator_card_id:
            return o, COORDINATOR
        row = tx.assignment_by_card(card.id)
        if row is None:
            raise LaneboardError(
                "FORBIDDEN", f"{card.ref} is not an assignment of run {o.run_id}", ""
            )
        return o, str(row["owner"])

    # -- the control tool --------------------------------------------------------------
    def control(self, actor: Actor, verb: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if verb not in VERBS:
            raise bad_input(f"unknown verb {verb!r}", f"use one of: {', '.join(VERBS)}")
        run = args.get("run")
        if verb == "inspect":
            with self.store.read() as tx:
                o, _role = self.resolve(tx, actor, run)
                return self._inspect(tx, o, args.get("assignment"))
        with self.store.write() as tx:
            o, role = self.resolve(tx, actor, run)
            if verb in COORDINATOR_VERBS and role != COORDINATOR:
                raise LaneboardError(
                    "FORBIDDEN",
                    f"{role} may not {verb}: only the coordinator plans",
                    f"a specialist may {', '.join(SPECIALIST_VERBS)} or inspect",
                )
            if verb in SPECIALIST_VERBS and role == COORDINATOR:
                raise LaneboardError(
                    "FORBIDDEN",
                    f"the coordinator may not {verb}: only an assignment's owner does",
                    "assign, revise, cancel, recover, answer, update, inspect or complete",
                )
            if o.phase not in ("running",) and verb != "heartbeat":
                raise LaneboardError(
                    "ILLEGAL_TRANSITION",
                    f"run {o.run_id} is {o.phase}; the plan is closed",
                    "inspect the run's result",
                )
            changed = getattr(self, f"_{verb}")(tx, o, role, args)
            self._write(tx, o, changed, actor, verb, args)
            names = list(changed)
            return {
                "run": o.run_id,
                "verb": verb,
                "changed": [self._view(tx, a) for a in plan_of(tx, o.run_id).values()
                            if a.name in names],
            }  # fmt: skip

    def _write(self, tx: Tx, o: Orchestration, changed: Mapping[str, Assignment], actor: Actor,
               verb: str, args: Mapping[str, Any]) -> None:  # fmt: skip
        before = plan_of(tx, o.run_id)
        for a in changed.values():
            old = before.get(a.name)
            if old is not None and old.card_id is not None and a.revision > old.revision:
                row = tx.revision_row(old.card_id, old.revision)
                if row is not None and row["state"] != "verified":  # unverified evidence
                    tx.put_revision(old.card_id, old.revision, {"state": "superseded"})
            put(tx, o, a)
        payload = {k: v for k, v in args.items() if k in ("assignment", "revision", "decision")}
        payload["assignments"] = {n: [a.revision, a.state.value] for n, a in changed.items()}
        tx.append_event(f"orchestration.{verb}", actor, project_id=o.project_id,
                        run_id=o.run_id, payload=payload)  # fmt: skip

    # -- coordinator verbs -------------------------------------------------------------
    def _assign(self, tx: Tx, o: Orchestration, _role: str, a: Mapping[str, Any]) -> Any:
        plan = plan_of(tx, o.run_id)
        name = asg.check_name(_need(a, "assignment"))
        paths = [inputs.repo_path(p) for p in a.get("paths") or ()]
        new = Assignment(
            name=name,
            owner=_need(a, "owner"),
            brief=inputs.text(_need(a, "brief"), "brief", limit=NOTE_LIMIT, multiline=True),
            paths=tuple(paths),
            deps=tuple(a.get("deps") or ()),
            checks=tuple(inputs.strings(a.get("checks") or (), "checks")),
            deadline_at=_deadline(tx, a.get("deadline_secs")),
        )
        made = asg.assign(plan, new, allowed=o.allowed, max_depth=o.budgets.max_depth)
        old = plan.get(name)
        card_id = old.card_id if old is not None else None
        if card_id is None:
            card = self._card_for(tx, o, made)
            card_id = card.id
        return {name: replace(made, card_id=card_id)}

    def _card_for(self, tx: Tx, o: Orchestration, a: Assignment) -> Card:
        scripts = (o.spec.get("scripts") or {}).get(a.name)
        meta: dict[str, Any] = {"assignment": a.name}
        return self.board.create_card(
            RUNTIME,
            o.project_id,
            f"{a.name}: {a.brief.splitlines()[0][:200]}",
            description=a.brief,
            assignee=a.owner,
            checks=list(a.checks),
            allowed_paths=list(a.paths),
            acceptance_mode="off",
            run_id=o.run_id,
            tx=tx,
            runtime_meta={**meta, **({"script": scripts} if scripts is not None else {})},
        )

    def _revise(self, tx: Tx, o: Orchestration, _role: str, a: Mapping[str, Any]) -> Any:
        plan = plan_of(tx, o.run_id)
        changes: dict[str, Any] = {}
        for key in ("brief", "paths", "deps", "checks"):
            if a.get(key) is not None:
                changes[key] = a[key]
        if "paths" in changes:
            changes["paths"] = [inputs.repo_path(p) for p in changes["paths"]]
        if a.get("deadline_secs") is not None:
            changes["deadline_at"] = _deadline(tx, a["deadline_secs"])
        if not changes:
            raise bad_input("a revision changes nothing", "give --brief, --path, --dep or --check")
        return asg.revise(plan, _need(a, "assignment"), changes,
                          active=active_turns(tx, o.run_id), allowed=o.allowed,
                          max_depth=o.budgets.max_depth)  # fmt: skip

    def _cancel(self, tx: Tx, o: Orchestration, _role: str, a: Mapping[str, Any]) -> Any:
        plan = plan_of(tx, o.run_id)
        return asg.cancel(plan, _need(a, "assignment"), active=active_turns(tx, o.run_id))

    def _recover(self, tx: Tx, o: Orchestration, _role: str, a: Mapping[str, Any]) -> Any:
        x = asg.get(plan_of(tx, o.run_id), _need(a, "assignment"))
        return {x.name: asg.recover(x, _need(a, "decision"))}

    def _answer(self, tx: Tx, o: Orchestration, _role: str, a: Mapping[str, Any]) -> Any:
        x = asg.get(plan_of(tx, o.run_id), _need(a, "assignment"))
        if x.state is not AState.WAITING_FOR_INPUT:
            raise LaneboardError(
                "ILLEGAL_TRANSITION",
                f"assignment {x.name!r} asked nothing ({x.state})",
                "answer only an assignment waiting for input",
            )
        body = inputs.text(_need(a, "note"), "answer", limit=NOTE_LIMIT, multiline=True)
        assert x.card_id is not None
        c = tx.insert_comment(x.card_id, CommentKind.ANSWER.value, body, RUNTIME)
        tx.append_event("comment.added", RUNTIME, card_id=x.card_id, project_id=o.project_id,
                        run_id=o.run_id, payload={"comment": c.id, "kind": "answer"})  # fmt: skip
        return {x.name: replace(x, state=AState.RUNNING, detail=f"answered in comment {c.id}")}

    def _update(self, tx: Tx, o: Orchestration, _role: str, a: Mapping[str, Any]) -> Any:
        x = asg.get(plan_of(tx, o.run_id), _need(a, "assignment"))
        note = inputs.text(_need(a, "note"), "message", limit=NOTE_LIMIT, multiline=True)
        return {x.name: asg.update(x, note)}

    def _complete(self, tx: Tx, o: Orchestration, _role: str, _a: Mapping[str, Any]) -> Any:
        asg.check_complete(plan_of(tx, o.run_id), active_turns(tx, o.run_id))
        tx.update_orchestration(o.run_id, {"phase": "completing", "reason": None})
        return {}

    # -- specialist verbs --------------------------------------------------------------
    def _own(self, tx: Tx, o: Orchestration, a: Mapping[str, Any]) -> Assignment:
        return asg.get(plan_of(tx, o.run_id), _need(a, "assignment"))

    def _accept(self, tx: Tx, o: Orchestration, role: str, a: Mapping[str, Any]) -> Any:
        x = self._own(tx, o, a)
        return {x.name: asg.accept(x, role, _revision_arg(a))}

    def _checkpoint(self, tx: Tx, o: Orchestration, role: str, a: Mapping[str, Any]) -> Any:
        x = self._own(tx, o, a)
        note = inputs.text(str(a.get("note") or "checkpoint"), "checkpoint", limit=NOTE_LIMIT,
                           multiline=True)  # fmt: skip
        return {x.name: asg.checkpoint(x, role, _revision_arg(a), note)}

    def _report(self, tx: Tx, o: Orchestration, role: str, a: Mapping[str, Any]) -> Any:
        x = self._own(tx, o, a)
        done = asg.report(x, role, _revision_arg(a))
        note = inputs.text(str(a.get("note") or ""), "report", limit=NOTE_LIMIT, empty=True,
                           multiline=True)  # fmt: skip
        assert x.card_id is not None
        tx.put_revision(x.card_id, x.revision, {"state": "reported", "detail": note})
        return {x.name: done}

    def _fail(self, tx: Tx, o: Orchestration, role: str, a: Mapping[str, Any]) -> Any:
        x = self._own(tx, o, a)
        why = inputs.text(_need(a, "note"), "reason", limit=NOTE_LIMIT, multiline=True)
        return {x.name: asg.fail(x, role, _revision_arg(a), why)}

    def _heartbeat(self, tx: Tx, o: Orchestration, role: str, a: Mapping[str, Any]) -> Any:
        x = self._own(tx, o, a)
        if x.owner != role:
            raise LaneboardError("FORBIDDEN", f"{role} does not own {x.name!r}", "")
        return {x.name: x}


def put(tx: Tx, o: Orchestration, a: Assignment) -> None:
    """Write one assignment and set its card's status to match its state."""
    assert a.card_id is not None
    tx.upsert_assignment(a.card_id, o.run_id, a.to_dict())
    card = tx.card(a.card_id)
    assert card is not None
    fields: dict[str, Any] = {}
    if card.status is not a.card_status:
        fields.update(status=a.card_status.value, status_since=tx.now())
    if card.delivery_round != a.revision:
        fields["delivery_round"] = a.revision
    if tuple(card.allowed_paths) != a.paths:
        fields["allowed_paths"] = list(a.paths)
    if tuple(card.checks) != a.checks:
        fields["checks"] = list(a.checks)
    if fields:
        tx.update_card(card.id, card.version, fields)


def _need(a: Mapping[str, Any], key: str) -> Any:
    value = a.get(key)
    if value is None or value == "":
        flag = "--" + key.replace("_", "-")
        raise bad_input(f"this verb needs {key}", f"pass {flag}")
    return value


def _revision_arg(a: Mapping[str, Any]) -> int:
    value = _need(a, "revision")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_input(f"revision must be a positive number, not {value!r}", "pass --revision N")
    return value


def _deadline(tx: Tx, secs: Any) -> int | None:
    if secs is None:
        return None
    if isinstance(secs, bool) or not isinstance(secs, int) or secs <= 0:
        raise bad_input(f"deadline must be a positive number of seconds, not {secs!r}", "")
    return tx.now() + secs * 1000


def _revision(r: Row) -> dict[str, Any]:
    return {
        "revision": int(r["revision"]),
        "state": r["state"],
        "lane_branch": r["lane_branch"],
        "lane_dir": r["lane_dir"],
        "base": r["base"],
        "evidence": json.loads(r["evidence"] or "[]"),
        "detail": r["detail"],
    }
