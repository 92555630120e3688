"""Health of runs: /healthz of lb serve and lb start --health-port, lb status, metrics."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.server.metrics import render
from laneboard.server.status import health
from laneboard.store import Store, open_store
from laneboard.supervisor.status import status_report

ME = human("alice")


def degrade(store: Store, run_id: int, error: str) -> None:
    with store.write() as tx:
        assert tx.update_run(run_id, {"status": "degraded", "last_error": error}) is not None


def test_a_degraded_run_makes_health_degraded_with_its_reason(store: Store) -> None:
    board = Board(store)
    board.add_project(ME, "H")
    ok_run = board.create_run(ME, "H", "fine")
    bad = board.create_run(ME, "H", "failing")
    assert health(store)[0] == 200
    degrade(store, bad["id"], "RuntimeError: lanes unreadable")
    code, body = health(store)
    assert code == 503 and body["status"] == "degraded"
    assert body["runs"]["degraded"] == [
        {"run": bad["id"], "reason": "RuntimeError: lanes unreadable"}
    ]
    assert body["reasons"] == [f"run {bad['id']} is degraded: RuntimeError: lanes unreadable"]
    report = status_report(store, store.clock)
    assert report["runs"]["ticked"] == 2 and report["health"]["state"] == "degraded"
    from laneboard.supervisor.reports_text import render_status

    text = render_status(report)
    assert "health      degraded" in text and f"run {bad['id']} is degraded" in text
    metrics = render(store, ME)
    assert 'laneboard_runs{status="degraded"} 1' in metrics
    assert 'laneboard_runs{status="active"} 1' in metrics
    assert 'laneboard_runs{status="failed"} 0' in metrics
    assert ok_run["status"] == "active"


def test_a_failed_pass_in_the_last_tick_is_never_ok() -> None:
    from laneboard.supervisor.status import health_of

    report = {
        "supervisor": {"state": "running", "detail": "pool heartbeat is fresh"},
        "last_tick": {"passes": {"poll": {"claimed": []}, "lanes": {"error": "OSError: disk"}}},
        "runs": {"degraded": [], "failing": [{"run": 4, "failures": 3, "reason": "boom"}]},
    }
    got = health_of(report)
    assert got["state"] == "degraded"
    assert got["reasons"] == ["the lanes pass failed: OSError: disk", "run 4: 3 failed ticks: boom"]
    report["supervisor"] = {"state": "stopped", "detail": "the supervisor stopped cleanly"}
    report["runs"] = {"degraded": [], "failing": []}
    assert health_of(report) == {"state": "ok", "reasons": []}


def test_lb_start_serves_healthz_on_its_health_port(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")},
        "LANEBOARD_DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "start", "--agent", "scripted",
         "--health-port", "0"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"health: (http://127\.0\.0\.1:\d+)/healthz", line)
        assert found, line
        with urllib.request.urlopen(found.group(1) + "/healthz", timeout=10) as resp:
            body = json.loads(resp.read())
        assert resp.status == 200 and body["status"] == "ok" and body["store"]["ok"]
        try:
            urllib.request.urlopen(found.group(1) + "/other", timeout=10)
            raise AssertionError("only /healthz is served")
        except urllib.error.HTTPError as err:
            assert err.code == 404
        store = open_store(env["LANEBOARD_DATABASE_URL"])
        try:
            assert Board(store).runs() == []  # lb start never creates a run
        finally:
            store.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        if proc.stderr:
            proc.stderr.close()
