"""Dependency links and the candidate queue they order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from laneboard.board.authority import Caller, require
from laneboard.board.base import BoardBase
from laneboard.domain import deps, weights
from laneboard.domain.model import Actor, Card
from laneboard.errors import LaneboardError, not_found
from laneboard.store.tx import ReadySet


@dataclass(frozen=True)
class Candidate:
    card: Card
    weight: float
    fanout: int
    stale: bool
    sla_pressure: float = 0.0  # minutes of ``weight`` (``domain.weights``)
    sla_row: str | None = None  # the patrol row that presses, when one does

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.card.ref,
            "id": self.card.id,
            "title": self.card.title,
            "status": self.card.status.value,
            "assignee": self.card.assignee,
            "priority": self.card.priority,
            "weight": round(self.weight, 3),
            "fanout": self.fanout,
            "sla_pressure": round(self.sla_pressure, 3),
            "sla_row": self.sla_row,
            "stale": self.stale,
        }


class LinksMixin(BoardBase):
    def link(self, actor: Actor, ref: str | int, depends_on: str | int) -> Card:
        require(actor, Caller.PERSON, "link cards")
        with self.store.write() as tx:
            tx.advisory_lock(tx.store.pg_lock_key("links"))
            card = self._card(tx, ref, lock=True)
            dep = self._card(tx, depends_on)
            if deps.would_cycle(tx.dependency_edges(), card.id, dep.id):
                raise LaneboardError(
                    "DEPENDENCY_CYCLE",
                    f"{card.ref} -> {dep.ref} would close a cycle",
                    "dependencies must form a DAG; remove the opposite link first",
                )
            if tx.insert_link(card.id, dep.id):
                tx.append_event(
                    "link.added",
                    actor,
                    card_id=card.id,
                    project_id=card.project_id,
                    run_id=card.run_id,
                    payload={"depends_on": dep.ref},
                )
            new = tx.card(card.id)
            assert new is not None
            return new

    def unlink(self, actor: Actor, ref: str | int, depends_on: str | int) -> Card:
        require(actor, Caller.PERSON, "unlink cards")
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            dep = self._card(tx, depends_on)
            if not tx.delete_link(card.id, dep.id):
                raise not_found("link", f"{card.ref} -> {dep.ref}")
            tx.append_event(
                "link.removed",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"depends_on": dep.ref},
            )
            new = tx.card(card.id)
            assert new is not None
            return new

    def candidates(
        self,
        *,
        assignees: Sequence[str] = (),
        include_unassigned: bool = False,
        stale: bool = False,
        project: str | int | None = None,
        run_id: int | None = None,
        run_statuses: Sequence[str] = (),
        limit: int = 50,
    ) -> list[Candidate]:
        """Claimable cards, heaviest first; ``run_id``: only that run's cards;
        ``run_statuses``: only cards in no run or in a run with one of these statuses."""
        with self.store.read() as tx:
            pid = self._project(tx, project).id if project is not None else None
            now = tx.now()
            unassigned = include_unassigned or not assignees
            stale_cards: list[Card] = []
            if stale:
                stale_cards = [
                    c
                    for c in tx.stale_cards(
                        now - self.windows.stale_ms, assignees=assignees, unassigned=unassigned
                    )
                    if (pid is None or c.project_id == pid)
                    and (run_id is None or c.run_id == run_id)
                ]
            # the heaviest ``limit`` straight from the index when its order is the weight
            # order (nothing stale to weigh in either); else a window weighed in full
            wanted = ReadySet(assignees, unassigned, pid, run_id, run_statuses)
            ready = None if stale_cards else tx.ready_in_weight_order(wanted, limit)
            if ready is None:
                ready = tx.ready_of(wanted, max(limit * 4, 200))
            pool = ready + stale_cards
            fan = deps.downstream_counts(tx.open_dependents(), [c.id for c in pool]) if pool else {}
        stale_ids = {c.id for c in stale_cards}
        sla = {c.id: s for c in pool if (s := weights.card_sla_clock(c, now, self.sla))}
        ordered = weights.order(pool, now, fan, sla)
        return [
            Candidate(w.card, w.weight, w.fanout, w.card.id in stale_ids, w.sla_pressure, w.sla_row)
            for w in ordered[:limit]
        ]
