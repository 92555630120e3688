"""Migration 260: a card's admission failures are counted per machine.

``deferrals`` held one row per card: in a cluster, the failures of every machine to admit
a card counted toward one bound and one backoff. A machine that could not make lanes (its
disk full, its clone broken) then held back the card from the others with its backoff, and
held it for a person after its own five failures, though another machine could run it.
Each machine now keeps its own row, ``(card_id, machine)``.

A deferral is a retry schedule, not work: the rows of the old table are not carried over
(a card deferred when the board is migrated is tried again at the next poll).
"""

from __future__ import annotations

from laneboard.store.schema import Table, cols

VERSION = 260
NAME = "deferrals_per_machine"

TABLES: tuple[Table, ...] = (
    Table(
        "deferrals",
        cols(
            "card_id:int! machine:text! failures:int! next_at:int! last_error:text! updated_at:int!"
        ),
        ("card_id", "machine"),
    ),
)

STATEMENTS: tuple[str, ...] = (
    "DROP TABLE deferrals",
    """CREATE TABLE deferrals (
        card_id {int} NOT NULL, machine {text} NOT NULL, failures {int} NOT NULL,
        next_at {int} NOT NULL, last_error {text} NOT NULL, updated_at {int} NOT NULL,
        PRIMARY KEY (card_id, machine))""",
)
