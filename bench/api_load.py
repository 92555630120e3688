"""HTTP load on ``lb serve``: card reads and 50-card lists at a fixed rate, and the board page.

Builds a board of 1,000 cards (``--quick``: 200), starts ``lb serve`` on it and, beside
it, a bare Starlette app under uvicorn that answers every request with the same bytes
(the floor of the HTTP stack on this machine). Requests go out at a fixed rate (200 per
second), open loop: each latency runs from the moment the request was due, so a stalled
server is not flattered by requests that were never sent. Windows of one second
alternate between the two servers, A B A B, for 20 s of load on ``lb serve`` per kind of
request (``--quick``: 2 s).

Printed, against the goals:

* ``GET /api/v1/cards/{ref}`` and ``GET /api/v1/cards?limit=50``: p50 and p99 (goal: p99
  <= 20 ms at 200 req/s), and the median over window pairs of the ratio of p99 to the
  bare app's p99;
* the board page ``/`` rendered server-side at that many cards (goal <= 300 ms), against
  reading the same cards alone, interleaved, median of the pair ratios.

A benchmark: it prints figures and never fails on time.

    python bench/api_load.py [--quick] [--rate 200] [--db URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store, open_store

GOAL_P99_MS = 20.0
GOAL_PAGE_MS = 300.0
ME = human("bench")

BARE_APP = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
bodies = {}
for arg in sys.argv[2:]:
    path, file = arg.rsplit("=", 1)
    bodies[path] = open(file, "rb").read()
async def answer(request):
    key = request.url.path + ("?" + request.url.query if request.url.query else "")
    return Response(bodies.get(key, b"{}"), media_type="application/json")
app = Starlette(routes=[Route("/{p:path}", answer)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fill(store: Store, n: int) -> None:
    board = Board(store)
    board.add_project(ME, "WEB")
    for i in range(n):
        board.create_card(
            ME,
            "WEB",
            f"card {i}: a title of ordinary length",
            description="what the card is about, in a sentence or two. " * 3,
            labels=["ui", "web"],
            acceptance=["it works", "the docs say so"],
            priority=i % 4,
        )


def wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server at {url} exited")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise SystemExit(f"the server at {url} did not start")


async def _request(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], raw: bytes) -> None:
    reader, writer = conn
    writer.write(raw)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"unexpected answer: {head[:80]!r}")


async def window(port: int, path: str, rate: float, seconds: float) -> list[float]:
    """Latencies (ms) of requests due at ``rate`` per second for ``seconds``, open loop."""
    raw = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    everyone: list[asyncio.StreamWriter] = []
    out: list[float] = []

    async def one(due: float) -> None:
        conn = idle.pop() if idle else await asyncio.open_connection("127.0.0.1", port)
        if conn[1] not in everyone:
            everyone.append(conn[1])
        await _request(conn, raw)
        out.append((time.perf_counter() - due) * 1000)
        idle.append(conn)

    start = time.perf_counter() + 0.01
    tasks = []
    for i in range(int(rate * seconds)):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    for w in everyone:
        w.close()
    return out


def cpu_s(pid: int) -> float:
    """A process's CPU time so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load(ports: tuple[int, int], pid: int, path: str, rate: float, windows: int) -> None:
    ours: list[float] = []
    ratios = []
    cpu = 0.0
    asyncio.run(window(ports[0], path, rate, 0.3))  # warm both
    asyncio.run(window(ports[1], path, rate, 0.3))
    for _ in range(windows):
        before = cpu_s(pid)
        a = asyncio.run(window(ports[0], path, rate, 1.0))
        cpu += cpu_s(pid) - before
        b = asyncio.run(window(ports[1], path, rate, 1.0))
        ours.extend(a)
        ratios.append(pct(a, 0.99) / pct(b, 0.99))
    p50, p99 = pct(ours, 0.5), pct(ours, 0.99)
    verdict = "meets" if p99 <= GOAL_P99_MS else "misses"
    print(
        f"  GET {path:<26} p50 {p50:5.1f} ms  p99 {p99:5.1f} ms ({verdict} p99 <= "
        f"{GOAL_P99_MS:.0f} ms); p99 {statistics.median(ratios):4.2f}x the bare app's; "
        f"{cpu / len(ours) * 1000:.1f} ms CPU per request"
    )


def page_time(store: Store, pairs: int) -> None:
    """The board page's server-side time against reading its cards alone."""
    from laneboard.server import dashboard
    from laneboard.server.app import create_app

    srv = create_app(store, local_user="bench", with_mcp=False).app.state.server
    board = srv.board
    page, read, ratios = [], [], []
    for _ in range(pairs):
        t0 = time.perf_counter()
        board.list_cards(limit=5000)
        t1 = time.perf_counter()
        ctx = dashboard.board_context(srv, ME, {})
        dashboard.render_page("board.html", ctx)
        t2 = time.perf_counter()
        read.append(t1 - t0)
        page.append(t2 - t1)
        ratios.append((t2 - t1) / (t1 - t0))
    ms = statistics.median(page) * 1000
    verdict = "meets" if ms <= GOAL_PAGE_MS else "misses"
    print(
        f"  board page                     {ms:5.0f} ms ({verdict} <= {GOAL_PAGE_MS:.0f} ms); "
        f"{statistics.median(ratios):4.1f}x reading the cards ({statistics.median(read) * 1000:.0f} ms)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small board, 2 s of load (CI)")
    ap.add_argument("--rate", type=float, default=200.0, help="requests per second")
    ap.add_argument("--db", help="a PostgreSQL URL to fill (default: a fresh SQLite board)")
    args = ap.parse_args()
    cards = 200 if args.quick else 1000
    windows = 2 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="lb-load-") as tmp:
        url = args.db or f"sqlite:///{tmp}/board.db"
        store = open_store(url)
        fill(store, cards)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
        env["XDG_STATE_HOME"] = f"{tmp}/state"
        env["LANEBOARD_USER"] = "bench"
        ours, bare = free_port(), free_port()
        paths = ["/api/v1/cards/WEB-7", "/api/v1/cards?limit=50"]
        serve = [sys.executable, "-m", "laneboard.cli.main", "--db", url, "serve"]
        a = subprocess.Popen([*serve, "--port", str(ours), "--no-mcp"], env=env)
        b = None
        try:
            wait_up(f"http://127.0.0.1:{ours}/healthz", a)
            files = []
            for i, p in enumerate(paths):
                body = httpx.get(f"http://127.0.0.1:{ours}{p}").content
                Path(tmp, f"body{i}").write_bytes(body)
                files.append(f"{p}={tmp}/body{i}")
            b = subprocess.Popen([sys.executable, "-c", BARE_APP, str(bare), *files], env=env)
            wait_up(f"http://127.0.0.1:{bare}/", b)
            print(
                f"lb serve on a board of {cards} cards, {args.rate:.0f} req/s open loop, "
                f"{windows} s per request kind, windows interleaved with a bare Starlette app "
                f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs):"
            )
            for p in paths:
                load((ours, bare), a.pid, p, args.rate, windows)
            page_time(store, 5 if args.quick else 15)
        finally:
            for proc in (a, b):
                if proc is not None:
                    proc.terminate()
                    proc.wait()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
