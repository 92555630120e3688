"""What the orchestration runtime records: the run's creation, each dispatched turn and
its end (counted against the budgets), verification outcomes, questions, phases.

These are the runtime's writes (a ``system`` actor, or a person starting the run); no
agent reaches them. Each is one transaction with its ``orchestration.*`` event. A turn is
recorded *before* it starts, so after a crash a turn still ``dispatched`` is known to
have maybe run: ``interrupted`` marks it and its assignment ``uncertain``, and nothing
dispatches that assignment again until the coordinator records ``recover``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from laneboard.board.authority import Caller, require
from laneboard.board.orchestrate import RUNTIME, Orchestration, load, plan_of, put
from laneboard.board.runs import check_goal
from laneboard.board.service import Board
from laneboard.domain import assignments as asg
from laneboard.domain import budgets as bud
from laneboard.domain.assignments import COORDINATOR, Assignment, AState
from laneboard.domain.budgets import Budgets, Usage
from laneboard.domain.model import Actor
from laneboard.domain.runs import RunOptions, RunStatus
from laneboard.errors import LaneboardError
from laneboard.store.tx import Tx


class Runtime:
    def __init__(self, board: Board, actor: Actor = RUNTIME) -> None:
        self.board = board
        self.store = board.store
        self.actor = actor

    def _event(self, tx: Tx, o: Orchestration, kind: str, **payload: Any) -> None:
        tx.append_event(f"orchestration.{kind}", self.actor, project_id=o.project_id,
                        run_id=o.run_id, payload=payload)  # fmt: skip

    # -- the run -----------------------------------------------------------------------
    def create(self, actor: Actor, project: str | int, goal: str, spec: dict[str, Any],
               budgets: Budgets, start: dict[str, Any]) -> Orchestration:  # fmt: skip
        """A new run for ``goal``, its orchestration and its coordinator card, in one
        transaction (a person starts an orchestrated run)."""
        require(actor, Caller.PERSON, "start orchestrated runs")
        goal = check_goal(goal)
        with self.store.write() as tx:
            p = self.board._project(tx, project)
            options = RunOptions().to_dict()
            run_id = tx.insert_run(p.id, goal, RunStatus.ACTIVE.value, options, actor.name)
            tx.append_event("run.created", actor, project_id=p.id, run_id=run_id,
                            payload={"goal": goal, "status": RunStatus.ACTIVE.value,
                                     "options": options, "orchestrated": True})  # fmt: skip
            tx.insert_orchestration(run_id, p.id, goal, {
                "spec": spec, "budgets": budgets.to_dict(), "usage": Usage().to_dict(),
                "start": start, "phase": "running"})  # fmt: skip
            script = (spec.get("scripts") or {}).get(COORDINATOR)
            card = self.board.create_card(
                RUNTIME, p.id, f"coordinate: {goal.splitlines()[0][:200]}",
                description=goal, assignee=COORDINATOR, acceptance_mode="off",
                allowed_paths=[], run_id=run_id, tx=tx,
                runtime_meta={"coordinator": True, **({"script": script} if script else {})},
            )  # fmt: skip
            tx.update_orchestration(run_id, {"coordinator_card_id": card.id})
            o = load(tx, run_id)
            self._event(tx, o, "created", goal=goal, budgets=budgets.to_dict())
            return o

    def phase(self, run_id: int, phase: str, reason: str | None = None,
              result: dict[str, Any] | None = None) -> Orchestration:  # fmt: skip
        with self.store.write() as tx:
            fields: dict[str, Any] = {"phase": phase, "reason": reason}
            if result is not None:
                fields["result"] = result
            tx.update_orchestration(run_id, fields)
            if phase in ("completed", "failed"):  # the run ends with its orchestration
                tx.revoke_run_tokens(run_id)
                status = RunStatus.COMPLETED if phase == "completed" else RunStatus.FAILED
                tx.update_run(run_id, {"status": status.value, "ended_at": tx.now(),
                                       "last_error": reason})  # fmt: skip
            o = load(tx, run_id)
            self._event(tx, o, "phase", phase=phase, reason=reason)
            return o

    def integration(self, run_id: int, work_dir: str, head: str) -> None:
        with self.store.write() as tx:
            tx.update_orchestration(run_id, {"integration_dir": work_dir,
                                             "integration_head": head})  # fmt: skip

    def role(self, run_id: int, role: str, kind: str, session_id: str | None,
             card_id: int | None) -> None:  # fmt: skip
        with self.store.write() as tx:
            tx.put_role(run_id, role, kind, {"session_id": session_id, "card_id": card_id})

    def roles(self, run_id: int) -> dict[str, dict[str, Any]]:
        with self.store.read() as tx:
            return {str(r["role"]): dict(r) for r in tx.role_rows(run_id)}

    # -- turns -------------------------------------------------------------------------
    def dispatch(self, run_id: int, role: str, purpose: str, a: Assignment | None = None) -> int:
        """Record a turn before it starts; refuse it when a budget is used up."""
        with self.store.write() as tx:
            o = load(tx, run_id)
            which = bud.exhausted(o.budgets, o.usage)
            if which is not None:
                raise LaneboardError(
                    "BUDGET_EXHAUSTED",
                    f"run {run_id} used its {which} budget",
                    "the run stops; every lane, patch and log is kept",
                    budget=which,
                )
            if a is not None:
                cur = asg.get(plan_of(tx, run_id), a.name)
                if purpose == "work" and cur.dispatched >= cur.revision:
                    raise LaneboardError(
                        "CONFLICT",
                        f"revision {cur.revision} of {cur.name!r} was already dispatched",
                        "each revision is dispatched once",
                    )
                if purpose == "work":  # queued messages go with the turn, once
                    put(tx, o, replace(cur, dispatched=cur.revision, messages=()))
                elif purpose == "answer":  # the answer is delivered once
                    put(tx, o, replace(cur, detail="", messages=()))
                elif purpose == "clarify":
                    put(tx, o, replace(cur, messages=()))
            turn = tx.insert_turn(run_id, role, a.name if a else None,
                                  a.revision if a else None, purpose)  # fmt: skip
            tx.update_orchestration(run_id, {"usage": o.usage.add(calls=1).to_dict()})
            self._event(tx, o, "dispatched", turn=turn, role=role, purpose=purpose,
                        assignment=a.name if a else None, revision=a.revision if a else None)  # fmt: skip
            return turn

    def end_turn(self, run_id: int, turn: int, ok: bool, output_bytes: int, elapsed_ms: int,
                 detail: str = "") -> Usage:  # fmt: skip
        with self.store.write() as tx:
            o = load(tx, run_id)
            tx.end_turn(turn, "ended" if ok else "failed", output_bytes, detail[:2000])
            usage = o.usage.add(output=output_bytes, elapsed_ms=elapsed_ms)
            tx.update_orchestration(run_id, {"usage": usage.to_dict()})
            self._event(tx, o, "turn_ended", turn=turn, ok=ok, output_bytes=output_bytes)
            return usage

    def count_steer(self, run_id: int) -> None:
        with self.store.write() as tx:
            o = load(tx, run_id)
            tx.update_orchestration(run_id, {"usage": o.usage.add(calls=1).to_dict()})

    def steered(self, run_id: int, name: str, delivered: int) -> Assignment:
        """The running turn of ``name`` accepted its first ``delivered`` queued messages
        (Codex ``turn/steer``): they leave the queue, and the steer counts as a model call."""
        with self.store.write() as tx:
            o = load(tx, run_id)
            a = asg.get(plan_of(tx, run_id), name)
            a = replace(a, messages=a.messages[delivered:])
            put(tx, o, a)
            tx.update_orchestration(run_id, {"usage": o.usage.add(calls=1).to_dict()})
            self._event(tx, o, "steered", assignment=name, revision=a.revision,
                        messages=delivered)  # fmt: skip
            return a

    def interrupted(self, run_id: int) -> list[str]:
        """Mark turns left ``dispatched`` by a crash ``uncertain``, and their assignments.

        Every credential the run's earlier sessions held is revoked first: an agent process
        left over from an interrupted runtime can no longer act on the run."""
        with self.store.write() as tx:
            o = load(tx, run_id)
            tx.revoke_run_tokens(run_id)
            plan = plan_of(tx, run_id)
            names: list[str] = []
            for r in tx.turn_rows(run_id, "dispatched"):
                tx.end_turn(int(r["id"]), "uncertain", 0, "interrupted: the runtime stopped")
                name = r["assignment"]
                if name and name in plan and r["role"] != COORDINATOR:
                    a = plan[name]
                    if a.state not in (AState.COMPLETED, AState.CANCELLED):
                        put(tx, o, replace(a, uncertain=True))
                        names.append(name)
            if names:
                self._event(tx, o, "uncertain", assignments=names)
            return names

    # -- outcomes ----------------------------------------------------------------------
    def lane(self, run_id: int, a: Assignment, branch: str, lane_dir: str, base: str) -> None:
        assert a.card_id is not None
        with self.store.write() as tx:
            tx.put_revision(a.card_id, a.revision,
                            {"lane_branch": branch, "lane_dir": lane_dir, "base": base})  # fmt: skip

    def waiting(self, run_id: int, name: str, question: str) -> None:
        with self.store.write() as tx:
            o = load(tx, run_id)
            a = asg.get(plan_of(tx, run_id), name)
            put(tx, o, replace(a, state=AState.WAITING_FOR_INPUT, detail=question[:2000]))
            self._event(tx, o, "waiting", assignment=name, revision=a.revision)

    def verified(self, run_id: int, name: str, revision: int, evidence: list[dict[str, Any]],
                 head: str) -> Assignment:  # fmt: skip
        with self.store.write() as tx:
            o = load(tx, run_id)
            a = asg.verified(asg.get(plan_of(tx, run_id), name), revision, evidence)
            put(tx, o, a)
            assert a.card_id is not None
            tx.put_revision(a.card_id, revision, {"state": "verified", "evidence": evidence})
            tx.update_orchestration(run_id, {"integration_head": head})
            self._event(tx, o, "verified", assignment=name, revision=revision, head=head)
            return a

    def rejected(self, run_id: int, name: str, revision: int, why: str,
                 evidence: list[dict[str, Any]]) -> Assignment:  # fmt: skip
        with self.store.write() as tx:
            o = load(tx, run_id)
            a = asg.rejected(asg.get(plan_of(tx, run_id), name), revision, why)
            put(tx, o, a)
            assert a.card_id is not None
            tx.put_revision(a.card_id, revision, {"state": "rejected", "evidence": evidence,
                                                  "detail": why})  # fmt: skip
            self._event(tx, o, "rejected", assignment=name, revision=revision, reason=why)
            return a

    def revisions(self, card_id: int) -> list[dict[str, Any]]:
        with self.store.read() as tx:
            return [
                {**dict(r), "evidence": json.loads(r["evidence"] or "[]")}
                for r in tx.revision_rows(card_id)
            ]

    def turns(self, run_id: int) -> list[dict[str, Any]]:
        with self.store.read() as tx:
            return [dict(r) for r in tx.turn_rows(run_id)]
