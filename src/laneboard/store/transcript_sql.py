"""A running turn's transcript entries and their ``turn.output`` event, as one write.

On PostgreSQL the entries (one multi-row insert) and the event are one statement: one
round trip, committed on its own. On SQLite they are two statements under one short write
lock. Row ids follow the entries' order (one insert, its rows in the order given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from laneboard.domain.model import Actor
from laneboard.store.rows import dumps

if TYPE_CHECKING:
    from laneboard.store.base import Store
    from laneboard.store.tx import Tx

Entries = Sequence[tuple[int, int, dict[str, Any]]]  # (seq, at, entry) of one turn
ROWS_PER_STATEMENT = 500  # well under either database's limit on parameters
_VALUES = "(?, ?, ?, ?, ?, ?)"
INSERT = "INSERT INTO transcript (turn_id, card_id, seq, at, type, entry) VALUES "


def insert_sql(turn_id: int, card_id: int, entries: Entries) -> tuple[str, list[Any]]:
    """One insert of ``entries`` (at most ``ROWS_PER_STATEMENT``), returning their ids."""
    params: list[Any] = []
    for seq, at, entry in entries:
        params += [turn_id, card_id, seq, at, entry["type"], dumps(entry)]
    return INSERT + ", ".join([_VALUES] * len(entries)) + " RETURNING id", params


def append_output(store: Store, actor: Actor, card: Any, turn_id: int, entries: Entries) -> None:
    """Write ``entries`` of turn ``turn_id`` of ``card`` with their ``turn.output`` event
    (``entries``, ``last``: the last row's id), a transaction per ``ROWS_PER_STATEMENT``."""
    for at in range(0, len(entries), ROWS_PER_STATEMENT):
        _append(store, actor, card, turn_id, entries[at : at + ROWS_PER_STATEMENT])


def append_output_in(tx: Tx, actor: Actor, card: Any, turn_id: int, entries: Entries) -> None:
    """``append_output`` in the caller's transaction (the one that records the turn's end):
    the entries' inserts, and their ``turn.output`` event appended last."""
    last = tx.append_transcript(turn_id, card.id, entries)
    tx.append_event("turn.output", actor, card_id=card.id, project_id=card.project_id,
                    run_id=card.run_id,
                    payload={"turn": turn_id, "entries": len(entries), "last": last})  # fmt: skip


def _append(store: Store, actor: Actor, card: Any, turn_id: int, batch: Entries) -> None:
    if store.dialect != "postgresql":
        with store.write() as tx:
            append_output_in(tx, actor, card, turn_id, batch)
        return
    insert, params = insert_sql(turn_id, card.id, batch)
    sql = (
        f"WITH t AS ({insert}), "
        "e AS (INSERT INTO events (at, type, card_id, project_id, run_id, actor, actor_kind, "
        "payload) SELECT ?, 'turn.output', ?, ?, ?, ?, ?, "
        "?::text || max(t.id)::text || ?::text FROM t RETURNING id, xid) "
        "SELECT e.id AS event_id, e.xid AS event_xid FROM e"
    )
    head, tail = f'{{"entries":{len(batch)},"last":', f',"turn":{turn_id}}}'
    event = [store.clock.now_ms(), card.id, card.project_id, card.run_id, actor.name,
             actor.kind.value, head, tail]  # fmt: skip
    store.write_statement(sql, [*params, *event], types="turn.output")
