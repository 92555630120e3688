"""Migration 40: the alert ledger (de-duplication of notices, keyed by state).

One row per de-duplication key: the state last notified, its severity tier, the
payload sent, the card it concerns (if any), when the key was first and last sent,
and how many times it was sent. A repeat of the same state is suppressed; a new state
or a higher severity tier is sent again.
"""

from __future__ import annotations

from laneboard.store.schema import Index, Table, cols

VERSION = 40
NAME = "alerts"

TABLES: tuple[Table, ...] = (
    Table(
        "alerts",
        cols(
            "dedup_key:text! state:text! severity:text! payload:text! card_id:int "
            "first_at:int! sent_at:int! sends:int!"
        ),
        ("dedup_key",),
        (Index("alerts_card", ("card_id",)),),
    ),
)

STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE alerts (
        dedup_key {text} NOT NULL PRIMARY KEY, state {text} NOT NULL,
        severity {text} NOT NULL, payload {text} NOT NULL DEFAULT '{{}}', card_id {int},
        first_at {int} NOT NULL, sent_at {int} NOT NULL, sends {int} NOT NULL DEFAULT 1)""",
    "CREATE INDEX alerts_card ON alerts (card_id)",
)
