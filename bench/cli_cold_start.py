"""Cold start of ``lb`` against a bare ``python -c pass``, measured in the same run.

Compiles the package's bytecode first (this environment may set PYTHONDONTWRITEBYTECODE),
then times, each against its own baseline run interleaved A B A B, and prints the median
of the pair ratios against its goal:

* ``lb card get WEB-1 --json`` in local mode (SQLite)   goal <= 4x
* the same in remote mode (a board socket, a token)     goal <= 3x
* ``lb --version``                                      goal <= 2.5x
* ``lb --help``                                         goal <= 2.5x

A benchmark: it prints ratios and never fails on time.

    python bench/cli_cold_start.py [--quick]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import laneboard


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def pair_ratio(cmd: list[str], env: dict[str, str], pairs: int) -> tuple[float, float, float]:
    """Median command time, median baseline time, median of the pair ratios."""
    base = [sys.executable, "-c", "pass"]
    times, bases, ratios = [], [], []
    for _ in range(pairs):
        b = timed(base, env)
        t = timed(cmd, env)
        bases.append(b)
        times.append(t)
        ratios.append(t / b)
    return statistics.median(times), statistics.median(bases), statistics.median(ratios)


def serve_socket(url: str, state: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    code = (
        "import signal, sys, time\n"
        "from laneboard.board.service import Board\n"
        "from laneboard.store import open_store\n"
        "from laneboard.supervisor import board_socket\n"
        f"b = Board(open_store({url!r}))\n"
        f"board_socket.serve(b, {state!r})\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "while True: time.sleep(1)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    sock = Path(state) / "run" / "board.sock"
    deadline = time.monotonic() + 30
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the board socket did not start")
        time.sleep(0.05)
    return proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs (CI)")
    args = ap.parse_args()
    pairs = 9 if args.quick else 31
    package = Path(laneboard.__file__).parent
    compileall.compile_dir(str(package), quiet=1)  # bytecode present, as after an install
    lb = [sys.executable, "-m", "laneboard.cli.main"]
    with tempfile.TemporaryDirectory(prefix="lb-cold-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        url = f"sqlite:///{tmp}/board.db"
        local = {**env, "LANEBOARD_DATABASE_URL": url, "LANEBOARD_USER": "bench"}
        run = {"env": local, "check": True, "stdout": subprocess.PIPE, "text": True}
        subprocess.run([*lb, "init", "--project", "WEB", "--path", tmp], **run)  # type: ignore[call-overload]
        subprocess.run([*lb, "card", "add", "WEB", "a card", "--accept", "it works"], **run)  # type: ignore[call-overload]
        made = subprocess.run(  # type: ignore[call-overload]
            [*lb, "token", "create", "--name", "bench", "--kind", "human"], **run
        )
        token = made.stdout.splitlines()[0]
        server = serve_socket(url, f"{tmp}/state", local)
        try:
            remote = {**env, "LANEBOARD_URL": f"unix:{tmp}/state/run/board.sock",
                      "LANEBOARD_TOKEN": token}  # fmt: skip
            get = [*lb, "card", "get", "WEB-1", "--json"]
            cases = [
                ("lb card get --json (local)", get, local, 4.0),
                ("lb card get --json (remote)", get, remote, 3.0),
                ("lb --version", [*lb, "--version"], env, 2.5),
                ("lb --help", [*lb, "--help"], env, 2.5),
            ]
            for _name, cmd, e, _goal in cases:  # warm the page cache
                timed(cmd, e)
            print(f"cold start, median of {pairs} interleaved pairs against python -c pass:")
            for name, cmd, e, goal in cases:
                t, b, ratio = pair_ratio(cmd, e, pairs)
                verdict = "meets" if ratio <= goal else "misses"
                print(
                    f"  {name:<30} {t * 1000:6.0f} ms vs {b * 1000:4.0f} ms: "
                    f"{ratio:4.2f}x ({verdict} the goal <= {goal}x)"
                )
        finally:
            server.terminate()
            server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
