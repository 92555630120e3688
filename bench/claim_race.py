"""Claim throughput under contention: laneboard's claims against a bare one-statement CAS.

For each backend, 8 worker processes race on one board of todo cards, in two modes:

* ``claim``: each walks every card (from its own starting point) and claims it with
  ``Board.claim``; the bare loop runs ``UPDATE cards ... WHERE id = ? AND status = 'todo'``;
* ``claim-next``: each calls ``Board.claim_next`` until ``NOTHING_READY``; the bare loop
  runs ``UPDATE cards ... WHERE id = (SELECT ... status = 'todo' ORDER BY priority, id
  LIMIT 1 [FOR UPDATE SKIP LOCKED])`` until it updates nothing.

A third loop, the bare CAS with its event, runs the same ``UPDATE`` and, when it won, an
``INSERT`` of its event in the same transaction, in one autocommit statement as the
board's claims do (on PostgreSQL a data-modifying ``WITH``, on SQLite a temporary trigger
on the claim's ``UPDATE``): the least any board write does, as every write commits with
its event. It shows how much of the gap the event itself explains.

The three alternate (bare, with event, board, bare, ...) on the same table, reset between
runs, so all see the same machine load. Printed per backend and mode: successful claims
per second of each (median of the runs), the median of the per-round ratios of the board
to the bare CAS (goal >= 0.8), of the bare CAS with its event to the bare CAS, and of the
board to the bare CAS with its event; and double claims (must be 0). Exits non-zero only
if a card was claimed twice.

    python bench/claim_race.py [--quick] [--backend sqlite|postgres] [--rounds N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

PROCESSES = 8
PG_BASE = os.environ.get("LANEBOARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
MODES = ("claim", "claim-next")
RAW_CLAIM = (
    "UPDATE cards SET status = 'in_progress', holder = ?, claim_epoch = claim_epoch + 1 "
    "WHERE id = ? AND status = 'todo'"
)
RAW_NEXT = (
    "UPDATE cards SET status = 'in_progress', holder = ?, claim_epoch = claim_epoch + 1 "
    "WHERE id = (SELECT id FROM cards WHERE status = 'todo' ORDER BY priority, id LIMIT 1{lock}) "
    "RETURNING id"
)
# the bare CAS with its event written in the same transaction: what every board write
# must do at least (an event row beside the card's), with no rule, ranking or returned card
# on SQLite the claim's own statement writes the event through this temporary trigger
# (on the event loop's connection only), as the board's claims do (``store.sqlite``)
EVENT_TRIGGER = (
    "CREATE TEMP TRIGGER IF NOT EXISTS bench_claimed AFTER UPDATE OF claim_epoch ON main.cards "
    "BEGIN INSERT INTO events (at, type, card_id, project_id, actor, actor_kind, payload) "
    "VALUES (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), 'bench.claimed', "
    "NEW.id, NEW.project_id, NEW.holder, 'agent', '{\"epoch\": ' || NEW.claim_epoch || '}'); "
    "END"
)
PG_EVENT = (
    "WITH c AS ({update} RETURNING id, project_id, claim_epoch) "
    "INSERT INTO events (at, type, card_id, project_id, actor, actor_kind, payload) "
    "SELECT %s, 'bench.claimed', c.id, c.project_id, %s, 'agent', "
    "'{{\"epoch\": ' || c.claim_epoch || '}}' FROM c RETURNING card_id"
)
RESET = (
    "UPDATE cards SET status = 'todo', holder = NULL, holder_kind = NULL, session_id = NULL, "
    "claimed_at = NULL, heartbeat_at = NULL, assignee = NULL"
)


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
    ids = [board.create_card(me, "B", f"card {i}", priority=i % 4).id for i in range(cards)]
    if store.dialect == "postgresql":
        with store.autocommit() as tx:
            tx.run("ANALYZE")  # planner statistics, as autovacuum keeps them on a live board:
            # without them PostgreSQL guesses one row per table and may walk every card
    store.close()
    return ids


def reset(url: str) -> None:
    from laneboard.store import open_store

    store = open_store(url)
    with store.write() as tx:
        tx.run(RESET)
    store.close()


def rotated(ids: list[int], index: int) -> list[int]:
    k = index * len(ids) // PROCESSES
    return ids[k:] + ids[:k]


class Raw:
    """A bare connection: one autocommit statement per call."""

    def __init__(self, url: str, *, event: bool = False) -> None:
        self.sqlite = url.startswith("sqlite:///")
        if self.sqlite:
            import sqlite3

            self.conn: Any = sqlite3.connect(
                url[len("sqlite:///") :], timeout=30, isolation_level=None
            )
            self.conn.execute("PRAGMA busy_timeout = 30000")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            if event:
                self.conn.execute(EVENT_TRIGGER)
        else:
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)

    def run(self, sql: str, params: tuple[Any, ...]) -> Any:
        if self.sqlite:
            return self.conn.execute(sql, params)
        return self.conn.execute(sql.replace("?", "%s"), params)


def board_claim(board: Any, index: int, ids: list[int]) -> list[int]:
    from laneboard.domain.model import agent
    from laneboard.errors import LaneboardError

    me, won = agent(f"w{index}"), []
    for cid in rotated(ids, index):
        try:
            board.claim(me, cid)
            won.append(cid)
        except LaneboardError as err:
            if err.code != "CLAIM_CONFLICT":
                raise
    return won


def board_next(board: Any, index: int) -> list[int]:
    from laneboard.domain.model import agent
    from laneboard.errors import LaneboardError

    me, won = agent(f"w{index}"), []
    while True:
        try:
            won.append(board.claim_next(me, include_unassigned=True).id)
        except LaneboardError as err:
            if err.code != "NOTHING_READY":
                raise
            return won


def raw_claim(raw: Raw, index: int, ids: list[int]) -> list[int]:
    name = f"w{index}"
    return [cid for cid in rotated(ids, index) if raw.run(RAW_CLAIM, (name, cid)).rowcount == 1]


def raw_next(raw: Raw, index: int) -> list[int]:
    sql = RAW_NEXT.format(lock="" if raw.sqlite else " FOR UPDATE SKIP LOCKED")
    name, won = f"w{index}", []
    while True:
        row = raw.run(sql, (name,)).fetchone()
        if row is None:
            return won
        won.append(int(row[0]))


def event_claim(raw: Raw, index: int, ids: list[int]) -> list[int]:
    name, won = f"w{index}", []
    for cid in rotated(ids, index):
        if event_cas(raw, name, RAW_CLAIM, (name, cid)) is not None:
            won.append(cid)
    return won


def event_next(raw: Raw, index: int) -> list[int]:
    sql = RAW_NEXT.format(lock="" if raw.sqlite else " FOR UPDATE SKIP LOCKED")
    name, won = f"w{index}", []
    while (cid := event_cas(raw, name, sql, (name,))) is not None:
        won.append(cid)
    return won


def event_cas(raw: Raw, name: str, sql: str, params: tuple[Any, ...]) -> int | None:
    """One CAS and, when it won, its event, committed together; the card's id or None."""
    if raw.sqlite:  # the connection's trigger writes the event within the statement
        if " RETURNING" in sql:
            row = raw.conn.execute(sql, params).fetchone()
            return None if row is None else int(row[0])
        return int(params[1]) if raw.conn.execute(sql, params).rowcount == 1 else None
    now = int(time.time() * 1000)
    update = sql.replace("?", "%s").split(" RETURNING")[0]
    row = raw.conn.execute(PG_EVENT.format(update=update), (*params, now, name)).fetchone()
    return None if row is None else int(row[0])


