"""Cold start of a read command: ``lb card get X --json`` against ``python -c pass``.

Prints both medians and their ratio (goal <= 6x), measured in the same run on a
temporary SQLite board. A benchmark: it never fails on time.

    python bench/cli_cold_start.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def lb_command() -> list[str]:
    beside = Path(sys.executable).parent / "lb"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "laneboard.cli.main"]


def timed(cmd: list[str], env: dict[str, str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs (CI)")
    args = ap.parse_args()
    runs = 9 if args.quick else 31
    with tempfile.TemporaryDirectory(prefix="lb-cold-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
        env.update(
            LANEBOARD_DATABASE_URL=f"sqlite:///{tmp}/board.db",
            LANEBOARD_USER="bench",
            LANEBOARD_NOW="2026-01-01T00:00:00Z",
        )
        lb = lb_command()
        subprocess.run(
            [*lb, "init", "--project", "WEB", "--path", tmp],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run(
            [*lb, "card", "add", "WEB", "a card", "--accept", "it works"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        get = [*lb, "card", "get", "WEB-1", "--json"]
        timed(get, env, 2)  # warm the page cache and bytecode
        base = timed([sys.executable, "-c", "pass"], env, runs)
        read = timed(get, env, runs)
    print(
        f"cold start (median of {runs}): lb card get --json {read * 1000:.0f} ms, "
        f"python -c pass {base * 1000:.0f} ms, ratio {read / base:.2f}x (goal <= 6x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
