"""Migration 90: events carry their writing transaction; ready cards are read in order.

On PostgreSQL each event records ``pg_current_xact_id()`` (a column default, so every
writer of the table fills it, whatever its version). Readers take events in
``(xid, id)`` order and only below the oldest transaction still running; events written
before this migration keep ``xid = 0`` and stay in their old (commit-ordered) id order.
SQLite keeps ``xid = 0``: its single writer commits in id order.

``cards (status, priority, id)`` lets the ready-card reads of ``claim --next`` and
``candidates`` walk ``todo`` cards in their order and stop at the limit instead of
sorting every ``todo`` card of the board on each call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from laneboard.store.migrations import v0001_board, v0050_patrol_indexes
from laneboard.store.schema import Column, Index, Table

VERSION = 90
NAME = "event_xid"

_events = next(t for t in v0001_board.TABLES if t.name == "events")
_cards = next(t for t in v0050_patrol_indexes.TABLES if t.name == "cards")

TABLES: tuple[Table, ...] = (
    replace(
        _events,
        columns=(*_events.columns, Column("xid", "int", nullable=False)),
        indexes=(*_events.indexes, Index("events_xid", ("xid", "id"))),
    ),
    replace(
        _cards,
        indexes=(*_cards.indexes, Index("cards_status_priority", ("status", "priority", "id"))),
    ),
)

STATEMENTS: tuple[str | Mapping[str, str], ...] = (
    "ALTER TABLE events ADD COLUMN xid {int} NOT NULL DEFAULT 0",
    {
        "postgresql": "ALTER TABLE events ALTER COLUMN xid "
        "SET DEFAULT (pg_current_xact_id()::text::bigint)"
    },
    "CREATE INDEX events_xid ON events (xid, id)",
    "CREATE INDEX cards_status_priority ON cards (status, priority, id)",
)
