"""Migration 210: a link knows whether the card that waits on it is still open.

``links.card_open`` is 1 while the link's card (``links.card_id``, the dependant) is
neither ``done`` nor ``canceled``, else 0. It is set when the link is written and kept by
a trigger on ``cards`` that fires only when a card's status crosses between open and
closed (so a claim, a move between open statuses or an edit never runs it).

``claim --next`` asks on every call whether any ``todo`` card is waited on by an open
card (then fan-out weighs in and the index order is not the weight order): with
``links (card_open, depends_on)`` that question reads the open links only, instead of
every ``todo`` card (SQLite) or every link ever made (PostgreSQL); a card's own "is it
waited on" is one index probe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from laneboard.store.migrations import v0001_board
from laneboard.store.schema import Column, Index, Table

VERSION = 210
NAME = "link_card_open"

_links = next(t for t in v0001_board.TABLES if t.name == "links")

TABLES: tuple[Table, ...] = (
    replace(
        _links,
        columns=(*_links.columns, Column("card_open", "int", nullable=False)),
        indexes=(*_links.indexes, Index("links_card_open", ("card_open", "depends_on"))),
    ),
)

CLOSED = "('done', 'canceled')"

STATEMENTS: tuple[str | Mapping[str, str], ...] = (
    "ALTER TABLE links ADD COLUMN card_open {int} NOT NULL DEFAULT 1",
    "UPDATE links SET card_open = 0 WHERE card_id IN "
    f"(SELECT id FROM cards WHERE status IN {CLOSED})",
    "CREATE INDEX links_card_open ON links (card_open, depends_on)",
    {
        "sqlite": (
            "CREATE TRIGGER links_card_open AFTER UPDATE OF status ON cards "
            f"WHEN (OLD.status IN {CLOSED}) <> (NEW.status IN {CLOSED}) BEGIN "
            f"UPDATE links SET card_open = CASE WHEN NEW.status IN {CLOSED} THEN 0 ELSE 1 END "
            "WHERE card_id = NEW.id; END"
        ),
        "postgresql": (
            "CREATE OR REPLACE FUNCTION links_card_open() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN UPDATE links SET card_open = "
            f"CASE WHEN NEW.status IN {CLOSED} THEN 0 ELSE 1 END WHERE card_id = NEW.id; "
            "RETURN NULL; END $$"
        ),
    },
    {
        "postgresql": (
            "CREATE TRIGGER links_card_open AFTER UPDATE OF status ON cards FOR EACH ROW "
            f"WHEN ((OLD.status IN {CLOSED}) IS DISTINCT FROM (NEW.status IN {CLOSED})) "
            "EXECUTE FUNCTION links_card_open()"
        ),
    },
)
