"""Migration 20: schedules (cards created by cron).

One row per schedule: its card template (``job``, JSON), the cron expression and time
zone, an enabled flag, the time it was last armed (added or enabled), the next due
minute, the single most recent outcome, an in-flight fire mark, and the last missed
occurrence. Minutes are epoch milliseconds at the start of the minute.
"""

from __future__ import annotations

from laneboard.store.schema import Index, Table, cols

VERSION = 20
NAME = "schedules"

TABLES: tuple[Table, ...] = (
    Table(
        "schedules",
        cols(
            "id:int! name:text! expression:text! timezone:text! job:text! enabled:int! "
            "armed_at:int! next_due_at:int last_outcome:text last_minute:int last_detail:text "
            "last_card_id:int last_outcome_at:int fired_minute:int fired_card_id:int "
            "fired_at:int missed_minute:int created_by:text! created_at:int! updated_at:int!"
        ),
        ("id",),
        (Index("schedules_name", ("name",), True),),
    ),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE schedules (
        id {pk}, name {text} NOT NULL, expression {text} NOT NULL, timezone {text} NOT NULL,
        job {text} NOT NULL, enabled {int} NOT NULL, armed_at {int} NOT NULL,
        next_due_at {int}, last_outcome {text}, last_minute {int}, last_detail {text},
        last_card_id {int}, last_outcome_at {int}, fired_minute {int}, fired_card_id {int},
        fired_at {int}, missed_minute {int}, created_by {text} NOT NULL,
        created_at {int} NOT NULL, updated_at {int} NOT NULL)""",
    "CREATE UNIQUE INDEX schedules_name ON schedules (name)",
)
