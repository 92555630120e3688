"""Draining a PostgreSQL board with several processes, against a PostgreSQL job queue.

4 processes drain N cards through the board's own service calls (``claim_next``;
``deliver``, the report and the move to ``in_review`` in one write, as ``lb card
deliver`` makes them; and the acceptance move to ``done``; no agent process), and
procrastinate's 4 workers drain N no-op jobs on the same PostgreSQL server. The two alternate (board, queue, board, queue, ...) in the same run. Printed:
cards/s and jobs/s (medians of the rounds), the median of the per-pair ratios (goal >=
1.0), the board's client CPU per card, and
the checks that every card was claimed once and ended ``done``.

Then 3 supervisors (``lb start --agent scripted``, each its own machine name and state
directory) drain N cards of the scripted agent on one board, written once they are up,
warmed up and idle: cards/s and the supervisors' own CPU per card (their processes' user +
system time from then on, start-up and agents excluded; goal <= 5 ms). The package is
compiled to bytecode first, as an install leaves it, and a few cards are drained before
the count starts: a supervisor imports the modules of a turn at its first one, once in its
life, which at ``--quick`` size would otherwise weigh as much as the cards.
Never fails on time; exits non-zero only if a card was claimed twice or left undone.

procrastinate is a benchmark-only dependency (the ``dev`` extra).

    python bench/cluster_drain.py [--quick] [--cards N] [--rounds N] [--scripted N]
        [--part all|drain|supervisors]
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import logging
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from typing import Any

WORKERS = 4
PG_BASE = os.environ.get("LANEBOARD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
QUEUE = "bench"
logging.getLogger("procrastinate").setLevel(logging.ERROR)  # its advice on app placement


def pg_url(schema: str) -> str:
    sep = "&" if "?" in PG_BASE else "?"
    return f"{PG_BASE}{sep}options=-csearch_path%3D{schema}"


def new_schema() -> str:
    import psycopg

    schema = "lbd_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return schema


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def analyze(url: str) -> None:
    """Planner statistics for the freshly filled schema, on both sides of the race.

    A live board has them: autovacuum analyzes a table once a tenth of it has changed.
    Without them PostgreSQL guesses one row per table and may walk every ``todo`` card.
    """
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


# -- the board ------------------------------------------------------------------------------
def prepare_board(url: str, cards: int) -> None:
    from laneboard.board.service import Board
    from laneboard.domain.model import human
    from laneboard.store import open_store

    store = open_store(url)
    board, me = Board(store), human("bench")
    board.add_project(me, "D")
    for i in range(cards):
        board.create_card(me, "D", f"card {i}", priority=i % 4, acceptance_mode="off")
    store.close()
    analyze(url)


def board_worker(url: str, index: int, start: Any, out: Any) -> None:
    """One draining process: claim the next card, deliver it, accept it; until none."""
    from laneboard.board.service import Board
    from laneboard.domain.model import agent, system
    from laneboard.errors import LaneboardError
    from laneboard.store import open_store

    store = open_store(url)
    board = Board(store)
    me, accepter = agent(f"d{index}"), system("accepter")
    done: list[int] = []
    start.wait(timeout=120)
    t0, cpu0 = time.perf_counter(), time.process_time()
    while True:
        try:
            card = board.claim_next(me, include_unassigned=True)
        except LaneboardError as err:
            if err.code != "NOTHING_READY":
                raise
            break
        board.deliver(me, card.ref, "done")  # the report and the move, one write
        board.move(accepter, card.ref, "done")
        done.append(card.id)
    out.put((t0, time.perf_counter(), time.process_time() - cpu0, done))
    store.close()


def check_board(url: str, cards: int) -> int:
    """Problems: cards claimed twice or not done."""
    from laneboard.store import open_store

    store = open_store(url)
    with store.read() as tx:
        claims = Counter(
            int(r["card_id"])
            for r in tx.all("SELECT card_id FROM events WHERE type = 'card.claimed'")
        )
        done = int(tx.scalar("SELECT count(*) FROM cards WHERE status = 'done'"))
    store.close()
    return sum(1 for n in claims.values() if n != 1) + (cards - done)


# -- procrastinate ----------------------------------------------------------------------------
def make_app(url: str) -> Any:
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=2)
    )

    @app.task(name="noop", queue=QUEUE)
    def noop(i: int) -> None:
        return None

    return app


def prepare_queue(url: str, jobs: int) -> None:
    async def go() -> None:
        app = make_app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            task = app.tasks["noop"]
            for k in range(0, jobs, 500):
                await task.batch_defer_async(*({"i": i} for i in range(k, min(k + 500, jobs))))

    asyncio.run(go())
    analyze(url)


def queue_worker(url: str, index: int, start: Any, out: Any) -> None:
    async def go() -> tuple[float, float, float]:
        app = make_app(url)
        async with app.open_async():
            await asyncio.to_thread(start.wait, 120)
            t0, cpu0 = time.perf_counter(), time.process_time()
            await app.run_worker_async(
                queues=[QUEUE],
                name=f"q{index}",
                concurrency=1,
                wait=False,
                install_signal_handlers=False,
            )
            return t0, time.perf_counter(), time.process_time() - cpu0

    t0, t1, cpu = asyncio.run(go())
    out.put((t0, t1, cpu, []))


def check_queue(url: str, jobs: int) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        ).fetchone()
    assert row is not None
    return jobs - int(row[0])


# -- the race -------------------------------------------------------------------------------
def run(target: Any, url: str) -> tuple[float, float, int]:
    """Start the workers together; returns (elapsed s, client CPU s, items they report)."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, i, start, out)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise SystemExit(f"a worker failed (exit {p.exitcode})")
    elapsed = max(r[1] for r in results) - min(r[0] for r in results)
    return elapsed, sum(r[2] for r in results), sum(len(r[3]) for r in results)


