"""Migration 150: ``claim --next`` ranks ready cards from an index.

Within a priority tier a ``todo`` card's weight without fan-out or SLA pressure is
``2 × time in status + age`` (``domain.weights``): ordering by it is ordering by
``2 × status_since + created_at`` ascending, which no longer depends on the time it is
read at. ``cards.claim_rank`` holds that value, written with every change of
``status_since`` or ``meta`` (``store.tx``, ``store.claim_sql``), and
``cards (status, priority, claim_rank, id)`` walks the ``todo`` cards in weight order, so
``claim --next`` reads the first few instead of weighing every ready card on each call.

``claim_rank`` is NULL for a card whose order does depend on the time: a review card
(``meta.review_of``: its ``review_aging`` pressure grows with time) and a card stamped
into its status before its creation (a clock that went back). Those are weighed in full
by the statement (``cards (status, claim_rank)`` finds them without a scan), and all
cards are when one is stamped after the reader's clock (then the clamp to "no time in
status yet" matters; ``cards (status, status_since)`` tells without a scan).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from laneboard.store.migrations import v0100_runs
from laneboard.store.schema import Column, Index, Table

VERSION = 150
NAME = "claim_rank"

_cards = next(t for t in v0100_runs.TABLES if t.name == "cards")

TABLES: tuple[Table, ...] = (
    replace(
        _cards,
        columns=(*_cards.columns, Column("claim_rank", "int")),
        indexes=(
            *_cards.indexes,
            Index("cards_claim_rank", ("status", "priority", "claim_rank", "id")),
            Index("cards_status_unranked", ("status", "claim_rank")),
            Index("cards_status_since", ("status", "status_since")),
        ),
    ),
)

_BACKFILL = (
    "UPDATE cards SET claim_rank = CASE WHEN {review} IS NOT NULL "
    "OR status_since < created_at THEN NULL ELSE 2 * status_since + created_at END"
)

STATEMENTS: tuple[str | Mapping[str, str], ...] = (
    "ALTER TABLE cards ADD COLUMN claim_rank {int}",
    {
        "postgresql": _BACKFILL.format(review="(meta::jsonb ->> 'review_of')"),
        "sqlite": _BACKFILL.format(review="json_extract(meta, '$.review_of')"),
    },
    "CREATE INDEX cards_claim_rank ON cards (status, priority, claim_rank, id)",
    "CREATE INDEX cards_status_unranked ON cards (status, claim_rank)",
    "CREATE INDEX cards_status_since ON cards (status, status_since)",
)
