"""``lb watch``: the board and one card drawn in the terminal, local and remote, redrawn
live in a terminal; a clear refusal without rich or with a bad interval."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest
from tests.cli_kit import LB, MODES, Cli

from laneboard.domain.clock import FakeClock
from laneboard.domain.transcript import entry
from laneboard.store import open_store


@pytest.fixture(params=MODES)
def cli(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cli(tmp_path, str(request.param))
    assert c.local("init", "--project", "WEB", "--path", str(tmp_path)).code == 0
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_watch_draws_the_board_and_a_card(cli: Cli) -> None:
    cli.ok("card", "add", "WEB", "Login page", "--accept", "it works", "--priority", "1")
    cli.ok("card", "add", "WEB", "Billing export")
    cli.ok("card", "claim", "WEB-1", "--holder", "worker-7")
    cli.ok("card", "comment", "WEB-1", "which port?")
    board = cli.run("watch", "--once", COLUMNS="160")
    assert board.code == 0, board.err
    header = board.out.splitlines()[1]
    assert header.index("todo 1") < header.index("in_progress 1") < header.index("done 0")
    assert "WEB-2 p2 Billing" in board.out and "held by worker-7" in board.out
    assert "2 cards" in board.out

    one = cli.run("watch", "WEB-1", "--once", COLUMNS="120")
    assert one.code == 0, one.err
    assert "WEB-1 Login page" in one.out and "in_progress · round 1" in one.out
    assert "A1 it works" in one.out and "which port?" in one.out
    assert "card.claimed" in one.out and "no transcript yet" in one.out

    only = cli.run("watch", "--once", "--label", "nothing", COLUMNS="160")
    assert "0 cards" in only.out


def test_watch_refuses_clearly(tmp_path: Path) -> None:
    c = Cli(tmp_path)
    assert c.local("init", "--project", "WEB", "--path", str(tmp_path)).code == 0
    bad = c.run("watch", "--interval", "0")
    assert bad.code != 0 and "BAD_INPUT" in bad.err and "0.1 to 3600" in bad.err
    missing = c.run("watch", "WEB-9", "--once")
    assert missing.code != 0 and "NOT_FOUND" in missing.err
    shim = tmp_path / "no-rich" / "rich"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('rich is not here')\n")
    path = os.pathsep.join([str(shim.parent), c.env.get("PYTHONPATH", "")])
    gone = c.run("watch", "--once", PYTHONPATH=path)
    assert gone.code != 0 and "pip install 'laneboard[watch]'" in gone.err


def test_watch_redraws_live_in_a_terminal(tmp_path: Path) -> None:
    c = Cli(tmp_path)
    assert c.local("init", "--project", "WEB", "--path", str(tmp_path)).code == 0
    c.ok("card", "add", "WEB", "already there")
    leader, follower = pty.openpty()
    env = {**c.environ(), "COLUMNS": "160", "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen([*LB, "watch", "--interval", "0.2"], stdin=follower,
                            stdout=follower, stderr=follower, env=env)  # fmt: skip
    os.close(follower)
    seen = b""
    try:
        seen = read_until(leader, "WEB-1", seen)
        c.ok("card", "add", "WEB", "added")
        seen = read_until(leader, "WEB-2", seen)
        assert proc.poll() is None  # still running, redrawing
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        os.close(leader)
    assert "todo 2" in plain(seen)


def test_watching_a_card_shows_its_transcript_grow(tmp_path: Path) -> None:
    c = Cli(tmp_path)
    assert c.local("init", "--project", "WEB", "--path", str(tmp_path)).code == 0
    c.ok("card", "add", "WEB", "watch me")
    store = open_store(c.url, FakeClock())
    with store.write() as tx:
        card = tx.card_by_ref("WEB-1")
        turn = tx.start_turn(None, card.id, 1, None, "scripted", "s-1", "go")
        tx.append_transcript(turn, card.id, [(1, tx.now(), entry("message", "reading the code"))])
    leader, follower = pty.openpty()
    env = {**c.environ(), "COLUMNS": "120", "LINES": "60", "TERM": "xterm"}
    proc = subprocess.Popen([*LB, "watch", "WEB-1", "--interval", "0.2"], stdin=follower,
                            stdout=follower, stderr=follower, env=env)  # fmt: skip
    os.close(follower)
    try:
        seen = read_until(leader, "reading the code", b"")
        assert "turn 1 running" in plain(seen)
        with store.write() as tx:
            tx.append_transcript(turn, card.id, [(2, tx.now(), entry("check", "pytest -q"))])
            tx.finish_turn(turn, "ok", "done", None, 0, {})
        seen = read_until(leader, "check: pytest -q", seen)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        os.close(leader)
        store.close()


def plain(raw: bytes) -> str:
    """Terminal output without its escape sequences."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode("utf-8", "replace"))


def read_until(fd: int, want: str, seen: bytes, timeout: float = 30.0) -> bytes:
    deadline = time.monotonic() + timeout
    while want not in plain(seen):
        assert time.monotonic() < deadline, seen[-2000:]
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
    return seen