def one_round(kind: str, count: int) -> tuple[float, float, int]:
    """One drain on a fresh schema: (items per second, client CPU ms per item, problems)."""
    schema = new_schema()
    url = pg_url(schema)
    try:
        if kind == "board":
            prepare_board(url, count)
            elapsed, cpu, drained = run(board_worker, url)
            problems = check_board(url, count) + abs(count - drained)
        else:
            prepare_queue(url, count)
            elapsed, cpu, _ = run(queue_worker, url)
            problems = check_queue(url, count)
    finally:
        drop_schema(schema)
    return count / elapsed, cpu * 1000 / count, problems


# -- three supervisors, the scripted agent ---------------------------------------------------
def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (its children not included)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


WARM_UP = 6  # cards drained before the count, two per supervisor on average


def _until_done(store: Any, cards: int, within_s: float) -> int:
    """Until ``cards`` cards are done (or ``within_s`` passed); how many are."""
    deadline, done = time.monotonic() + within_s, 0
    while done < cards and time.monotonic() < deadline:
        time.sleep(0.2)
        with store.read() as tx:
            done = int(tx.scalar("SELECT count(*) FROM cards WHERE status = 'done'") or 0)
    return done


def _add_cards(board: Any, cards: int, prefix: str) -> None:
    from laneboard.domain.model import human

    for i in range(cards):
        board.create_card(
            human(),
            "S",
            f"{prefix}{i}",
            acceptance_mode="off",
            meta={"script": [{"deliver": "ok"}]},
        )


def _until_ticking(store: Any, n: int) -> None:
    """Until ``n`` supervisors have registered and each has run a tick."""
    import json

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with store.read() as tx:
            rows = tx.all("SELECT info FROM supervisors WHERE state = 'running'")
        if len(rows) >= n and all(json.loads(r["info"]).get("ticks") for r in rows):
            return
        time.sleep(0.2)
    raise SystemExit("the supervisors did not start")


