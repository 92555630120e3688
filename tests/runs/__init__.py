"""Tests of runs. Their events are read from the table itself: the log's readers on
PostgreSQL show only events below the cluster's oldest running transaction, which other
sessions on a shared server hold back."""

from __future__ import annotations

import json
from typing import Any

from laneboard.store import Store


def run_events(store: Store, run_id: int) -> list[dict[str, Any]]:
    """A run's events in id order: type and payload."""
    with store.read() as tx:
        got = tx.all("SELECT type, payload FROM events WHERE run_id = ? ORDER BY id", (run_id,))
    return [{"type": r["type"], "payload": json.loads(r["payload"])} for r in got]
