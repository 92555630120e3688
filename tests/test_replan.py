"""PostgreSQL: a statement planned while a table was tiny is planned again as the board
grows, so a lookup by key does not go on reading the whole table.

The server keeps a prepared statement's generic plan until something invalidates it
(an ``ANALYZE``, a schema change). A board starts empty: its report writes and its
"has this round a report" checks are planned while ``reports`` holds a handful of rows,
as sequential scans, the right plan then. Where nothing analyzes the table (autovacuum
off, or a table growing faster than it is analyzed) that plan stayed for the life of the
connection, and each report and delivery read every report ever written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import agent, human
from laneboard.store import Store
from laneboard.store.postgres import REPLAN_FIRST, REPLAN_MAX, PostgresStore

ME, WORKER = human("alice"), agent("w1")


@pytest.fixture
def pg(postgres_store: Store) -> Store:
    return postgres_store


def _deliver(board: Board, n: int) -> None:
    for i in range(n):
        card = board.create_card(ME, "R", f"card {i}", acceptance_mode="off")
        board.claim(WORKER, card.ref)
        board.report(WORKER, card.ref, "done")
        board.move(WORKER, card.ref, "in_review")


def _grow_reports(store: Store, rows: int) -> None:
    """``rows`` more reports, on rounds of one card no statement here asks for."""
    with store.write() as tx:
        cid = tx.scalar("SELECT min(id) FROM cards")
        tx.run(
            "INSERT INTO reports (card_id, round, body, evidence, author, author_kind, "
            "created_at) SELECT ?, g, 'old', '[]', 'w1', 'agent', 0 "
            "FROM generate_series(1000, 999 + ?) AS g",
            (cid, rows),
        )


def _plans_reading_reports(store: Store) -> dict[str, list[str]]:
    """The node types that read ``reports`` in the plan each prepared statement of the
    pool's connections that reads it would run now (its generic plan once the server
    chose one; the arguments are NULLs, which only a custom plan would fold)."""
    assert isinstance(store, PostgresStore)
    found: dict[str, list[str]] = {}
    for raw in list(store._free):
        rows = raw.execute(
            "SELECT name, statement, parameter_types::text[] AS types "
            "FROM pg_prepared_statements WHERE statement LIKE '%reports%'"
        ).fetchall()
        for row in rows:
            args = ", ".join(f"NULL::{t}" for t in row["types"])
            plan = raw.execute(
                f"EXPLAIN (FORMAT JSON, COSTS OFF) EXECUTE {row['name']}({args})"
            ).fetchone()
            found[row["statement"][:60]] = sorted(_scans(_plan_of(plan), "reports"))
    return found


def _plan_of(row: Any) -> Any:
    value = next(iter(row.values()))
    return (json.loads(value) if isinstance(value, str) else value)[0]["Plan"]


def _scans(node: Any, table: str) -> list[str]:
    got = [node["Node Type"]] if node.get("Relation Name") == table else []
    for child in node.get("Plans", []):
        got += _scans(child, table)
    return got


def _use(store: Store, times: int) -> None:
    for _ in range(times):
        store.query("SELECT 1 AS one")


def test_a_board_that_grew_reads_its_reports_by_key(pg: Store) -> None:
    board = Board(pg)
    board.add_project(ME, "R")
    _deliver(board, 5)
    pg.query("ANALYZE reports")  # as autovacuum's first pass, or an operator's, would
    _deliver(board, 15)  # prepared, and generic by now: planned for a one-page table
    _grow_reports(pg, 20_000)  # faster than anything analyzes it again
    assert isinstance(pg, PostgresStore)
    for raw in pg._free:  # as many uses later as the longest interval
        pg._replan_in[raw] = (0, REPLAN_MAX)
    _deliver(board, 15)
    plans = _plans_reading_reports(pg)
    assert plans, "the report and delivery statements are prepared"
    assert all(nodes and "Seq Scan" not in nodes for nodes in plans.values()), plans


def test_connections_plan_again_at_doubling_intervals(pg: Store) -> None:
    assert isinstance(pg, PostgresStore)
    board = Board(pg)
    board.add_project(ME, "R")
    _deliver(board, 8)
    raw = pg._free[-1]  # the connection each ``query`` here takes (the pool is a stack)
    left, _gap = pg._replan_in[raw]

    def prepared() -> int:
        return int(pg.query("SELECT count(*) AS n FROM pg_prepared_statements")[0]["n"])

    assert prepared() > 0
    _use(pg, left - 2)
    assert prepared() > 0  # its last use before it is due: nothing is dropped
    assert prepared() == 0  # due: its statements go, to be planned again
    _deliver(board, 8)
    assert prepared() > 0
    assert pg._replan_in[raw][1] == 2 * REPLAN_FIRST  # the next interval is twice the first
    _use(pg, pg._replan_in[raw][0])
    assert prepared() == 0


def test_a_dropped_connection_and_its_cursor_are_freed(pg: Store) -> None:
    """Each pooled connection keeps one cursor for its statements; a connection the pool
    drops (broken, or the store closed) is freed with it, not kept alive by the cursor."""
    import gc
    import weakref

    from laneboard.store.postgres import _PgConn

    assert isinstance(pg, PostgresStore)
    raw = pg._acquire()
    assert _PgConn(raw).execute("SELECT 1 AS x") == [{"x": 1}]  # its cursor is made
    gone = weakref.ref(raw)
    pg._release(raw, broken=True)
    del raw
    gc.collect()
    assert gone() is None
    assert pg.query("SELECT 2 AS x") == [{"x": 2}]  # the pool goes on with another
