"""The resident supervisor (``lb start``) runs the schedule pass on its own clock: a
schedule that is due creates its card while the supervisor runs, and one that is not
due creates nothing. Board time is pinned with ``LANEBOARD_NOW``; the only waiting is
for the real process to reach a state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from laneboard.board.schedules import Schedules, fire_key
from laneboard.board.service import Board
from laneboard.domain.clock import MINUTE_MS, FakeClock
from laneboard.domain.model import human
from laneboard.store import Store, open_store

from .helpers import wait_for

ME = human("alice")
JOB = {"project": "S", "title": "hourly check", "assignee": "ops", "acceptance_mode": "off"}


def _scheduled(store: Store) -> list[dict[str, Any]]:
    with store.read() as tx:
        return [
            dict(r)
            for r in tx.all(
                "SELECT id, idempotency_key FROM cards WHERE idempotency_key LIKE ? ORDER BY id",
                ("schedule|%",),
            )
        ]


def test_lb_start_runs_the_schedule_pass(store_url: str, tmp_path: Path) -> None:
    clock = FakeClock()  # 2026-01-01 00:00 UTC
    store = open_store(store_url, clock)
    try:
        Board(store).add_project(ME, "S")
        clock.advance(minutes=1)
        Schedules(store, clock).add(ME, "hourly", "0 * * * *", JOB, timezone="UTC")
        top = clock.now_ms() + 59 * MINUTE_MS  # 01:00, the first occurrence
        env = {
            **os.environ,
            "LANEBOARD_DATABASE_URL": store_url,
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
            "LANEBOARD_MACHINE": "schedbox",
        }
        env.pop("LANEBOARD_TOKEN", None)
        env.pop("LANEBOARD_TOKEN_FILE", None)
        start = [sys.executable, "-m", "laneboard.cli.main", "start", "--agent", "scripted"]

        # 00:59:30: the supervisor runs its passes, but nothing is due
        early = subprocess.run(
            [*start, "--for-seconds", "1.5"],
            env={**env, "LANEBOARD_NOW": str(top - 30_000)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert early.returncode == 0, early.stderr
        assert _scheduled(store) == []

        # 01:00:30: the occurrence is due; the running supervisor creates its card
        proc = subprocess.Popen(
            start,
            env={**env, "LANEBOARD_NOW": str(top + 30_000)},
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stderr is not None
            assert "supervisor running" in proc.stderr.readline()
            wait_for(lambda: bool(_scheduled(store)), what="the scheduled card")
            assert proc.poll() is None, "the card was created by the running supervisor"
            wait_for(
                lambda: Schedules(store, clock).get("hourly")["last_outcome"] == "dispatched",
                what="the schedule outcome",
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
            if proc.stderr:
                proc.stderr.close()
        [card] = _scheduled(store)
        assert card["idempotency_key"] == fire_key("hourly", top)
        view = Schedules(store, clock).get("hourly")
        assert view["last_minute"] is not None and view["health"] == "ok"
        with store.read() as tx:
            fired = tx.all("SELECT actor, card_id FROM events WHERE type = 'schedule.fired'")
        assert [(e["actor"], e["card_id"]) for e in fired] == [("scheduler", card["id"])]
    finally:
        store.close()
