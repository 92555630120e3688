"""Migration 230: the event log's indexes by card, project and run hold only the events
that name one.

Most events name no run and some no card or project (a supervisor's, an alert); every
appended event still wrote an entry into each of these indexes. Every reader of them asks
for one card, project or run (``card_id = ?``, ``IN (...)``), so each still finds its
index; the rest of the log is read by ``(xid, id)`` and by id, as before.
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0100_runs
from laneboard.store.schema import Index, Table

VERSION = 230
NAME = "event_index_partial"

_events = next(t for t in v0100_runs.TABLES if t.name == "events")

PARTIAL: tuple[Index, ...] = tuple(
    Index(f"events_{name}", (f"{name}_id", "id"), where=f"{name}_id IS NOT NULL")
    for name in ("card", "project", "run")
)

TABLES: tuple[Table, ...] = (
    replace(
        _events,
        indexes=(
            *(ix for ix in _events.indexes if ix.name not in {p.name for p in PARTIAL}),
            *PARTIAL,
        ),
    ),
)

STATEMENTS: tuple[str, ...] = (
    *(f"DROP INDEX {ix.name}" for ix in PARTIAL),
    *(
        f"CREATE INDEX {ix.name} ON events ({', '.join(ix.columns)}) WHERE {ix.where}"
        for ix in PARTIAL
    ),
)
