"""Tick cost on boards of 1k, 10k and 100k cards with 100 ready ones (SQLite).

For each size it prints the time of an idle tick (nothing changed since the last one)
with the number of rows it wrote (goal 0), the median time of a full tick (the poll
pass reads candidates, claims and enqueues up to the budget of 8), and the ratio of the
full tick at the largest size to the smallest (goal <= 2; goal <= 50 ms at 100k). The
three boards are built first and then ticked in turn (1k, 10k, 100k, 1k, ...): the ratio
is the median of the per-turn ratios, all measured under the same machine load.
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


class Board:
    """One board of ``size`` cards with its ticker, in a directory of its own."""

    def __init__(self, size: int, tmp: str) -> None:
        self.store = open_store(f"sqlite:///{Path(tmp) / 'board.db'}")
        build(self.store, size, tmp)
        cfg = SupervisorConfig(
            default_agent="scripted", state_dir=str(Path(tmp) / "state"), max_concurrency=8
        ).validate()
        rt = Runtime(
            self.store, cfg, "bench", LogFile(str(Path(tmp) / "log")), pool_alive=lambda: True
        )
        self.ticker = Ticker(rt)

    def full_tick(self) -> float:
        """One full tick (ms), then the claimed cards handed back (not measured)."""
        t0 = time.perf_counter()
        result = self.ticker.tick(force=True)
        took = (time.perf_counter() - t0) * 1000
        assert len(result.passes["poll"]["claimed"]) == 8, result.passes
        with self.store.write() as tx:
            tx.run("DELETE FROM queue")
            tx.run(
                "UPDATE cards SET status = 'todo', holder = NULL, heartbeat_at = NULL "
                "WHERE number <= ?",
                (READY,),
            )
        return took

    def idle_tick(self) -> tuple[float, int]:
        """An idle tick once the board has settled: (ms, rows it wrote)."""
        self.ticker.tick(force=True)
        with self.store.write() as tx:
            tx.run("DELETE FROM queue")
        self.ticker.tick(force=True)
        for _ in range(5):  # settle: what a tick writes is news for the next one
            if self.ticker.tick().state == "idle":
                break
        before = changes(self.store)
        t0 = time.perf_counter()
        idle = self.ticker.tick()
        idle_ms = (time.perf_counter() - t0) * 1000
        assert idle.state == "idle", idle
        return idle_ms, changes(self.store) - before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (CI)")
    args = ap.parse_args()
    runs = 5 if args.quick else 11
    sizes = (1_000, 10_000, 100_000)
    with tempfile.TemporaryDirectory(prefix="lb-tick-") as tmp:
        boards = {}
        for size in sizes:
            (Path(tmp) / str(size)).mkdir()
            boards[size] = Board(size, str(Path(tmp) / str(size)))
        full: dict[int, list[float]] = {size: [] for size in sizes}
        for _ in range(runs):  # the sizes in turn, so that all see the same machine load
            for size in sizes:
                full[size].append(boards[size].full_tick())
        for size in sizes:
            idle_ms, wrote = boards[size].idle_tick()
            boards[size].store.close()
            print(
                f"{size:>7} cards: idle tick {idle_ms:.2f} ms, {wrote} writes; "
                f"full tick {statistics.median(full[size]):.1f} ms (median of {runs})"
            )
    ratio = statistics.median(b / a for a, b in zip(full[1_000], full[100_000], strict=True))
    print(
        f"full tick 100k/1k ratio {ratio:.2f} (median of {runs} pair ratios; goal <= 2); "
        f"100k full tick {statistics.median(full[100_000]):.1f} ms (goal <= 50 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
