"""Card reads of the workflow, handoff, director and moves beyond the board's own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Card
from laneboard.store import rows
from laneboard.store.base import Row
from laneboard.store.q_base import Queries
from laneboard.store.rows import dumps

# The cards the review pass can act on: deliveries in review, open epics and open review
# cards (found by their idempotency key range). Each part is an indexed read, so the pass
# costs the same on a board of a thousand cards as on one of a hundred thousand.
WORK_SQL = (
    "SELECT * FROM cards WHERE id IN ("
    "SELECT id FROM cards WHERE status = 'in_review' "
    "UNION SELECT id FROM cards WHERE kind = 'epic' AND status IN ('todo', 'in_progress', "
    "'blocked') "
    "UNION SELECT id FROM cards WHERE idempotency_key >= ? AND idempotency_key < ?"
    ") ORDER BY id LIMIT ?"
)


class CardQueries(Queries):
    if TYPE_CHECKING:

        def dependencies_of(self, card_ids: Sequence[int]) -> dict[int, list[int]]: ...

    def review_work_cards(self, review_keys: tuple[str, str], limit: int) -> list[Card]:
        """Cards in review, open epics and review cards keyed in ``review_keys``, by id."""
        got = self.all(WORK_SQL, (*review_keys, limit))
        deps = self.dependencies_of([r["id"] for r in got])
        return [rows.card(r, tuple(deps.get(r["id"], ()))) for r in got]

    def has_review_work(self, review_keys: tuple[str, str]) -> bool:
        """Whether ``review_work_cards`` would find any card: one statement, no card read."""
        got = self.scalar(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM cards WHERE status = 'in_review') "
            "OR EXISTS (SELECT 1 FROM cards WHERE kind = 'epic' AND status IN ('todo', "
            "'in_progress', 'blocked')) OR EXISTS (SELECT 1 FROM cards WHERE "
            "idempotency_key >= ? AND idempotency_key < ?) THEN 1 ELSE 0 END AS work",
            review_keys,
        )
        return bool(got)

    def children_of(self, epic_ids: Sequence[int], limit: int) -> list[Card]:
        """Children of the given epics by id, at most ``limit`` (dependencies not loaded)."""
        marks = ",".join("?" * len(epic_ids))
        got = self.all(
            f"SELECT * FROM cards WHERE parent_id IN ({marks}) ORDER BY id LIMIT ?",
            [*epic_ids, limit],
        )
        return [rows.card(r) for r in got]

    def children_of_epic(self, epic_id: int) -> list[Card]:
        """Every child of one epic (dependencies not loaded)."""
        got = self.all("SELECT * FROM cards WHERE parent_id = ?", (epic_id,))
        return [rows.card(r) for r in got]

    def cards_with_reports(self, card_ids: Sequence[int]) -> set[int]:
        """Those of ``card_ids`` that have at least one report."""
        marks = ",".join("?" * len(card_ids))
        return {
            int(r["card_id"])
            for r in self.all(
                f"SELECT DISTINCT card_id FROM reports WHERE card_id IN ({marks})", card_ids
            )
        }

    def report_row(self, card_id: int, round_: int) -> Row | None:
        """A round's report: body, evidence (JSON text), author and verdict."""
        return self.one(
            "SELECT body, evidence, author, verdict FROM reports WHERE card_id = ? AND round = ?",
            (card_id, round_),
        )

    def set_report_evidence(self, report_id: int, evidence: list[dict[str, Any]]) -> None:
        self.run("UPDATE reports SET evidence = ? WHERE id = ?", (dumps(evidence), report_id))

    def dependents(self, card_id: int) -> list[int]:
        """Cards that depend on ``card_id``."""
        got = self.all("SELECT card_id FROM links WHERE depends_on = ?", (card_id,))
        return [int(r["card_id"]) for r in got]

    def newest_agent_questions(self, status: str, kind: str, not_by: str) -> dict[int, Row]:
        """``newest_agent_question`` of every card in ``status``, in one read: card id ->
        its newest comment of ``kind`` by an agent other than ``not_by``, with the card's
        ``status_since`` as ``card_since`` (cards without one are left out)."""
        got = self.all(
            "SELECT m.*, c.status_since AS card_since FROM comments m "
            "JOIN cards c ON c.id = m.card_id WHERE m.id IN (SELECT max(q.id) FROM comments q "
            "JOIN cards k ON k.id = q.card_id WHERE k.status = ? AND q.kind = ? "
            "AND q.author_kind = 'agent' AND q.author <> ? GROUP BY q.card_id)",
            (status, kind, not_by),
        )
        return {int(r["card_id"]): r for r in got}

    def unowned_todo_ids(self, since_before: int, limit: int) -> list[int]:
        """Unassigned ``todo`` cards that became ``todo`` at or before ``since_before``."""
        got = self.all(
            "SELECT id FROM cards WHERE status = 'todo' AND assignee IS NULL "
            "AND status_since <= ? ORDER BY id LIMIT ?",
            (since_before, limit),
        )
        return [int(r["id"]) for r in got]

    def newest_agent_question(self, card_id: int, kind: str, not_by: str) -> Row | None:
        """A card's newest comment of ``kind`` by an agent other than ``not_by``."""
        return self.one(
            "SELECT * FROM comments WHERE card_id = ? AND kind = ? AND author_kind = 'agent' "
            "AND author <> ? ORDER BY id DESC LIMIT 1",
            (card_id, kind, not_by),
        )
