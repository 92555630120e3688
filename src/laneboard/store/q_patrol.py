"""Patrol: its marks, the alert ledger, due-card reads, leader and triage lookups."""

from __future__ import annotations

from typing import Any

from laneboard.store.base import Row
from laneboard.store.q_base import Queries
from laneboard.store.rows import dumps


class PatrolQueries(Queries):
    # -- patrol marks --------------------------------------------------------------------
    def patrol_mark(self, name: str) -> Row | None:
        """One mark (name, at, info)."""
        return self.one("SELECT * FROM patrol_marks WHERE name = ?", (name,))

    def patrol_marks_like(self, prefix: str) -> list[Row]:
        """Marks whose name starts with ``prefix``, newest first."""
        return self.all(
            "SELECT * FROM patrol_marks WHERE name LIKE ? ORDER BY at DESC", (prefix + "%",)
        )

    def set_patrol_mark(self, name: str, info: dict[str, Any]) -> None:
        """Insert or refresh a mark, stamped now."""
        if self.one("SELECT name FROM patrol_marks WHERE name = ?", (name,)) is None:
            self.run(
                "INSERT INTO patrol_marks (name, at, info) VALUES (?, ?, ?)",
                (name, self.now(), dumps(info)),
            )
        else:
            self.run(
                "UPDATE patrol_marks SET at = ?, info = ? WHERE name = ?",
                (self.now(), dumps(info), name),
            )

    # -- the alert ledger ----------------------------------------------------------------
    def alert_row(self, dedup_key: str) -> Row | None:
        return self.one("SELECT * FROM alerts WHERE dedup_key = ?", (dedup_key,))

    def alert_rows(self, prefix: str = "", card_id: int | None = None) -> list[Row]:
        """Ledger rows whose key starts with ``prefix`` (of one card if given), by key."""
        params: list[Any]
        where, params = ["substr(dedup_key, 1, ?) = ?"], [len(prefix), prefix]
        if card_id is not None:
            where.append("card_id = ?")
            params.append(card_id)
        return self.all(
            f"SELECT * FROM alerts WHERE {' AND '.join(where)} ORDER BY dedup_key", params
        )

    def insert_alert(
        self,
        key: str,
        state: str,
        severity: str,
        payload: dict[str, Any],
        card_id: int | None,
        now: int,
    ) -> bool:
        """A first send; False when another pass recorded the key first."""
        return (
            self.run(
                "INSERT INTO alerts (dedup_key, state, severity, payload, card_id, first_at, "
                "sent_at, sends) VALUES (?, ?, ?, ?, ?, ?, ?, 1) ON CONFLICT (dedup_key) DO NOTHING",
                (key, state, severity, dumps(payload), card_id, now, now),
            )
            == 1
        )

    def resend_alert(
        self,
        key: str,
        state: str,
        severity: str,
        payload: dict[str, Any],
        card_id: int | None,
        now: int,
        prev: tuple[str, str],
    ) -> bool:
        """A further send, compare-and-swap on the previous (state, severity)."""
        return (
            self.run(
                "UPDATE alerts SET state = ?, severity = ?, payload = ?, card_id = ?, "
                "sent_at = ?, sends = sends + 1 WHERE dedup_key = ? AND state = ? "
                "AND severity = ?",
                (state, severity, dumps(payload), card_id, now, key, *prev),
            )
            == 1
        )

    def delete_alert(self, dedup_key: str) -> bool:
        return self.run("DELETE FROM alerts WHERE dedup_key = ?", (dedup_key,)) == 1

    # -- the patrol's card reads ---------------------------------------------------------
    def newest_comment_of_kind(self, card_id: int, kind: str) -> Row | None:
        return self.one(
            "SELECT * FROM comments WHERE card_id = ? AND kind = ? ORDER BY id DESC LIMIT 1",
            (card_id, kind),
        )

    def leader_owed_cards(self) -> list[Row]:
        """Awaiting and blocked cards and human-accepted ones in review, oldest state first."""
        return self.all(
            "SELECT id, ref, status, status_since, acceptance_mode FROM cards WHERE status IN "
            "('awaiting', 'blocked') OR (status = 'in_review' AND acceptance_mode = 'human') "
            "ORDER BY status_since LIMIT 200"
        )

    def leader_actions(self, leader: str | None) -> list[Row]:
        """The newest comments, creations and moves by ``leader`` (any human when None)."""
        if leader:
            who_sql, who_args = "actor = ?", (leader,)
        else:
            who_sql, who_args = "actor_kind = ?", ("human",)
        return self.all(
            f"SELECT at, type, payload FROM events WHERE {who_sql} AND type IN "
            "('comment.added', 'card.created', 'card.moved') ORDER BY id DESC LIMIT 500",
            who_args,
        )

    def patrol_due_card_ids(
        self,
        *,
        stale_before: int,
        future_after: int,
        unreadable_before: int,
        question_before: int,
        blocked_before: int,
        review_keys: tuple[str, str],
        review_aging_before: int,
        review_missing_before: int,
    ) -> list[int]:
        """Cards past any of the patrol's wall-clock thresholds, by id (indexed reads)."""
        lo, hi = review_keys
        reads: list[tuple[str, tuple[Any, ...]]] = [
            (
                "SELECT id FROM cards WHERE status = 'in_progress' AND heartbeat_at < ?",
                (stale_before,),
            ),
            (
                "SELECT id FROM cards WHERE status = 'in_progress' AND heartbeat_at > ?",
                (future_after,),
            ),
            (
                "SELECT id FROM cards WHERE status = 'in_progress' AND heartbeat_at IS NULL "
                "AND status_since <= ?",
                (unreadable_before,),
            ),
            (
                "SELECT c.id FROM comments q JOIN cards c ON c.id = q.card_id "
                "WHERE q.kind = 'question' AND q.created_at < ? "
                "AND q.created_at >= c.status_since AND c.status IN ('in_progress', 'awaiting')",
                (question_before,),
            ),
            (
                "SELECT id FROM cards WHERE status = 'blocked' AND status_since < ?",
                (blocked_before,),
            ),
            (
                # the review cards, by their keys: SQLite's planner, without statistics,
                # would rather walk every running card by status (PostgreSQL's has them)
                f"SELECT id FROM cards{'' if self.pg else ' INDEXED BY cards_idempotency_key'} "
                "WHERE idempotency_key >= ? AND idempotency_key < ? "
                "AND status IN ('todo', 'in_progress') AND created_at < ?",
                (lo, hi, review_aging_before),
            ),
            (
                "SELECT id FROM cards WHERE status = 'in_review' AND acceptance_mode <> 'off' "
                "AND status_since < ?",
                (review_missing_before,),
            ),
        ]
        found: set[int] = set()
        for sql, args in reads:
            found.update(int(r["id"]) for r in self.all(sql, args))
        return sorted(found)

    # -- triage --------------------------------------------------------------------------
    def handoff_producer_ids(self, since: int, limit: int) -> list[int]:
        """Done cards carrying a stage handoff, accepted at or after ``since``, oldest first."""
        got = self.all(
            "SELECT id FROM cards WHERE status = 'done' AND status_since >= ? AND meta LIKE ? "
            "ORDER BY status_since, id LIMIT ?",
            (since, "%stage_handoff%", limit),
        )
        return [int(r["id"]) for r in got]

    def failed_queue_rows(self, kind: str, since: int) -> list[Row]:
        """Failed queue rows of one kind updated at or after ``since``, by id."""
        return self.all(
            "SELECT * FROM queue WHERE kind = ? AND state = 'failed' AND updated_at >= ? "
            "ORDER BY id",
            (kind, since),
        )
