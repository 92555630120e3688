"""``lb run``'s finite loop: the ticker, retries and the error threshold (the real
supervisor in process), and the command itself in subprocesses with the scripted agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.runs import run_events
from tests.supervisor.helpers import RealNowClock, config

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.domain.runs import RunOptions, normalize
from laneboard.store import Store, open_store
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.loop import Supervisor
from laneboard.supervisor.runs import RunDriver
from laneboard.supervisor.runtime import Runtime

ME = human("alice")


class Mono:
    """A monotonic clock the test moves (the loop's ticker reads it)."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    """Build a board, a run and its loop over the real supervisor (stores closed after)."""
    stores: list[Store] = []

    def build(url: str, options: RunOptions, passes: Any, mono: Mono | None = None
              ) -> tuple[Board, RunDriver, int]:  # fmt: skip
        store = open_store(url, RealNowClock())
        stores.append(store)
        board = Board(store)
        board.add_project(ME, "L")
        run_id = int(board.create_run(ME, "L", "loop", options)["id"])
        rt = Runtime(store, config(tmp_path), "test-machine", LogFile(str(tmp_path / "log")))
        rt.run_scope = run_id
        sup = Supervisor(rt, drive_runs=False)
        return board, RunDriver(sup, run_id, passes, *([mono] if mono else [])), run_id

    yield build
    for s in stores:
        s.close()


def test_the_ticker_starts_with_the_loop_and_skips_missed_slots(
    sqlite_store_url: str, make: Any
) -> None:
    mono = Mono()
    slow = {"for": 0.15}

    def passes() -> None:
        mono.t += slow["for"]  # the iteration's own time eats into the wait

    _, d, _ = make(sqlite_store_url, normalize(interval_ms=200), passes, mono)
    d()  # the first iteration at once
    assert d.done == 1 and d.due == pytest.approx(100.2)  # not 100.15 + 0.2
    d()
    assert d.done == 1  # not due yet
    mono.t = 100.2
    slow["for"] = 0.3  # a long iteration: the slot at 100.4 is skipped
    d()
    assert d.done == 2 and d.due == pytest.approx(100.6)


def test_failed_iterations_retry_then_fail_the_run_with_its_event(
    store_url: str, make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNTEST_API_KEY", "sekrit-value-123")
    mono = Mono()

    def passes() -> None:
        raise RuntimeError("the workflow pass failed: token sekrit-value-123 refused")

    opts = normalize(retry_backoff_ms=500, max_consecutive_errors=3)
    board, d, rid = make(store_url, opts, passes, mono)
    d()
    assert d.due == pytest.approx(100.5)  # the retry backoff, not the interval
    for _ in range(2):
        mono.t = d.due
        d()
    assert d.result is not None and d.result.reason == "failed" and d.result.iterations == 3
    assert d.sup.stop_event.is_set()
    view = board.run(rid)
    assert view["status"] == "failed" and view["ended_at"] is not None
    assert view["consecutive_errors"] == 3 and view["iterations"] == 3
    events = run_events(board.store, rid)
    retries = [e["payload"] for e in events if e["type"] == "run.retry"]
    assert [(r["iteration"], r["attempt"], r["max_attempts"], r["next_delay_ms"])
            for r in retries] == [(1, 1, 3, 500), (2, 2, 3, 500)]  # fmt: skip
    assert all("***" in r["error"] and "sekrit" not in r["error"] for r in retries)
    failed = [e for e in events if e["type"] == "run.failed"]
    assert len(failed) == 1 and failed[0]["payload"]["attempt"] == 3


def test_a_success_resets_the_streak_and_failures_count_toward_the_limit(
    sqlite_store_url: str, make: Any
) -> None:
    mono = Mono()
    outcomes = iter([True, False, True, False])

    def passes() -> None:
        if not next(outcomes):
            raise RuntimeError("flaky")

    opts = normalize(max_consecutive_errors=2, max_iterations=4)
    board, d, rid = make(sqlite_store_url, opts, passes, mono)
    while d.result is None:
        mono.t = d.due
        d()
    assert (d.result.reason, d.result.iterations) == ("iteration_limit", 4)
    view = board.run(rid)
    assert view["status"] == "active"  # the limit never ends the run
    assert (view["consecutive_errors"], view["errors_total"]) == (1, 2)


# -- the command -------------------------------------------------------------------------------
def lb(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def env(store_url: str, tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    e.update(LANEBOARD_DATABASE_URL=store_url, XDG_STATE_HOME=str(tmp_path / "state"),
             LANEBOARD_USER="alice")  # fmt: skip
    proj = tmp_path / "proj"
    proj.mkdir()
    assert lb(e, "init").returncode == 0
    assert lb(e, "project", "add", "L", "--path", str(proj)).returncode == 0
    return e


def test_headless_runs_exactly_one_iteration(env: dict[str, str]) -> None:
    got = lb(env, "run", "--project", "L", "--goal", "once", "--headless", "--json",
             "--agent", "scripted")  # fmt: skip
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert (out["iterations"], out["exit"], out["status"]) == (1, "iteration_limit", "active")
    assert out["convergence"] == {"state": "active", "reason": "awaiting_initial_work"}
    shown = json.loads(lb(env, "run", "show", str(out["run_id"]), "--json").stdout)
    assert shown["iterations"] == 1 and shown["options"]["max_iterations"] == 1
    again = lb(env, "run", "--resume", str(out["run_id"]), "--headless", "--max-iterations",
               "2", "--interval", "10ms", "--json", "--agent", "scripted")  # fmt: skip
    assert json.loads(again.stdout)["iterations"] == 2


def test_lb_run_drives_its_cards_to_completed(env: dict[str, str]) -> None:
    created = lb(env, "run", "create", "L", "--goal", "ship two parts", "--json")
    rid = json.loads(created.stdout)["id"]
    for i in range(2):
        meta = json.dumps({"script": [{"deliver": f"part {i}"}]})
        add = lb(env, "card", "add", "L", f"part {i}", "--run", str(rid), "--meta", meta,
                 "--acceptance-mode", "off")  # fmt: skip
        assert add.returncode == 0, add.stderr
    lb(env, "card", "add", "L", "outside the run", "--status", "backlog")
    got = lb(env, "run", "--resume", str(rid), "--interval", "100ms", "--agent", "scripted")
    assert got.returncode == 0, got.stderr
    assert f"run {rid} completed" in got.stdout
    assert "all_tasks_and_proposals_terminal" in got.stdout
    assert "work_remains" in got.stderr or "pending_agent_turn" in got.stderr  # progress lines
    listed = json.loads(lb(env, "card", "list", "--run", str(rid), "--json").stdout)
    assert [c["status"] for c in listed] == ["done", "done"]


def test_bad_options_are_one_line_and_create_nothing(env: dict[str, str]) -> None:
    for args, needle in (
        (("run", "--goal", "x"), "needs --project and --goal"),
        (("run", "--project", "L", "--goal", "x", "--interval", "soon"), "not a duration"),
        (("run", "--resume", "99"), "run 99 does not exist"),
    ):
        got = lb(env, *args)
        assert got.returncode == 2 or got.returncode == 1, got
        assert needle in got.stderr and got.stderr.count("\n") == 1, got.stderr
    assert json.loads(lb(env, "run", "list", "--json").stdout) == []


def test_a_loop_in_a_thread_ends_when_the_run_is_stopped(sqlite_store_url: str, make: Any) -> None:
    board, d, rid = make(sqlite_store_url, normalize(interval_ms=20), lambda: None)
    d.sup.extra_clocks.append(("run", 0, d))
    t = threading.Thread(target=d.sup.run, kwargs={"max_seconds": 60}, daemon=True)
    t.start()
    board.transition_run(ME, rid, "stop", idempotency_key="stop-it")
    t.join(60)
    assert d.result is not None and d.result.reason == "stopped"


def test_cancelling_lb_run_leaves_the_run_active(env: dict[str, str]) -> None:
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "run", "--project", "L", "--goal",
         "until cancelled", "--interval", "50ms", "--agent", "scripted", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # real processes reaching a state, not time passing
            got = json.loads(lb(env, "run", "list", "--json").stdout)
            if got and got[0]["iterations"] >= 2:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("lb run never iterated")
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    result = json.loads(out)
    assert (result["exit"], result["status"]) == ("canceled", "active")
    shown = json.loads(lb(env, "run", "show", str(result["run_id"]), "--json").stdout)
    assert shown["status"] == "active" and shown["ended_at"] is None


def test_lb_run_beside_a_running_supervisor_is_refused_and_writes_nothing(
    env: dict[str, str],
) -> None:
    import signal

    start = subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "start", "--agent", "scripted"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert start.stderr is not None
        assert "supervisor running" in start.stderr.readline()
        got = lb(env, "run", "--project", "L", "--goal", "beside it", "--headless")
        assert got.returncode == 1
        assert got.stderr.startswith("error SUPERVISOR_RUNNING")
        assert json.loads(lb(env, "run", "list", "--json").stdout) == []
    finally:
        start.send_signal(signal.SIGTERM)
        assert start.wait(30) == 0
        if start.stderr:
            start.stderr.close()