def worker(index: int, jobs: Any, start: Any, out: Any) -> None:
    """One racing process: runs the jobs it is given, each after the common barrier."""
    from laneboard.board.service import Board
    from laneboard.store import open_store

    boards: dict[str, Any] = {}
    raws: dict[tuple[str, str], Raw] = {}
    while (job := jobs.get()) is not None:
        kind, mode, url, ids = job
        if kind == "board" and url not in boards:
            boards[url] = Board(open_store(url))
        if kind in ("raw", "event") and (kind, url) not in raws:
            raws[kind, url] = Raw(url, event=kind == "event")
        start.wait(timeout=120)
        t0 = time.perf_counter()
        if kind == "board":
            b = boards[url]
            won = board_claim(b, index, ids) if mode == "claim" else board_next(b, index)
        elif kind == "event":
            r = raws[kind, url]
            won = event_claim(r, index, ids) if mode == "claim" else event_next(r, index)
        else:
            r = raws[kind, url]
            won = raw_claim(r, index, ids) if mode == "claim" else raw_next(r, index)
        out.put((t0, time.perf_counter(), won))
    for b in boards.values():
        b.store.close()


class Pool:
    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.start = ctx.Barrier(PROCESSES)
        self.out = ctx.Queue()
        self.jobs = [ctx.Queue() for _ in range(PROCESSES)]
        self.procs = [
            ctx.Process(target=worker, args=(i, self.jobs[i], self.start, self.out))
            for i in range(PROCESSES)
        ]
        for p in self.procs:
            p.start()

    def race(self, kind: str, mode: str, url: str, ids: list[int]) -> tuple[float, Counter[int]]:
        """One run; returns (claims per second, wins per card)."""
        for q in self.jobs:
            q.put((kind, mode, url, ids))
        results = [self.out.get(timeout=600) for _ in self.procs]
        began = min(r[0] for r in results)
        ended = max(r[1] for r in results)
        wins: Counter[int] = Counter()
        for r in results:
            wins.update(r[2])
        return len(wins) / (ended - began), wins

    def close(self) -> None:
        for q in self.jobs:
            q.put(None)
        for p in self.procs:
            p.join(timeout=60)
            if p.exitcode != 0:
                raise SystemExit(f"a worker failed (exit {p.exitcode})")


