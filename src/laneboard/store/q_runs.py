"""Runs: one row per goal's work, its compare-and-swap updates and its cards' counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from laneboard.store.base import Row
from laneboard.store.q_base import Queries
from laneboard.store.rows import dumps

LIVE_QUEUE = ("pending", "processing")


class RunQueries(Queries):
    def insert_run(
        self, project_id: int, goal: str, status: str, options: dict[str, Any], created_by: str
    ) -> int:
        now = self.now()
        row = self.one(
            "INSERT INTO runs (project_id, goal, status, options, started_at, created_by, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (project_id, goal, status, dumps(options), now, created_by, now, now),
        )
        assert row is not None
        return int(row["id"])

    def run_row(self, run_id: int, *, lock: bool = False) -> Row | None:
        sql = "SELECT * FROM runs WHERE id = ?"
        if lock and self.pg:
            sql += " FOR UPDATE"
        return self.one(sql, (run_id,))

    def run_rows(
        self,
        *,
        project_id: int | None = None,
        statuses: Sequence[str] = (),
        limit: int = 500,
    ) -> list[Row]:
        where: list[str] = []
        params: list[Any] = []
        if project_id is not None:
            where.append("project_id = ?")
            params.append(project_id)
        if statuses:
            where.append("status IN (" + ",".join("?" * len(statuses)) + ")")
            params.extend(statuses)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        return self.all(f"SELECT * FROM runs{clause} ORDER BY id DESC LIMIT ?", [*params, limit])

    def ticked_run_rows(self, statuses: Sequence[str]) -> list[Row]:
        """Runs in ``statuses`` that the supervisor's run clock drives: every run but an
        orchestrated one (its own runtime, lb orchestrate, drives it)."""
        return self.all(
            "SELECT * FROM runs r WHERE r.status IN (" + ",".join("?" * len(statuses)) + ") "
            "AND NOT EXISTS (SELECT 1 FROM orchestrations o WHERE o.run_id = r.id) "
            "ORDER BY r.id",
            list(statuses),
        )

    def update_run(
        self,
        run_id: int,
        fields: dict[str, Any],
        *,
        version: int | None = None,
        statuses: Sequence[str] = (),
    ) -> Row | None:
        """Set columns of a run where it still has ``version`` (and one of ``statuses``);
        bumps its version. None: no row matched (another write won)."""
        cols = list(fields)
        vals = [dumps(fields[c]) if c == "options" else fields[c] for c in cols]
        sets = "".join(f"{c} = ?, " for c in cols)
        where = ["id = ?"]
        params: list[Any] = [*vals, self.now(), run_id]
        if version is not None:
            where.append("version = ?")
            params.append(version)
        if statuses:
            where.append("status IN (" + ",".join("?" * len(statuses)) + ")")
            params.extend(statuses)
        return self.one(
            f"UPDATE runs SET {sets}version = version + 1, updated_at = ? "
            f"WHERE {' AND '.join(where)} RETURNING *",
            params,
        )

    def run_card_statuses(self, run_id: int) -> list[str]:
        """The status of each card of a run (its own cards only, never the board's)."""
        got = self.all("SELECT status FROM cards WHERE run_id = ? ORDER BY id", (run_id,))
        return [str(r["status"]) for r in got]

    def run_card_counts(self, run_ids: Sequence[int]) -> dict[int, dict[str, int]]:
        """run -> card status -> count."""
        out: dict[int, dict[str, int]] = {}
        if not run_ids:
            return out
        got = self.all(
            "SELECT run_id, status, count(*) AS n FROM cards WHERE run_id IN ("
            + ",".join("?" * len(run_ids))
            + ") GROUP BY run_id, status",
            list(run_ids),
        )
        for r in got:
            out.setdefault(int(r["run_id"]), {})[str(r["status"])] = int(r["n"])
        return out

    def run_queue_rows(self, run_id: int, states: Sequence[str] = LIVE_QUEUE) -> list[Row]:
        """Queue rows (dispatches and the turns they run) of a run's cards."""
        return self.all(
            "SELECT q.* FROM queue q JOIN cards c ON c.id = q.card_id WHERE c.run_id = ? "
            "AND q.state IN (" + ",".join("?" * len(states)) + ") ORDER BY q.id",
            [run_id, *states],
        )

    def run_ids_not_claiming(self, claiming: Sequence[str]) -> set[int]:
        """Runs whose cards take no new claims (their status is not one of ``claiming``)."""
        got = self.all(
            "SELECT id FROM runs WHERE status NOT IN (" + ",".join("?" * len(claiming)) + ")",
            list(claiming),
        )
        return {int(r["id"]) for r in got}

    def run_status_counts(self, run_id: int) -> dict[str, int]:
        """The status snapshot's counts for one run, in one statement."""
        row = self.one(
            "SELECT "
            "(SELECT count(*) FROM queue q JOIN cards c ON c.id = q.card_id "
            " WHERE c.run_id = ? AND q.state = 'processing') AS active_agents, "
            "(SELECT count(*) FROM queue q JOIN cards c ON c.id = q.card_id "
            " WHERE c.run_id = ? AND q.state = 'pending') AS queued_dispatches, "
            "(SELECT count(*) FROM cards WHERE run_id = ? AND status = 'in_review') "
            " AS open_deliveries, "
            "(SELECT count(*) FROM cards WHERE run_id = ? AND status = 'in_review' "
            " AND acceptance_mode = 'human') AS pending_approvals, "
            "(SELECT count(*) FROM cards WHERE run_id = ? AND status IN "
            " ('blocked', 'awaiting')) AS blockers",
            (run_id, run_id, run_id, run_id, run_id),
        )
        assert row is not None
        return {k: int(v) for k, v in row.items()}

    def run_totals(self) -> list[Row]:
        """Runs by status, with their failed iterations and ticks summed."""
        return self.all(
            "SELECT status, count(*) AS n, sum(errors_total) AS errors FROM runs "
            "GROUP BY status ORDER BY status"
        )
