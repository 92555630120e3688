"""Migration 220: the cards' indexes hold only the rows their readers look for.

Every write of a card's status touched up to fifteen indexes: SQLite rewrites each index
whose columns changed, PostgreSQL adds an entry to every index of the table for each new
row version. Most of them serve one status or a few rows, so they become partial:

* ``todo`` cards only: ``cards_todo_rank`` (``claim --next``'s weight order, was
  ``cards_claim_rank``), ``cards_todo_unranked`` (the review cards it weighs in full, was
  ``cards_status_unranked``) and ``cards_todo_priority`` (candidates in
  ``(priority, id)`` order, was ``cards_status_priority``);
* ``in_progress`` cards only: ``cards_running_heartbeat`` (stale claims, was
  ``cards_status_heartbeat``);
* epics only: ``cards_epic_status`` (was ``cards_kind_status``);
* the rows that have a value: ``cards_run``, ``cards_parent`` and the unique
  ``cards_idempotency_key``;
* ``cards_updated`` is dropped: nothing reads cards by ``updated_at``.

Every reader names the status (or the value) it wants, so each still finds its index.
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0150_claim_rank
from laneboard.store.schema import Index, Table

VERSION = 220
NAME = "card_index_diet"

_cards = next(t for t in v0150_claim_rank.TABLES if t.name == "cards")

TODO = "status = 'todo'"

# Each keeps the columns it had, its status first: a planner without statistics (SQLite)
# then still sees the equality its readers put on that column and the order they read in.
PARTIAL: tuple[Index, ...] = (
    Index("cards_todo_rank", ("status", "priority", "claim_rank", "id"), where=TODO),
    Index("cards_todo_unranked", ("status", "claim_rank"), where=f"{TODO} AND claim_rank IS NULL"),
    Index("cards_todo_priority", ("status", "priority", "id"), where=TODO),
    Index("cards_running_heartbeat", ("status", "heartbeat_at"), where="status = 'in_progress'"),
    Index("cards_epic_status", ("kind", "status"), where="kind = 'epic'"),
    Index("cards_run", ("run_id", "status"), where="run_id IS NOT NULL"),
    Index("cards_parent", ("parent_id",), where="parent_id IS NOT NULL"),
    Index("cards_idempotency_key", ("idempotency_key",), True, "idempotency_key IS NOT NULL"),
)

REPLACED = (
    "cards_updated",
    "cards_claim_rank",
    "cards_status_unranked",
    "cards_status_priority",
    "cards_status_heartbeat",
    "cards_kind_status",
    "cards_run",
    "cards_parent",
    "cards_idempotency_key",
)

TABLES: tuple[Table, ...] = (
    replace(
        _cards,
        indexes=(*(ix for ix in _cards.indexes if ix.name not in REPLACED), *PARTIAL),
    ),
)


def _create(ix: Index) -> str:
    unique = "UNIQUE " if ix.unique else ""
    return f"CREATE {unique}INDEX {ix.name} ON cards ({', '.join(ix.columns)}) WHERE {ix.where}"


STATEMENTS: tuple[str, ...] = (
    *(f"DROP INDEX {name}" for name in REPLACED),
    *(_create(ix) for ix in PARTIAL),
)
