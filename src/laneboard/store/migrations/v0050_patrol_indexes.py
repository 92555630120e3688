"""Migration 50: indexes that keep the tick's reads bounded on large boards.

The workflow pass reads epics by kind and status; the patrol finds waiting questions
by kind and age. Without these both would walk every active card.
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0001_board
from laneboard.store.schema import Index, Table

VERSION = 50
NAME = "patrol_indexes"


def _with(name: str, *extra: Index) -> Table:
    base = next(t for t in v0001_board.TABLES if t.name == name)
    return replace(base, indexes=(*base.indexes, *extra))


# The two tables as they stand after this migration (same columns, one index more).
TABLES: tuple[Table, ...] = (
    _with("cards", Index("cards_kind_status", ("kind", "status"))),
    _with("comments", Index("comments_kind_created", ("kind", "created_at"))),
)

STATEMENTS: tuple[str, ...] = (
    "CREATE INDEX cards_kind_status ON cards (kind, status)",
    "CREATE INDEX comments_kind_created ON comments (kind, created_at)",
)
