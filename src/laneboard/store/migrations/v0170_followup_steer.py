"""Migration 170: a follow-up records how it reached the agent.

``followups.steered_at``: set when the runtime steered the follow-up into the card's
running turn (an agent kind that supports it, Codex ``turn/steer``) rather than appending
it to the next turn's prompt; ``turn_id`` is then the turn that was running. ``NULL`` for
a follow-up carried by a turn's prompt (or still queued).
"""

from __future__ import annotations

from dataclasses import replace

from laneboard.store.migrations import v0120_transcripts
from laneboard.store.schema import Column, Table

VERSION = 170
NAME = "followup_steer"

_followups = next(t for t in v0120_transcripts.TABLES if t.name == "followups")

TABLES: tuple[Table, ...] = (
    replace(_followups, columns=(*_followups.columns, Column("steered_at", "int"))),
)

STATEMENTS: tuple[str, ...] = ("ALTER TABLE followups ADD COLUMN steered_at {int}",)
