"""Runs: the work toward one goal in one project, and a person's transitions of it.

A run is created by ``lb run`` (or ``lb orchestrate``), its cards join it when they are
created (``run_id``), and the supervisor drives it (``supervisor.runs``; its writes are
``board.run_loop``). A person's transitions — start, pause, resume, stop, force-stop —
follow ``domain.runs.TRANSITIONS``: each needs a non-empty idempotency key (the first
response is replayed for the same key and request; another request with that key is
refused), is a conditional update whose affected row is checked (of two racing
transitions exactly one wins), and appends its ``run.*`` event in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from laneboard.board import inputs
from laneboard.board.authority import Caller, require
from laneboard.board.base import BoardBase
from laneboard.domain import runs as dr
from laneboard.domain.clock import iso
from laneboard.domain.model import Actor
from laneboard.domain.runs import RunOptions, RunStatus
from laneboard.errors import LaneboardError, bad_input, not_found
from laneboard.store import IntegrityError
from laneboard.store.base import Row
from laneboard.store.tx import Tx

GOAL_LIMIT = 5000


@dataclass(frozen=True)
class Run:
    id: int
    project_id: int
    goal: str
    status: RunStatus
    options: RunOptions
    iterations: int
    consecutive_errors: int
    errors_total: int
    convergence_state: str | None
    convergence_reason: str | None
    started_at: int
    ended_at: int | None
    last_error: str | None
    last_tick_at: int | None
    stop_mode: str | None
    created_by: str
    created_at: int
    updated_at: int
    version: int

    @staticmethod
    def from_row(r: Row) -> Run:
        return Run(
            id=int(r["id"]),
            project_id=int(r["project_id"]),
            goal=r["goal"],
            status=RunStatus(r["status"]),
            options=RunOptions.from_dict(json.loads(r["options"] or "{}")),
            iterations=int(r["iterations"]),
            consecutive_errors=int(r["consecutive_errors"]),
            errors_total=int(r["errors_total"]),
            convergence_state=r["convergence_state"],
            convergence_reason=r["convergence_reason"],
            started_at=int(r["started_at"]),
            ended_at=r["ended_at"],
            last_error=r["last_error"],
            last_tick_at=r["last_tick_at"],
            stop_mode=r["stop_mode"],
            created_by=r["created_by"],
            created_at=int(r["created_at"]),
            updated_at=int(r["updated_at"]),
            version=int(r["version"]),
        )


def view(
    run: Run, project_key: str, cards: dict[str, int], budgets: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A run as every surface shows it: its row, options and its cards by status."""
    return {
        "id": run.id,
        "project": project_key,
        "goal": run.goal,
        "status": run.status.value,
        "options": run.options.to_dict(),
        "iterations": run.iterations,
        "consecutive_errors": run.consecutive_errors,
        "errors_total": run.errors_total,
        "convergence": {"state": run.convergence_state, "reason": run.convergence_reason},
        "started_at": iso(run.started_at),
        "ended_at": iso(run.ended_at),
        "last_error": run.last_error,
        "last_tick_at": iso(run.last_tick_at),
        "stop_mode": run.stop_mode,
        "created_by": run.created_by,
        "updated_at": iso(run.updated_at),
        "cards": dict(sorted(cards.items())),
        "card_total": sum(cards.values()),
        "budgets": budgets,
    }


def load(tx: Tx, run_id: int, *, lock: bool = False) -> Run:
    inputs.row_id(run_id, "run")
    r = tx.run_row(run_id, lock=lock)
    if r is None:
        raise not_found("run", run_id, "list runs with: lb run list")
    return Run.from_row(r)


def views(tx: Tx, items: Sequence[Run]) -> list[dict[str, Any]]:
    counts = tx.run_card_counts([r.id for r in items])
    keys = {p.id: p.key for p in tx.projects()}
    from laneboard.board.orchestrate import budget_report  # an orchestrated run's usage

    return [
        view(r, keys.get(r.project_id, "?"), counts.get(r.id, {}), budget_report(tx, r.id))
        for r in items
    ]


def check_goal(goal: str) -> str:
    return inputs.text(goal, "goal", limit=GOAL_LIMIT, multiline=True).strip()


def _request(run_id: int, action: str, reason: str | None) -> str:
    """What an idempotency key is bound to: the operation and its whole request."""
    return json.dumps(
        {"op": "run.transition", "run": run_id, "action": action, "reason": reason},
        sort_keys=True,
    )


