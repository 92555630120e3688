"""Turn transcripts, follow-ups to a worker, and requests to stop a running turn."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from laneboard.domain.model import Actor
from laneboard.store.base import Row
from laneboard.store.q_base import Queries


class TranscriptQueries(Queries):
    # -- transcript entries ---------------------------------------------------------------
    def append_transcript(
        self, turn_id: int, card_id: int, entries: Sequence[tuple[int, int, dict[str, Any]]]
    ) -> int:
        """Store ``(seq, at, entry)`` items of one turn, in one insert per few hundred;
        returns the last row id."""
        from laneboard.store.transcript_sql import ROWS_PER_STATEMENT, insert_sql

        last = 0
        for at in range(0, len(entries), ROWS_PER_STATEMENT):
            sql, params = insert_sql(turn_id, card_id, entries[at : at + ROWS_PER_STATEMENT])
            last = max([last, *(int(r["id"]) for r in self.all(sql, params))])
        return last

    def transcript(
        self, card_id: int, *, after: int = 0, turn_id: int | None = None, limit: int = 500
    ) -> list[dict[str, Any]]:
        """A card's entries after row ``after`` (one turn's with ``turn_id``), oldest first."""
        sql = "SELECT id, turn_id, seq, at, entry FROM transcript WHERE card_id = ? AND id > ?"
        params: list[Any] = [card_id, after]
        if turn_id is not None:
            sql += " AND turn_id = ?"
            params.append(turn_id)
        got = self.all(sql + " ORDER BY id LIMIT ?", [*params, limit])
        return [
            {**json.loads(r["entry"]), "id": r["id"], "turn": r["turn_id"], "seq": r["seq"],
             "at": r["at"]}
            for r in got
        ]  # fmt: skip

    def transcript_turns(self, card_id: int, limit: int = 50) -> list[Row]:
        """A card's newest ``limit`` turns without their texts, oldest first."""
        return self.all(
            "SELECT t.id, t.round, t.agent_kind, t.native_id, t.outcome, t.error, "
            "t.input_tokens, t.output_tokens, t.cost_usd, t.duration_ms, t.started_at, "
            "t.finished_at, t.stop_requested_at, t.stop_requested_by, s.role, s.lane_key "
            "FROM turns t LEFT JOIN sessions s ON s.id = t.session_row "
            "WHERE t.card_id = ? ORDER BY t.id DESC LIMIT ?",
            (card_id, limit),
        )[::-1]

    # -- stopping a turn ----------------------------------------------------------------------
    def running_turn(self, card_id: int) -> Row | None:
        """The card's turn that is running now, if any (the newest)."""
        return self.one(
            "SELECT id, stop_requested_at FROM turns WHERE card_id = ? AND outcome = 'running' "
            "ORDER BY id DESC LIMIT 1",
            (card_id,),
        )

    def request_stop(self, turn_id: int, by: str) -> bool:
        return bool(
            self.run(
                "UPDATE turns SET stop_requested_at = ?, stop_requested_by = ? "
                "WHERE id = ? AND outcome = 'running' AND stop_requested_at IS NULL",
                (self.now(), by, turn_id),
            )
        )

    def stop_requested(self, turn_id: int) -> str | None:
        """Who asked to stop the turn, or ``None``."""
        r = self.one(
            "SELECT stop_requested_at, stop_requested_by FROM turns WHERE id = ?", (turn_id,)
        )
        if r is None or r["stop_requested_at"] is None:
            return None
        return str(r["stop_requested_by"] or "someone")

    def stop_requests(self, turn_ids: Sequence[int]) -> dict[int, str]:
        """Who asked to stop each of ``turn_ids`` that has a stop request (one read)."""
        if not turn_ids:
            return {}
        marks = ",".join("?" for _ in turn_ids)
        rows = self.all(
            f"SELECT id, stop_requested_by FROM turns WHERE id IN ({marks}) "
            "AND stop_requested_at IS NOT NULL",
            tuple(turn_ids),
        )
        return {int(r["id"]): str(r["stop_requested_by"] or "someone") for r in rows}

    # -- follow-ups ------------------------------------------------------------------------
    def insert_followup(self, card_id: int, body: str, actor: Actor) -> Row:
        r = self.one(
            "INSERT INTO followups (card_id, body, author, author_kind, created_at) "
            "VALUES (?, ?, ?, ?, ?) RETURNING *",
            (card_id, body, actor.name, actor.kind.value, self.now()),
        )
        assert r is not None
        return r

    def pending_followups(self, card_id: int) -> list[Row]:
        return self.all(
            "SELECT * FROM followups WHERE card_id = ? AND turn_id IS NULL ORDER BY id",
            (card_id,),
        )

    def followups(self, card_id: int, limit: int = 100) -> list[Row]:
        return self.all(
            "SELECT * FROM followups WHERE card_id = ? ORDER BY id DESC LIMIT ?", (card_id, limit)
        )[::-1]

    def deliver_followups(self, ids: Sequence[int], turn_id: int, *, steered: bool = False) -> None:
        """Mark follow-ups carried by ``turn_id``: in its prompt, or ``steered`` into it."""
        at = self.now() if steered else None
        for fid in ids:
            self.run(
                "UPDATE followups SET turn_id = ?, steered_at = ? WHERE id = ?", (turn_id, at, fid)
            )
