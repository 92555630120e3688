"""Schedules: one row per named cron rule, with its fire marks."""

from __future__ import annotations

from typing import Any

from laneboard.store.base import Row
from laneboard.store.q_base import Queries
from laneboard.store.rows import dumps


class ScheduleQueries(Queries):
    def schedule_rows(self) -> list[Row]:
        return self.all("SELECT * FROM schedules ORDER BY name")

    def schedule_row(self, name: str) -> Row | None:
        return self.one("SELECT * FROM schedules WHERE name = ?", (name,))

    def update_schedule(self, sid: int, fields: dict[str, Any]) -> int:
        """Set columns of a schedule; bumps ``updated_at``. Returns the rows changed."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        return self.run(
            f"UPDATE schedules SET {sets}, updated_at = ? WHERE id = ?",
            [*fields.values(), self.now(), sid],
        )

    def insert_schedule(
        self,
        name: str,
        expression: str,
        timezone: str,
        job: dict[str, Any],
        enabled: bool,
        next_due_at: int | None,
        created_by: str,
        now: int,
    ) -> None:
        self.run(
            "INSERT INTO schedules (name, expression, timezone, job, enabled, armed_at, "
            "next_due_at, created_by, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (name, expression, timezone, dumps(job), int(enabled), now, next_due_at,
             created_by, now, now),
        )  # fmt: skip

    def delete_schedule(self, sid: int) -> None:
        self.run("DELETE FROM schedules WHERE id = ?", (sid,))

    def mark_schedule_fired(self, sid: int, minute: int) -> bool:
        """Claim a minute's fire (compare-and-swap): False when disabled or already marked."""
        return (
            self.run(
                "UPDATE schedules SET fired_minute = ?, fired_at = ?, fired_card_id = NULL, "
                "updated_at = ? WHERE id = ? AND enabled = 1 AND "
                "(fired_minute IS NULL OR fired_minute <> ?)",
                (minute, self.now(), self.now(), sid, minute),
            )
            == 1
        )
