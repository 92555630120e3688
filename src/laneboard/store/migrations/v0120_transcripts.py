"""Migration 120: turn transcripts, follow-ups to a worker, and stopping a running turn.

``transcript`` keeps each turn's entries (``domain.transcript``: one JSON shape for every
agent kind) in the order the agent produced them; ``followups`` queues a person's
messages for a card's next turn (``turn_id`` is the turn that carried one);
``turns.stop_requested_at``/``stop_requested_by`` ask the supervisor running the turn to
stop it.
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0010_supervisor
from laneboard.store.schema import Column, Index, Table, cols

VERSION = 120
NAME = "transcripts"

_turns = next(t for t in v0010_supervisor.TABLES if t.name == "turns")

TABLES: tuple[Table, ...] = (
    Table(
        "transcript",
        cols("id:int! turn_id:int! card_id:int! seq:int! at:int! type:text! entry:text!"),
        ("id",),
        (Index("transcript_card", ("card_id", "id")), Index("transcript_turn", ("turn_id", "seq"))),
    ),
    Table(
        "followups",
        cols(
            "id:int! card_id:int! body:text! author:text! author_kind:text! created_at:int! "
            "turn_id:int"
        ),
        ("id",),
        (Index("followups_card", ("card_id", "turn_id")),),
    ),
    replace(
        _turns,
        columns=(
            *_turns.columns,
            Column("stop_requested_at", "int"),
            Column("stop_requested_by", "text"),
        ),
    ),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE transcript (
        id {pk}, turn_id {int} NOT NULL, card_id {int} NOT NULL, seq {int} NOT NULL,
        at {int} NOT NULL, type {text} NOT NULL, entry {text} NOT NULL)""",
    "CREATE INDEX transcript_card ON transcript (card_id, id)",
    "CREATE INDEX transcript_turn ON transcript (turn_id, seq)",
    """CREATE TABLE followups (
        id {pk}, card_id {int} NOT NULL, body {text} NOT NULL, author {text} NOT NULL,
        author_kind {text} NOT NULL, created_at {int} NOT NULL, turn_id {int})""",
    "CREATE INDEX followups_card ON followups (card_id, turn_id)",
    "ALTER TABLE turns ADD COLUMN stop_requested_at {int}",
    "ALTER TABLE turns ADD COLUMN stop_requested_by {text}",
)
