"""Claim throughput under contention: laneboard's claim against a bare one-statement CAS.

For each backend, 8 processes walk the same cards (each from its own starting point)
and try to claim every one. Printed per backend: successful claims per second of
``Board.claim``, of a raw ``UPDATE ... WHERE id=? AND status='todo'`` loop on the same
kind of table measured in the same run, their ratio (goal >= 0.8), and the number of
double claims (must be 0). Exits non-zero only if a card was claimed twice.

    python bench/claim_race.py [--quick] [--backend sqlite|postgres]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

PROCESSES = 8
PG_BASE = os.environ.get("LANEBOARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def pg_url(schema: str) -> str:
    sep = "&" if "?" in PG_BASE else "?"
    return f"{PG_BASE}{sep}options=-csearch_path%3D{schema}"


def prepare(url: str, cards: int) -> list[int]:
    """A fresh board with ``cards`` todo cards; returns their ids."""
    from laneboard.board.service import Board
    from laneboard.domain.model import human
    from laneboard.store import open_store

    store = open_store(url)
    board = Board(store)
    me = human("bench")
    board.add_project(me, "B")
    ids = [board.create_card(me, "B", f"card {i}").id for i in range(cards)]
    store.close()
    return ids


def rotated(ids: list[int], index: int) -> list[int]:
    k = index * len(ids) // PROCESSES
    return ids[k:] + ids[:k]


def board_worker(url: str, index: int, ids: list[int], start: Any, out: Any) -> None:
    from laneboard.board.service import Board
    from laneboard.domain.model import agent
    from laneboard.errors import LaneboardError
    from laneboard.store import open_store

    store = open_store(url)
    board = Board(store)
    me = agent(f"w{index}")
    won: list[int] = []
    start.wait(timeout=120)
    t0 = time.perf_counter()
    for cid in rotated(ids, index):
        try:
            board.claim(me, cid)
            won.append(cid)
        except LaneboardError as err:
            if err.code != "CLAIM_CONFLICT":
                raise
    out.put((t0, time.perf_counter(), won))
    store.close()


def raw_worker(url: str, index: int, ids: list[int], start: Any, out: Any) -> None:
    sql = (
        "UPDATE cards SET status = 'in_progress', holder = ?, claim_epoch = claim_epoch + 1 "
        "WHERE id = ? AND status = 'todo'"
    )
    name = f"w{index}"
    won: list[int] = []
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///") :], timeout=30, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA synchronous = NORMAL")
        start.wait(timeout=120)
        t0 = time.perf_counter()
        for cid in rotated(ids, index):
            if conn.execute(sql, (name, cid)).rowcount == 1:
                won.append(cid)
    else:
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        pg_sql = sql.replace("?", "%s")
        start.wait(timeout=120)
        t0 = time.perf_counter()
        for cid in rotated(ids, index):
            if conn.execute(pg_sql, (name, cid)).rowcount == 1:
                won.append(cid)
    out.put((t0, time.perf_counter(), won))
    conn.close()


def race(target: Any, url: str, ids: list[int]) -> tuple[float, Counter[int]]:
    """Run the workers; returns (claims per second, wins per card)."""
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(PROCESSES)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, i, ids, start, out)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise SystemExit(f"a worker failed (exit {p.exitcode})")
    began = min(r[0] for r in results)
    ended = max(r[1] for r in results)
    wins: Counter[int] = Counter()
    for r in results:
        wins.update(r[2])
    return len(wins) / (ended - began), wins


def claimed_events(url: str) -> Counter[int]:
    from laneboard.store import open_store

    store = open_store(url)
    with store.read() as tx:
        rows = tx.all("SELECT card_id FROM events WHERE type = 'card.claimed'")
    store.close()
    return Counter(int(r["card_id"]) for r in rows)


def one_backend(name: str, cards: int) -> int:
    tmp = tempfile.mkdtemp(prefix="lb-bench-")
    schemas: list[str] = []

    def fresh_url() -> str:
        if name == "sqlite":
            return f"sqlite:///{tmp}/{uuid.uuid4().hex}.db"
        import psycopg

        schema = "lbb_" + uuid.uuid4().hex[:12]
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        schemas.append(schema)
        return pg_url(schema)

    try:
        board_url, raw_url = fresh_url(), fresh_url()
        board_ids, raw_ids = prepare(board_url, cards), prepare(raw_url, cards)
        raw_rate, raw_wins = race(raw_worker, raw_url, raw_ids)
        board_rate, board_wins = race(board_worker, board_url, board_ids)
        events = claimed_events(board_url)
    finally:
        if schemas:
            import psycopg

            with psycopg.connect(PG_BASE, autocommit=True) as conn:
                for s in schemas:
                    conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
    doubles = sum(1 for n in board_wins.values() if n > 1)
    doubles += sum(1 for n in events.values() if n > 1)
    doubles += sum(1 for n in raw_wins.values() if n > 1)
    missing = cards - len(board_wins)
    ratio = board_rate / raw_rate
    print(
        f"{name:<8} cards={cards} processes={PROCESSES}  "
        f"board claim {board_rate:8.0f}/s  raw CAS {raw_rate:8.0f}/s  "
        f"ratio {ratio:.2f} (goal >= 0.8)  double claims {doubles}"
        + (f"  unclaimed {missing}" if missing else "")
    )
    return doubles


def pg_reachable() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_BASE, connect_timeout=3):
            return True
    except Exception:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer cards (CI)")
    ap.add_argument("--backend", choices=["sqlite", "postgres"], action="append")
    args = ap.parse_args()
    cards = 300 if args.quick else 2000
    doubles = 0
    for name in args.backend or ["sqlite", "postgres"]:
        if name == "postgres" and not pg_reachable():
            print("postgres: not reachable at LANEBOARD_TEST_PG; skipped")
            continue
        doubles += one_backend(name, cards)
    return 1 if doubles else 0


if __name__ == "__main__":
    sys.exit(main())
