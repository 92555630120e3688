"""The real ``lb`` in subprocesses, in local mode or in remote mode against ``lb serve``
(HTTP) or a supervisor's board socket (unix), with the same expectations in every mode.

In remote mode the commands run without any database URL: only ``LANEBOARD_URL`` and a
credential. A person is identified by a human token of their name (``LANEBOARD_USER`` is
a local-mode name only); the tokens are minted in every mode, so event ids agree. The
servers run on a pinned clock, so each call's ``LANEBOARD_NOW`` is honoured remotely too.

Run as a script, this module serves a board on a unix socket the way ``lb start`` does:
``python cli_kit.py socket DB STATE_DIR NOW``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("local", "serve", "socket")
NOW = "2026-01-01T00:00:00.000Z"
USERS = ("alice", "bob", "carol")
_BIN = Path(sys.executable).parent / "lb"
LB = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "laneboard.cli.main"]
# for a script that floods a board socket (``path``) with connections: one connection,
# made again while the socket's backlog is full (a non-blocking connect's EAGAIN)
CONNECT = """
import time
from laneboard.ops import unix


def connect():
    while True:
        try:
            return unix.connect(path, 10)
        except BlockingIOError:
            time.sleep(0.01)
"""


@dataclass
class Run:
    code: int
    out: str
    err: str


class Cli:
    """``lb`` on a fresh SQLite board in ``tmp``, in one of ``MODES``."""

    def __init__(self, tmp: Path, mode: str = "local") -> None:
        from laneboard.board.tokens import Tokens
        from laneboard.domain.clock import FakeClock
        from laneboard.domain.model import human
        from laneboard.store import open_store

        self.tmp = tmp
        self.mode = mode
        self.db = tmp / "board.db"
        self.url = f"sqlite:///{self.db}"
        self.base = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
        self.base.update(LANEBOARD_NOW=NOW, LANEBOARD_USER="alice")
        self.env = {**self.base, "LANEBOARD_DATABASE_URL": self.url}
        store = open_store(self.url, FakeClock())
        try:  # a human credential per person, minted in every mode so event ids agree
            self.people = {n: Tokens(store).create(human("alice"), n, "human")[0] for n in USERS}
        finally:
            store.close()
        self.proc: subprocess.Popen[bytes] | None = None
        self.remote: str | None = None

    # -- the server of a remote mode ---------------------------------------------------
    def start(self) -> None:
        """Start the board server of this mode (nothing in local mode)."""
        if self.mode == "local":
            return
        log = open(self.tmp / f"{self.mode}.log", "wb")  # noqa: SIM115 (the child keeps it)
        if self.mode == "serve":
            cmd = [*LB, "--db", self.url, "serve", "--port", "0", "--no-mcp"]
            ready = self._http_ready
        else:
            state = self.tmp / "state"
            cmd = [sys.executable, __file__, "socket", self.url, str(state), NOW]
            self.remote = f"unix:{state}/run/board.sock"
            ready = self._socket_ready
        env = {**self.base, "XDG_STATE_HOME": str(self.tmp / "xdg-state")}
        self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError((self.tmp / f"{self.mode}.log").read_text())
            time.sleep(0.05)

    def _http_ready(self) -> bool:
        import httpx
        from tests.serve_kit import served_url

        self.remote = served_url(self.tmp / "serve.log")
        if self.remote is None:
            return False
        try:
            return httpx.get(self.remote + "/healthz", timeout=1).status_code in (200, 503)
        except httpx.TransportError:
            return False

    def _socket_ready(self) -> bool:
        assert self.remote is not None
        return os.path.exists(self.remote[len("unix:") :])

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    # -- running lb ------------------------------------------------------------------------
    def environ(self, **env: str) -> dict[str, str]:
        """The environment of one ``lb`` call in this mode."""
        if self.mode == "local":
            return {**self.env, **env}
        assert self.remote is not None
        out = {**self.base, "LANEBOARD_URL": self.remote, **env}
        out.pop("LANEBOARD_DATABASE_URL", None)
        user = out.pop("LANEBOARD_USER", "alice")
        if "LANEBOARD_TOKEN" not in out and (self.mode == "socket" or user != "alice"):
            out["LANEBOARD_TOKEN"] = self.people[user]  # lb serve trusts loopback as alice
        return out

    def run(self, *args: str, stdin: str = "", **env: str) -> Run:
        return self.run_in(self.environ(**env), *args, stdin=stdin)

    def run_in(self, env: dict[str, str], *args: str, stdin: str = "") -> Run:
        p = subprocess.run(
            [*LB, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
        )
        return Run(p.returncode, p.stdout, p.stderr)

    def local(self, *args: str, **env: str) -> Run:
        """``lb`` on the database itself, whatever the mode (``lb init`` and friends)."""
        return self.run_in({**self.env, **env}, *args)

    def ok(self, *args: str, stdin: str = "", **env: str) -> Any:
        r = self.run(*args, "--json", stdin=stdin, **env)
        assert (r.code, r.err) == (0, ""), r.err
        return json.loads(r.out)

    def events(self) -> int:
        with sqlite3.connect(self.db) as conn:
            return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])

    def refuse(self, code: str, exit_code: int, *args: str, **env: str) -> str:
        """The command fails with one stderr line naming ``code`` and writes nothing."""
        environ = self.environ(**env)
        before = self.events()
        r = self.run_in(environ, *args)
        assert r.code == exit_code, (r.code, r.err)
        assert r.out == ""
        lines = r.err.splitlines()
        assert len(lines) == 1 and r.err.endswith("\n"), r.err
        assert lines[0].startswith(f"error {code}: "), lines[0]
        assert " — " in lines[0], "the line names the fix"
        assert self.events() == before, f"{code} wrote an event"
        return lines[0]

    def token(self, name: str, card_id: int, epoch: int) -> str:
        from laneboard.board.tokens import Tokens
        from laneboard.domain.clock import FakeClock
        from laneboard.domain.model import human
        from laneboard.store import open_store

        store = open_store(self.url, FakeClock())
        try:
            raw, _ = Tokens(store).create(human("alice"), name, card_id=card_id, epoch=epoch)
        finally:
            store.close()
        return raw


def serve_socket(db: str, state: str, now: str) -> None:
    """Serve the board on its unix socket, as a supervisor does, until terminated."""
    from laneboard.board.service import Board
    from laneboard.ops.clock import PinnedClock, pinned_ms
    from laneboard.store import open_store
    from laneboard.supervisor import board_socket
    from laneboard.workspace.hooks import install

    store = open_store(db, PinnedClock(pinned_ms(now)))
    board = install(Board(store))
    board_socket.serve(board, state)
    stop = False

    def handler(_signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, handler)
    while not stop:
        time.sleep(0.05)
    board_socket.stop(board)
    store.close()


if __name__ == "__main__" and sys.argv[1:2] == ["socket"]:
    serve_socket(sys.argv[2], sys.argv[3], sys.argv[4])