def supervisors_round(cards: int) -> tuple[float, float, int]:
    """(cards per second, supervisor CPU ms per card, problems) for 3 supervisors."""
    import signal
    import subprocess
    import tempfile
    from pathlib import Path

    import laneboard
    from laneboard.board.service import Board
    from laneboard.domain.model import human
    from laneboard.store import open_store

    compileall.compile_dir(str(Path(laneboard.__file__).parent), quiet=1)  # as installed
    schema = new_schema()
    url = pg_url(schema)
    with tempfile.TemporaryDirectory(prefix="lb-drain-") as tmp:
        root = Path(tmp)
        (root / "proj").mkdir()
        store = open_store(url)
        board = Board(store)
        board.add_project(human(), "S", path=str(root / "proj"))
        procs = []
        for n in range(3):
            cfg = root / f"m{n}" / "cfg" / "laneboard"
            cfg.mkdir(parents=True)
            (cfg / "config.toml").write_text(
                '[supervisor]\nsandbox = "off"\nsandbox_reason = "benchmark"\n'
            )
            env = {
                **os.environ,
                "LANEBOARD_DATABASE_URL": url,
                "LANEBOARD_MACHINE": f"m{n}",
                "XDG_STATE_HOME": str(root / f"m{n}" / "state"),
                "XDG_CONFIG_HOME": str(root / f"m{n}" / "cfg"),
            }
            cmd = [sys.executable, "-m", "laneboard.cli.main", "start", "--agent", "scripted"]
            procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL))
        _until_ticking(store, 3)  # started, registered and idle: their start-up is not counted
        _add_cards(board, WARM_UP, "warm-up ")
        if _until_done(store, WARM_UP, 300) < WARM_UP:
            raise SystemExit("the supervisors did not drain the warm-up cards")
        cpu0 = sum(_cpu_s(p.pid) for p in procs)
        t0 = time.monotonic()
        _add_cards(board, cards, "c")
        done = _until_done(store, WARM_UP + cards, 1800) - WARM_UP
        elapsed = time.monotonic() - t0
        cpu = sum(_cpu_s(p.pid) for p in procs) - cpu0
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        problems = check_board(url, WARM_UP + cards) if done == cards else cards - done
        store.close()
    drop_schema(schema)
    return cards / elapsed, cpu * 1000 / cards, problems


def drain_part(count: int, rounds: int) -> int:
    """The service-call drain against procrastinate; returns the problems found."""
    rates: dict[str, list[float]] = {"board": [], "queue": []}
    cpus: dict[str, list[float]] = {"board": [], "queue": []}
    problems = 0
    for _ in range(rounds):
        for kind in ("board", "queue"):
            rate, cpu, bad = one_round(kind, count)
            rates[kind].append(rate)
            cpus[kind].append(cpu)
            problems += bad
    board, queue = (statistics.median(rates[k]) for k in ("board", "queue"))
    board_cpu, queue_cpu = (statistics.median(cpus[k]) for k in ("board", "queue"))
    ratio = statistics.median(b / q for b, q in zip(rates["board"], rates["queue"], strict=True))
    print(
        f"drain  items={count} workers={WORKERS} rounds={rounds}  "
        f"board {board:7.1f} cards/s ({board_cpu:.1f} ms client CPU/card)  "
        f"procrastinate {queue:7.1f} jobs/s ({queue_cpu:.1f} ms/job)  "
        f"ratio {ratio:.2f} (median of {rounds} pair ratios; goal >= 1.0)  "
        f"problems {problems}"
    )
    return problems


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
    ap.add_argument("--cards", type=int, default=0, help="cards (and jobs) per round")
    ap.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="alternations of board and queue (default 2; --quick 7: its drains are short)",
    )
    ap.add_argument("--scripted", type=int, default=0, help="cards for the 3 supervisors")
    ap.add_argument(
        "--part",
        choices=["all", "drain", "supervisors"],
        default="all",
        help="run only the service-call drain or only the supervisors",
    )
    args = ap.parse_args()
    for name in ("cards", "rounds", "scripted"):
        if getattr(args, name) < 0:
            ap.error(f"--{name} must be 0 (the default) or more")
    if not pg_reachable():
        print("postgres: not reachable at LANEBOARD_TEST_PG; skipped")
        return 0
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        print("procrastinate is not installed (pip install -e '.[dev]'); skipped")
        return 0
    problems = 0
    if args.part != "supervisors":
        rounds = args.rounds or (7 if args.quick else 2)
        problems += drain_part(args.cards or (400 if args.quick else 5000), rounds)
    if args.part == "drain":
        return 1 if problems else 0
    n = args.scripted or (60 if args.quick else 1000)
    rate, cpu_ms, bad = supervisors_round(n)
    problems += bad
    print(
        f"supervisors  cards={n} supervisors=3 scripted agent  {rate:6.1f} cards/s  "
        f"supervisor CPU {cpu_ms:.1f} ms/card (goal <= 5 ms)  problems {bad}"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