class RunsMixin(BoardBase):
    def create_run(
        self,
        actor: Actor,
        project: str | int,
        goal: str,
        options: RunOptions | None = None,
        *,
        status: RunStatus = RunStatus.ACTIVE,
    ) -> dict[str, Any]:
        require(actor, Caller.PERSON, "create runs")
        goal = check_goal(goal)
        opts = options or RunOptions()
        with self.store.write() as tx:
            p = self._project(tx, project)
            rid = tx.insert_run(p.id, goal, status.value, opts.to_dict(), actor.name)
            tx.append_event(
                "run.created",
                actor,
                project_id=p.id,
                run_id=rid,
                payload={"goal": goal, "status": status.value, "options": opts.to_dict()},
            )
            return views(tx, [load(tx, rid)])[0]

    def run(self, run_id: int) -> dict[str, Any]:
        with self.store.read() as tx:
            return views(tx, [load(tx, run_id)])[0]

    def run_record(self, run_id: int) -> Run:
        with self.store.read() as tx:
            return load(tx, run_id)

    def runs(
        self,
        *,
        project: str | int | None = None,
        statuses: Sequence[str] = (),
        limit: int = 500,
    ) -> list[dict[str, Any]]:
        wanted = [dr.parse_run_status(s).value for s in statuses]
        with self.store.read() as tx:
            pid = self._project(tx, project).id if project is not None else None
            got = tx.run_rows(project_id=pid, statuses=wanted, limit=limit)
            return views(tx, [Run.from_row(r) for r in got])

    def transition_run(
        self,
        actor: Actor,
        run_id: int,
        action: str,
        *,
        idempotency_key: str | None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Apply a person's action to a run (``domain.runs.TRANSITIONS``)."""
        require(actor, Caller.PERSON, "change runs")
        dr.check_action(action)
        inputs.row_id(run_id, "run")
        if idempotency_key is None or not idempotency_key.strip():
            raise bad_input(
                "a run transition needs an idempotency key",
                "send an Idempotency-Key header (lb: --key KEY, MCP: idempotency_key)",
            )
        inputs.text(idempotency_key, "idempotency key", limit=500)
        if reason is not None:
            reason = inputs.text(reason, "reason", limit=500)
        request = _request(run_id, action, reason)
        try:
            with self.store.write() as tx:
                seen = self._replay(tx, idempotency_key, request)
                if seen is not None:
                    return seen
                out = self._transition_in(tx, actor, run_id, action, reason)
                tx.remember(idempotency_key, request, None, out)
                return out
        except IntegrityError:  # a racing request with the same key committed first
            with self.store.read() as tx:
                seen = self._replay(tx, idempotency_key, request)
            if seen is None:
                raise
            return seen

    @staticmethod
    def _replay(tx: Tx, key: str, request: str) -> dict[str, Any] | None:
        row = tx.idempotency_row(key)
        if row is None:
            return None
        if row["scope"] != request:
            raise LaneboardError(
                "IDEMPOTENCY_CONFLICT",
                f"idempotency key {inputs.clean_repr(key, 40)} was used for another request",
                "use a new key for a new request; repeat a request only with its own key",
            )
        return {**json.loads(row["response"]), "replayed": True}

    def _transition_in(
        self, tx: Tx, actor: Actor, run_id: int, action: str, reason: str | None
    ) -> dict[str, Any]:
        run = load(tx, run_id, lock=True)
        target = dr.transition(action, run.status)
        fields: dict[str, Any] = {"status": target.value}
        status = target
        if action in ("stop", "force-stop"):
            live = len(tx.run_queue_rows(run.id))
            mode = "force" if action == "force-stop" else "drain"
            if live:  # the supervisor finishes the stop when no turn of the run is left
                status = RunStatus.DRAINING
            fields.update(status=status.value, stop_mode=mode)
            if status is RunStatus.STOPPED:
                fields["ended_at"] = tx.now()
        elif action in ("start", "resume"):
            fields.update(stop_mode=None, ended_at=None, consecutive_errors=0)
        got = tx.update_run(run.id, fields, version=run.version, statuses=[run.status.value])
        if got is None:  # the run changed since it was read: the other write won
            now = load(tx, run.id)
            raise LaneboardError(
                "ILLEGAL_RUN_TRANSITION",
                f"cannot {action} run {run.id}: it changed to {now.status.value} meanwhile",
                "read the run again (lb run show) and decide",
            )
        payload = {"action": action, "from": run.status.value, "to": status.value}
        if reason:
            payload["reason"] = reason
        tx.append_event(
            f"run.{action.replace('-', '_')}",
            actor,
            project_id=run.project_id,
            run_id=run.id,
            payload=payload,
        )
        return {
            "run_id": run.id,
            "action": action,
            "from": run.status.value,
            "target": target.value,
            "status": status.value,
            "replayed": False,
        }

    def run_status(self, project: str | int, run_id: int | None = None) -> dict[str, Any]:
        """One consistent snapshot of a project's run (its newest, or ``run_id``): the run,
        its active agents, queued dispatches, open deliveries, pending approvals and
        blockers, all read in one transaction. A failing read raises; it is never zero."""
        with self.store.read() as tx:
            p = self._project(tx, project)
            if run_id is None:
                got = tx.run_rows(project_id=p.id, limit=1)
                if not got:
                    raise not_found(
                        "run of project",
                        p.key,
                        f"create one with: lb run create {p.key} --goal TEXT",
                    )
                run = Run.from_row(got[0])
            else:
                run = load(tx, run_id)
                if run.project_id != p.id:
                    raise not_found(
                        f"run {run_id} in project", p.key, "list runs with: lb run list"
                    )
            counts = tx.run_status_counts(run.id)
            blockers = [
                {"ref": c.ref, "status": c.status.value, "title": c.title}
                for c in tx.list_cards(run_id=run.id, statuses=["blocked", "awaiting"], limit=100)
            ]
            doc = views(tx, [run])[0]
            return {
                "run": doc,
                "state": run.status.value,
                "convergence": doc["convergence"],
                "updated_at": iso(run.updated_at),
                "as_of": iso(tx.now()),
                **counts,
                "blocked_cards": blockers,
            }

    def check_run_for_card(self, tx: Tx, run_id: int, project_id: int) -> None:
        """A card joins a run of its own project."""
        run = load(tx, run_id)
        if run.project_id != project_id:
            raise bad_input(
                f"run {run_id} belongs to another project",
                "add the card to a run of its own project (lb run list --project KEY)",
            )