def claimed_events(url: str) -> Counter[int]:
    from laneboard.store import open_store

    store = open_store(url)
    with store.read() as tx:
        rows = tx.all("SELECT card_id FROM events WHERE type = 'card.claimed'")
    store.close()
    return Counter(int(r["card_id"]) for r in rows)


def fresh_url(name: str, tmp: str, schemas: list[str]) -> str:
    if name == "sqlite":
        return f"sqlite:///{tmp}/{uuid.uuid4().hex}.db"
    import psycopg

    schema = "lbb_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    schemas.append(schema)
    return pg_url(schema)


def one_backend(pool: Pool, name: str, cards: int, rounds: int) -> int:
    tmp = tempfile.mkdtemp(prefix="lb-bench-")
    schemas: list[str] = []
    doubles = 0
    try:
        url = fresh_url(name, tmp, schemas)
        ids = prepare(url, cards)
        print(f"{name:<8} cards={cards} processes={PROCESSES} rounds={rounds}")
        for mode in MODES:
            rates: dict[str, list[float]] = {"raw": [], "event": [], "board": []}
            for _ in range(rounds):
                for kind in ("raw", "event", "board"):
                    reset(url)
                    rate, wins = pool.race(kind, mode, url, ids)
                    rates[kind].append(rate)
                    doubles += sum(1 for n in wins.values() if n > 1)
                    if len(wins) != cards:
                        print(f"  {kind} {mode}: {cards - len(wins)} cards left unclaimed")
            board, raw, event = (statistics.median(rates[k]) for k in ("board", "raw", "event"))
            ratio, floor, of_floor = (
                statistics.median(a / b for a, b in zip(rates[x], rates[y], strict=True))
                for x, y in (("board", "raw"), ("event", "raw"), ("board", "event"))
            )
            print(
                f"  {mode:<10}  board {board:8.0f}/s  bare CAS {raw:8.0f}/s  "
                f"ratio {ratio:.2f} (median of {rounds} pair ratios; goal >= 0.8)"
            )
            print(
                f"  {'':<10}  bare CAS with its event {event:8.0f}/s: {floor:.2f} of the bare "
                f"CAS; the board is {of_floor:.2f} of it"
            )
        events = claimed_events(url)
        doubles += sum(1 for n in events.values() if n != len(MODES) * rounds)
        print(f"  double claims {doubles}")
    finally:
        if schemas:
            import psycopg

            with psycopg.connect(PG_BASE, autocommit=True) as conn:
                for s in schemas:
                    conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
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
    ap.add_argument("--quick", action="store_true", help="800 cards, 3 rounds (CI)")
    ap.add_argument("--backend", choices=["sqlite", "postgres"], action="append")
    ap.add_argument("--rounds", type=int, default=0, help="alternations per mode")
    args = ap.parse_args()
    if args.rounds < 0:
        ap.error("--rounds must be 0 (the default) or more")
    # --quick: a race of 240 cards lasted a tenth of a second and its ratios moved by
    # 0.2 between runs of the same code
    cards = 800 if args.quick else 2000
    rounds = args.rounds or 3
    doubles = 0
    pool = Pool()
    try:
        for name in args.backend or ["sqlite", "postgres"]:
            if name == "postgres" and not pg_reachable():
                print("postgres: not reachable at LANEBOARD_TEST_PG; skipped")
                continue
            doubles += one_backend(pool, name, cards, rounds)
    finally:
        pool.close()
    return 1 if doubles else 0


if __name__ == "__main__":
    sys.exit(main())
