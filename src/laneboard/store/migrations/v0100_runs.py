"""Migration 100: runs (the work toward one goal in one project).

One row per run: its project, goal, status, loop options (JSON), iteration and error
counters, convergence state and reason, start and end times, the last error, how a stop
was asked for (``drain`` or ``force``) and a version for compare-and-swap updates. The
``run_id`` columns of cards and events (present since migration 1) name a run; both are
indexed here so a run's cards and events are read without a scan.
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0090_event_xid
from laneboard.store.schema import Index, Table, cols

VERSION = 100
NAME = "runs"

_cards = next(t for t in v0090_event_xid.TABLES if t.name == "cards")
_events = next(t for t in v0090_event_xid.TABLES if t.name == "events")

TABLES: tuple[Table, ...] = (
    Table(
        "runs",
        cols(
            "id:int! project_id:int! goal:text! status:text! options:text! iterations:int! "
            "consecutive_errors:int! errors_total:int! convergence_state:text "
            "convergence_reason:text started_at:int! ended_at:int last_error:text "
            "last_tick_at:int stop_mode:text created_by:text! created_at:int! updated_at:int! "
            "version:int!"
        ),
        ("id",),
        (Index("runs_project", ("project_id", "id")), Index("runs_status", ("status",))),
    ),
    replace(_cards, indexes=(*_cards.indexes, Index("cards_run", ("run_id", "status")))),
    replace(_events, indexes=(*_events.indexes, Index("events_run", ("run_id", "id")))),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE runs (
        id {pk}, project_id {int} NOT NULL REFERENCES projects (id), goal {text} NOT NULL,
        status {text} NOT NULL, options {text} NOT NULL DEFAULT '{{}}',
        iterations {int} NOT NULL DEFAULT 0, consecutive_errors {int} NOT NULL DEFAULT 0,
        errors_total {int} NOT NULL DEFAULT 0, convergence_state {text},
        convergence_reason {text}, started_at {int} NOT NULL, ended_at {int},
        last_error {text}, last_tick_at {int}, stop_mode {text}, created_by {text} NOT NULL,
        created_at {int} NOT NULL, updated_at {int} NOT NULL, version {int} NOT NULL DEFAULT 1)""",
    "CREATE INDEX runs_project ON runs (project_id, id)",
    "CREATE INDEX runs_status ON runs (status)",
    "CREATE INDEX cards_run ON cards (run_id, status)",
    "CREATE INDEX events_run ON events (run_id, id)",
)
