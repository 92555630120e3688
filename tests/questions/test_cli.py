"""The real lb: ask, wait refusals, and lb patrol piping alerts to a notify command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import human
from laneboard.store import open_store

ME = human("alice")


def _lb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ask_wait_and_patrol_notify(tmp_path: Path) -> None:
    db = tmp_path / "board.db"
    clock = FakeClock()
    store = open_store(str(db), clock)
    board = Board(store)
    board.add_project(ME, "C")
    c = board.create_card(ME, "C", "work")
    board.claim(ME, c.ref)
    store.close()
    env = {
        **os.environ,
        "LANEBOARD_DATABASE_URL": str(db),
        "LANEBOARD_NOW": str(clock.now_ms()),
        "LANEBOARD_USER": "alice",
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
    }
    out = _lb(env, "card", "ask", c.ref, "Q1: which port?", "--json")
    assert out.returncode == 0, out.stderr
    qid = json.loads(out.stdout)["id"]
    bad = _lb(env, "card", "wait", c.ref, "--question", str(qid), "--timeout", "541")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "out of range" in bad.stderr
    gone = _lb(env, "card", "wait", c.ref, "--question", "999")
    assert gone.returncode == 1 and "question 999 does not exist" in gone.stderr
    # the board clock is pinned; the bound is elapsed time, so a 1 s wait still ends
    t = _lb(env, "card", "wait", c.ref, "--question", str(qid), "--timeout", "1", "--json")
    assert t.returncode == 0, t.stderr
    assert json.loads(t.stdout)["outcome"] == "timeout"
    env["LANEBOARD_NOW"] = str(clock.now_ms() + 61 * 60_000)
    sink = tmp_path / "alerts.jsonl"
    p = _lb(env, "patrol", "--notify", f"cat >> {sink}", "--json")
    assert p.returncode == 0, p.stderr
    sent = [json.loads(line) for line in sink.read_text().splitlines()]
    rows = sorted(a["row"] for a in sent)
    assert rows == ["heartbeat_stale", "question_waiting"]
    assert all(a["card"] == c.ref and a["dedup_key"] for a in sent)
    again = _lb(env, "patrol", "--notify", f"cat >> {sink}", "--json")
    assert json.loads(again.stdout)["sent"] == []
    assert len(sink.read_text().splitlines()) == 2, "repeats are suppressed"
