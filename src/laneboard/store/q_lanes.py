"""Lane records: one row per card round's git worktree and branch."""

from __future__ import annotations

from typing import Any

from laneboard.store.base import Row
from laneboard.store.q_base import Queries


class LaneQueries(Queries):
    def lane_row(self, card_id: int, round_: int) -> Row | None:
        return self.one("SELECT * FROM lanes WHERE card_id = ? AND round = ?", (card_id, round_))

    def lane_row_or_latest(self, card_id: int, round_: int) -> Row | None:
        """A card's lane of ``round_``, else its newest (one read)."""
        return self.one(
            "SELECT * FROM lanes WHERE card_id = ? "
            "ORDER BY CASE WHEN round = ? THEN 0 ELSE 1 END, round DESC LIMIT 1",
            (card_id, round_),
        )

    def lanes_elsewhere(self, rounds: dict[int, int], machine: str) -> dict[int, str]:
        """Of these cards (id -> its current round), those whose current round another
        machine has worked on (its active lane, and a handoff of the round there; a lane
        alone is an admission under way): card id -> that machine."""
        ids = list(rounds)
        out: dict[int, str] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            got = self.all(
                "SELECT l.card_id, l.round, l.machine FROM lanes l WHERE l.state = 'active' "
                "AND l.machine IS NOT NULL AND l.machine <> ? "
                f"AND l.card_id IN ({','.join('?' * len(chunk))}) AND EXISTS (SELECT 1 FROM "
                "queue q WHERE q.card_id = l.card_id AND q.round = l.round "
                "AND q.machine = l.machine)",
                (machine, *chunk),
            )
            for r in got:
                if rounds.get(int(r["card_id"])) == int(r["round"]):
                    out[int(r["card_id"])] = str(r["machine"])
        return out

    def lane_rows_of(self, card_id: int) -> list[Row]:
        return self.all("SELECT * FROM lanes WHERE card_id = ? ORDER BY round", (card_id,))

    def lane_rows(self, states: tuple[str, ...] = ()) -> list[Row]:
        """Every lane, or those in ``states``, by id."""
        if states:
            marks = ", ".join("?" * len(states))
            return self.all(f"SELECT * FROM lanes WHERE state IN ({marks}) ORDER BY id", states)
        return self.all("SELECT * FROM lanes ORDER BY id")

    def insert_lane(
        self,
        card_id: int,
        round_: int,
        project_id: int,
        repo: str,
        path: str,
        branch: str,
        base: str,
        base_commit: str,
        machine: str | None = None,
    ) -> None:
        now = self.now()
        self.run(
            "INSERT INTO lanes (card_id, round, project_id, repo, path, branch, base, "
            "base_commit, state, created_at, updated_at, machine) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, ?)",
            (card_id, round_, project_id, repo, path, branch, base,
             base_commit, now, now, machine),
        )  # fmt: skip

    def refresh_lane(
        self,
        lane_id: int,
        repo: str,
        path: str,
        branch: str,
        base: str | None = None,
        base_commit: str | None = None,
        machine: str | None = None,
    ) -> None:
        """New place for a lane (and, given, a new base and the machine whose lane it is
        now); a cleaned lane is active again."""
        self.run(
            "UPDATE lanes SET repo = ?, path = ?, branch = ?, updated_at = ?, "
            "base = COALESCE(?, base), base_commit = COALESCE(?, base_commit), "
            "machine = COALESCE(?, machine), "
            "state = CASE WHEN state = 'cleaned' THEN 'active' ELSE state END WHERE id = ?",
            (repo, path, branch, self.now(), base, base_commit, machine, lane_id),
        )

    def mark_lane_landed(self, lane_id: int, merge_commit: str, target_branch: str | None) -> None:
        now = self.now()
        self.run(
            "UPDATE lanes SET state = 'landed', merge_commit = ?, target_branch = ?, "
            "landed_at = ?, updated_at = ? WHERE id = ?",
            (merge_commit, target_branch, now, now, lane_id),
        )

    def mark_lane_cleaned(self, lane_id: int) -> None:
        now = self.now()
        self.run(
            "UPDATE lanes SET state = 'cleaned', cleaned_at = ?, updated_at = ? WHERE id = ?",
            (now, now, lane_id),
        )

    def delete_lane(self, lane_id: int) -> None:
        self.run("DELETE FROM lanes WHERE id = ?", (lane_id,))

    def done_cards_with_active_lanes(self, limit: int) -> list[int]:
        """Done cards whose current round's lane is still active (not landed), by id."""
        got = self.all(
            "SELECT c.id FROM lanes l JOIN cards c ON c.id = l.card_id WHERE l.state = "
            "'active' AND c.status = 'done' AND l.round = c.delivery_round ORDER BY c.id "
            "LIMIT ?",
            (limit,),
        )
        return [int(r["id"]) for r in got]

    def lane_rows_ended(self) -> list[Row]:
        """Every lane, by id, each with ``card_ended`` (1: its card is done or canceled)."""
        return self.all(
            "SELECT l.*, CASE WHEN c.status IN ('done', 'canceled') THEN 1 ELSE 0 END "
            "AS card_ended FROM lanes l LEFT JOIN cards c ON c.id = l.card_id ORDER BY l.id"
        )

    def terminal_lane_rows(self, card_id: int | None = None) -> list[Row]:
        """Active or landed lanes of terminal cards (of one card if given), by id."""
        sql = (
            "SELECT l.* FROM lanes l JOIN cards c ON c.id = l.card_id "
            "WHERE l.state IN ('active', 'landed') AND c.status IN ('done', 'canceled')"
        )
        params: tuple[Any, ...] = ()
        if card_id is not None:
            sql += " AND c.id = ?"
            params = (card_id,)
        return self.all(sql + " ORDER BY l.id", params)

    def last_landing_event(self, card_id: int) -> Row | None:
        """The newest ``lane.landed`` or ``lane.land_blocked`` event of a card (type, payload)."""
        return self.one(
            "SELECT type, payload FROM events WHERE card_id = ? AND type IN "
            "('lane.landed', 'lane.land_blocked') ORDER BY id DESC LIMIT 1",
            (card_id,),
        )

    def count_lanes(self, states: tuple[str, ...]) -> int:
        marks = ", ".join("?" * len(states))
        got = self.scalar(f"SELECT count(*) FROM lanes WHERE state IN ({marks})", states)
        return int(got or 0)

    def cards_in_flight(self, project_id: int) -> list[int]:
        """Cards of a project whose work is not landed yet, by id: claimed or delivered, or
        not canceled with a lane still active (made, not landed)."""
        got = self.all(
            "SELECT c.id FROM cards c WHERE c.project_id = ? AND (c.status IN "
            "('in_progress', 'in_review') OR (c.status <> 'canceled' AND EXISTS (SELECT 1 "
            "FROM lanes l WHERE l.card_id = c.id AND l.state = 'active'))) ORDER BY c.id",
            (project_id,),
        )
        return [int(r["id"]) for r in got]

    def count_other_in_progress(self, project_id: int, card_id: int) -> int:
        """In-progress cards of a project other than ``card_id``."""
        got = self.scalar(
            "SELECT count(*) AS n FROM cards WHERE project_id = ? AND status = 'in_progress' "
            "AND id <> ?",
            (project_id, card_id),
        )
        return int(got or 0)
