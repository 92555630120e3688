"""The session records that may still have a process (open, running, idle) are read
through an index of their own. A supervisor that starts reads them under the write lock,
and ``lb status`` reads them on every call; the table keeps a record per card and role
for good, so the read walked every session the board ever had."""

from __future__ import annotations

from typing import Any

from laneboard.store import Store
from laneboard.supervisor import records

STATES = ("open", "running", "idle", "closed", "stale")


def test_only_the_live_sessions_are_read_in_order(store: Store) -> None:
    with store.write() as tx:
        for n in range(10):
            records.save_session(
                tx, "scripted", f"worker-P-{n}", card_id=None, role="worker", cwd="/tmp",
                native_id=None, round_=1, state=STATES[n % len(STATES)],
            )  # fmt: skip
    with store.read() as tx:
        live = records.live_sessions(tx)
    assert [s.lane_key for s in live] == [
        f"worker-P-{n}" for n in range(10) if STATES[n % len(STATES)] in records.LIVE_SESSION
    ]


def test_the_live_read_is_an_index_search_on_sqlite(sqlite_store: Store) -> None:
    seen: list[str] = []
    with sqlite_store.read() as tx:
        read = tx.all

        def spy(sql: str, params: Any = ()) -> Any:
            seen.append(sql)
            return read(sql, params)

        tx.all = spy  # type: ignore[method-assign]
        records.live_sessions(tx)
        tx.all = read  # type: ignore[method-assign]
        [sql] = seen
        plan = [str(r["detail"]) for r in tx.all(f"EXPLAIN QUERY PLAN {sql}")]
    assert any("USING INDEX sessions_live" in step for step in plan), plan
