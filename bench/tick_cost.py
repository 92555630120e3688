"""Tick cost on boards of 1k, 10k and 100k cards with 100 ready ones (SQLite).

For each size it prints the time of an idle tick (nothing changed since the last one)
with the number of rows it wrote (goal 0), the median time of a full tick (the poll
pass reads candidates, claims and enqueues up to the budget of 8), and the ratio of the
full tick at the largest size to the smallest (goal <= 2; goal <= 50 ms at 100k).
A benchmark: it never fails on time.

    python bench/tick_cost.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from laneboard.config import SupervisorConfig
from laneboard.domain.model import human
from laneboard.store import Store, open_store
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.loop import Ticker
from laneboard.supervisor.runtime import Runtime

READY = 100


def build(store: Store, size: int, project_dir: str) -> None:
    from laneboard.board.service import Board

    Board(store).add_project(human(), "B", path=project_dir)
    now = store.clock.now_ms()
    statuses = ["done"] * 7 + ["backlog", "in_progress", "canceled"]
    with store.write() as tx:
        pid = tx.project(key="B").id  # type: ignore[union-attr]
        for i in range(1, size + 1):
            status = "todo" if i <= READY else statuses[i % len(statuses)]
            holder = "worker" if status == "in_progress" else None
            tx.run(
                "INSERT INTO cards (project_id, number, ref, title, status, assignee, priority, "
                "holder, heartbeat_at, status_since, created_at, updated_at, meta) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    pid,
                    i,
                    f"B-{i}",
                    f"card {i}",
                    status,
                    None,
                    i % 4,
                    holder,
                    now if holder else None,
                    now - i,
                    now - i,
                    now,
                    json.dumps({}),
                ),
            )
        tx.run("UPDATE projects SET next_number = ?", (size + 1,))


def changes(store: Store) -> int:
    raw = store._acquire()
    try:
        return int(raw.total_changes)
    finally:
        store._release(raw)


def measure(size: int, runs: int) -> tuple[float, int, float]:
    with tempfile.TemporaryDirectory(prefix="lb-tick-") as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'board.db'}")
        build(store, size, tmp)
        cfg = SupervisorConfig(
            default_agent="scripted", state_dir=str(Path(tmp) / "state"), max_concurrency=8
        ).validate()
        rt = Runtime(store, cfg, "bench", LogFile(str(Path(tmp) / "log")), pool_alive=lambda: True)
        ticker = Ticker(rt)
        full = []
        for _ in range(runs):
            t0 = time.perf_counter()
            result = ticker.tick(force=True)
            full.append((time.perf_counter() - t0) * 1000)
            assert len(result.passes["poll"]["claimed"]) == 8, result.passes
            with store.write() as tx:  # hand the claimed cards back (not measured)
                tx.run("DELETE FROM queue")
                tx.run(
                    "UPDATE cards SET status = 'todo', holder = NULL, heartbeat_at = NULL "
                    "WHERE number <= ?",
                    (READY,),
                )
        ticker.tick(force=True)
        with store.write() as tx:
            tx.run("DELETE FROM queue")
        ticker.tick(force=True)
        for _ in range(5):  # settle: what a tick writes is news for the next one
            if ticker.tick().state == "idle":
                break
        before = changes(store)
        t0 = time.perf_counter()
        idle = ticker.tick()
        idle_ms = (time.perf_counter() - t0) * 1000
        assert idle.state == "idle", idle
        wrote = changes(store) - before
        store.close()
    return idle_ms, wrote, statistics.median(full)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (CI)")
    args = ap.parse_args()
    runs = 3 if args.quick else 9
    results = {}
    for size in (1_000, 10_000, 100_000):
        idle_ms, wrote, full_ms = measure(size, runs)
        results[size] = full_ms
        print(
            f"{size:>7} cards: idle tick {idle_ms:.2f} ms, {wrote} writes; "
            f"full tick {full_ms:.1f} ms (median of {runs})"
        )
    ratio = results[100_000] / results[1_000]
    print(
        f"full tick 100k/1k ratio {ratio:.2f} (goal <= 2); 100k full tick "
        f"{results[100_000]:.1f} ms (goal <= 50 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
