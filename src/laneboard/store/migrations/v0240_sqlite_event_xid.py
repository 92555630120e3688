"""Migration 240: SQLite drops the event log's ``(xid, id)`` index.

On SQLite every event's ``xid`` is 0 (its single writer commits in id order) and every
cursor read there goes by id alone, through the primary key. The index served no read
and cost each appended event one more B-tree entry, in the one writer's lock. PostgreSQL
keeps it: its readers take events in ``(xid, id)`` order below the watermark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from laneboard.store.migrations import v0230_event_index_partial
from laneboard.store.schema import Table

VERSION = 240
NAME = "sqlite_event_xid"

_events = next(t for t in v0230_event_index_partial.TABLES if t.name == "events")

TABLES: tuple[Table, ...] = (
    replace(
        _events,
        indexes=tuple(
            replace(ix, dialects=("postgresql",)) if ix.name == "events_xid" else ix
            for ix in _events.indexes
        ),
    ),
)

STATEMENTS: tuple[Mapping[str, str], ...] = ({"sqlite": "DROP INDEX events_xid"},)
