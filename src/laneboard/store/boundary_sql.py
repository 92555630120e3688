"""Queries of the turn boundary check (``supervisor.boundary``)."""

from __future__ import annotations

import json

from laneboard.store.rows import dumps as dumps
from laneboard.store.tx import Tx


def landed_merges(tx: Tx, since_event: int) -> set[str]:
    """Merge commits laneboard's landings recorded after event ``since_event``."""
    got = tx.all(
        "SELECT payload FROM events WHERE type = 'lane.landed' AND id > ? ORDER BY id",
        (since_event,),
    )
    out: set[str] = set()
    for r in got:
        commit = json.loads(r["payload"]).get("merge_commit")
        if isinstance(commit, str) and commit:
            out.add(commit)
    return out


def queued_rows(tx: Tx, card_id: int) -> int:
    """Dispatch rows of a card still pending or processing."""
    got = tx.scalar(
        "SELECT count(*) AS n FROM queue WHERE card_id = ? AND state IN ('pending', 'processing')",
        (card_id,),
    )
    return int(got or 0)
