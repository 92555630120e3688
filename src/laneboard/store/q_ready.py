"""The ready-card reads of ``Tx``: what a claim set may claim, in ``(priority, id)`` order
or, when that is the weight order, straight from the ``cards_todo_rank`` index; and the
claims gone stale."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from laneboard.domain.model import Card
from laneboard.store import rows
from laneboard.store.claim_sql import NOT_READY
from laneboard.store.q_base import Queries
from laneboard.store.rank_sql import RANK_HOLDS


class ReadySet(NamedTuple):
    """Whose ready cards a read takes (``Tx.ready_of``): a claim set and its run filters."""

    assignees: Sequence[str] = ()
    unassigned: bool = True
    project_id: int | None = None
    run_id: int | None = None
    run_statuses: Sequence[str] = ()


class ReadyQueries(Queries):
    """The ready-card reads of ``Tx`` (``store.tx``)."""

    def ready_cards(
        self,
        *,
        assignees: Sequence[str] = (),
        unassigned: bool = True,
        project_id: int | None = None,
        run_id: int | None = None,
        run_statuses: Sequence[str] = (),
        limit: int = 500,
    ) -> list[Card]:
        """``todo`` cards whose dependencies are all done, for the given claim set (only
        the cards of run ``run_id``; only cards in no run or a run in ``run_statuses``),
        in ``(priority, id)`` order."""
        return self.ready_of(
            ReadySet(assignees, unassigned, project_id, run_id, run_statuses), limit
        )

    def ready_of(self, ready: ReadySet, limit: int) -> list[Card]:
        """``ready_cards`` of a ``ReadySet``."""
        where = self._ready_where(*ready)
        if where is None:
            return []
        got = self.all(
            f"SELECT * FROM cards WHERE {where[0]} ORDER BY priority, id LIMIT ?",
            [*where[1], limit],
        )
        return [rows.card(r) for r in got]

    def ready_in_weight_order(self, ready: ReadySet, limit: int) -> list[Card] | None:
        """The first ``limit`` of ``ready_of`` in ``cards_todo_rank`` order, which is
        their weight order when no card of the set is weighed in full (no review card) and
        ``RANK_HOLDS`` holds (as ``rank_sql.index_pick`` asks); None when it is not."""
        where = self._ready_where(*ready)
        if where is None:
            return []
        cond, params = where
        holds = self.one(
            f"SELECT CASE WHEN {RANK_HOLDS} AND NOT EXISTS (SELECT 1 FROM cards WHERE "
            f"{cond} AND claim_rank IS NULL) THEN 1 ELSE 0 END AS holds",
            [self.now(), *params],
        )
        if not (holds and holds["holds"]):
            return None
        got = self.all(
            f"SELECT * FROM cards WHERE {cond} AND claim_rank IS NOT NULL "
            "ORDER BY priority, claim_rank, id LIMIT ?",
            [*params, limit],
        )
        return [rows.card(r) for r in got]

    @staticmethod
    def _ready_where(
        assignees: Sequence[str],
        unassigned: bool,
        project_id: int | None,
        run_id: int | None,
        run_statuses: Sequence[str],
    ) -> tuple[str, list[Any]] | None:
        """``ready_cards``' condition on ``cards`` and its parameters (None: no card)."""
        who: list[str] = []
        params: list[Any] = []
        if assignees:
            who.append("assignee IN (" + ",".join("?" * len(assignees)) + ")")
            params.extend(assignees)
        if unassigned:
            who.append("assignee IS NULL")
        if not who:
            return None
        extra = ""
        if project_id is not None:
            extra = " AND project_id = ?"
            params.append(project_id)
        if run_id is not None:
            extra += " AND run_id = ?"
            params.append(run_id)
        if run_statuses:
            extra += (
                " AND (run_id IS NULL OR run_id IN (SELECT id FROM runs WHERE status IN ("
                + ",".join("?" * len(run_statuses))
                + ")))"
            )
            params.extend(run_statuses)
        return f"status = 'todo' AND ({' OR '.join(who)}){extra} AND NOT {NOT_READY}", params

    def stale_cards(
        self,
        older_than: int,
        *,
        assignees: Sequence[str] = (),
        unassigned: bool = True,
        limit: int = 500,
    ) -> list[Card]:
        """``in_progress`` cards whose heartbeat is older than ``older_than`` (ms epoch)."""
        got = self.all(
            "SELECT * FROM cards WHERE status = 'in_progress' AND kind = 'task' AND "
            "(heartbeat_at IS NULL OR heartbeat_at <= ?) ORDER BY priority, id LIMIT ?",
            (older_than, limit),
        )
        out = []
        for r in got:
            owner = r["holder"] or r["assignee"]
            if (owner in assignees) or (unassigned and r["assignee"] is None) or not assignees:
                out.append(rows.card(r))
        return out
