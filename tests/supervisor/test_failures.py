"""Failure paths: hangs, crashes, dispatch and admission failures, locks, bounds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain import prompts
from laneboard.domain.model import human
from laneboard.domain.roles import Role
from laneboard.domain.timecontract import TimeContract
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store
from laneboard.supervisor import instances, patrol, records
from laneboard.supervisor import ticker as ticks
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.runtime import Runtime

from .helpers import (
    RealNowClock,
    Running,
    config,
    occupy_slot,
    settled,
    unadmittable_project,
    wait_for,
)


def _setup(url: str, tmp: Path, clock: Any, key: str = "F") -> tuple[Store, Board, Path]:
    proj = tmp / "proj"
    proj.mkdir(exist_ok=True)
    store = open_store(url, clock)
    board = Board(store)
    board.add_project(human("alice"), key, path=str(proj))
    return store, board, proj


def _turns(store: Store) -> list[dict[str, Any]]:
    with store.read() as tx:
        return tx.all("SELECT * FROM turns ORDER BY id")


def test_hanging_agent_is_cut_at_the_turn_timeout(sqlite_store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    store, board, proj = _setup(sqlite_store_url, tmp_path, clock)
    marker = proj / "hanging"  # the session's own directory
    script = [
        {"run": f"touch {marker}", "attempt": 1},
        {"hang": True, "attempt": 1},
        {"deliver": "second try", "attempt": 2},
    ]
    ref = board.create_card(
        human(), "F", "hangs once", acceptance_mode="off", meta={"script": script}
    ).ref
    with Running(sqlite_store_url, config(tmp_path), clock):
        wait_for(marker.exists, what="the agent hanging in its first turn")
        clock.advance(minutes=31)  # the injected clock passes the 30-minute turn timeout
        wait_for(
            lambda: board.get(ref).status.value in ("in_review", "done"), what="second attempt"
        )
        wait_for(lambda: settled(store), what="turn recorded")
    turns = _turns(store)
    assert [t["outcome"] for t in turns] == ["timed_out", "ok"]
    store.close()


def test_three_crashes_hold_the_card(store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    store, board, _ = _setup(store_url, tmp_path, clock)
    ref = board.create_card(
        human(), "F", "always crashes", acceptance_mode="off", meta={"script": [{"crash": 3}]}
    ).ref
    with Running(store_url, config(tmp_path), clock):
        wait_for(lambda: board.get(ref).status.value == "blocked", what="hold")
    card = board.get(ref)
    assert card.meta["hold_cycle"] == "agent_failure" and card.meta["hold_bound"] == 3
    questions = [c for c in board.comments(ref) if c.kind.value == "question"]
    assert len(questions) == 1 and "bound (3)" in questions[0].body
    turns = _turns(store)
    assert [t["outcome"] for t in turns] == ["failed"] * 3
    assert all(t["exit_code"] == 3 for t in turns)
    with store.read() as tx:
        assert [r.state for r in records.queue_rows(tx, states=("failed",))] == ["failed"]
    store.close()


def test_dispatch_failure_releases_at_once_and_holds_at_the_third(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    clock = RealNowClock()
    store, board, _ = _setup(sqlite_store_url, tmp_path, clock)
    ref = board.create_card(human(), "F", "no agent", acceptance_mode="off").ref
    # the command kind without a template cannot start a session
    cfg = config(tmp_path, default_agent="command")

    def held() -> bool:  # board time passes only through the injected clock
        clock.advance(seconds=5)
        return board.get(ref).status.value == "blocked"

    with Running(sqlite_store_url, cfg, clock):
        wait_for(held, what="hold")
    card = board.get(ref)
    assert card.meta["dispatch_failures"] == 3 and card.meta["hold_cycle"] == "dispatch"
    # a template that is not configured is the configuration's fault: the hold names the fix
    assert card.meta["hold_reason"] == "configuration"
    assert card.meta["hold_fix"] == "set supervisor.agent_kinds.command.template"
    events = board.events(card=ref, limit=500)
    kinds = [e.type for e in events]
    assert kinds.count("card.claimed") == 3 and kinds.count("card.released") == 2
    claims = [e.at for e in events if e.type == "card.claimed"]
    # with a backoff between them: 10 s, then 20 s (never three tries within a second)
    assert claims[1] - claims[0] >= 10_000 and claims[2] - claims[1] >= 20_000
    store.close()


def _nowhere(url: str, tmp: Path, fillers: int = 0) -> tuple[Any, Store, Board, str, Runtime]:
    """A board whose one todo card cannot be admitted (its lane's slot is taken: the card's
    own failure), ``fillers`` backlog cards before it, and a runtime that polls it: (clock,
    store, board, the card's ref, runtime)."""
    clock = RealNowClock()
    store = open_store(url, clock)
    board = Board(store)
    repo = unadmittable_project(tmp)
    board.add_project(human(), "G", path=str(repo))
    for i in range(fillers):
        board.create_card(human(), "G", f"filler {i}", status="backlog")
    ref = board.create_card(human(), "G", "nowhere to run").ref
    occupy_slot(repo, ref)
    rt = Runtime(store, config(tmp), "m", LogFile(str(tmp / "log")), pool_alive=lambda: True)
    return clock, store, board, ref, rt


def test_admission_failures_back_off_then_hold(sqlite_store_url: str, tmp_path: Path) -> None:
    from laneboard.supervisor.poll import backoff_ms, poll

    clock, store, board, ref, rt = _nowhere(sqlite_store_url, tmp_path)
    assert [backoff_ms(n) for n in (1, 2, 3, 4, 5, 9, 20)] == [
        0,
        0,
        30_000,
        60_000,
        120_000,
        1_920_000,
        3_600_000,
    ]
    for n in range(1, 5):
        res = poll(rt)
        assert res.deferred[0]["failures"] == n and not res.claimed
        assert board.get(ref).status.value == "todo"
        if n >= 3:  # backing off: the next poll does not retry yet
            assert poll(rt).deferred[0]["reason"] == "backoff"
        clock.advance(seconds=backoff_ms(n) / 1000 + 1)
    res = poll(rt)
    assert res.held == [ref]
    card = board.get(ref)
    assert card.status.value == "blocked" and card.meta["hold_cycle"] == "admission"
    store.close()


def test_a_backed_off_card_is_retried_when_its_backoff_ends(store_url: str, tmp_path: Path) -> None:
    """The next tick is due when the first backoff ends, not at the fallback tick (600 s):
    an idle board has no other news to wake the loop for the retry."""
    from laneboard.supervisor.poll import backoff_ms

    clock, store, board, ref, rt = _nowhere(store_url, tmp_path)
    ticker = ticks.Ticker(rt)
    for _ in range(3):  # two at once, then the third failure starts the backoff
        assert ticker.tick(force=True).state == "ran"
    with store.read() as tx:
        row = records.deferral(tx, board.get(ref).id, rt.machine)
    assert row is not None and int(row["failures"]) == 3
    next_at = int(row["next_at"])
    assert next_at - clock.now_ms() > backoff_ms(3) - 5_000
    assert ticker.next_due_ms <= next_at + 1_000  # due when the backoff ends
    ticker.tick()  # the third failure's own events are news once: the card is skipped
    assert ticker.tick().state == "idle"  # and then nothing changed: no tick before it is due
    assert ticker.next_due_ms <= next_at + 1_000
    clock.advance(seconds=(next_at - clock.now_ms()) / 1000 + 1)
    assert ticker.tick().state == "ran"  # due: the retry runs without any news
    with store.read() as tx:
        row = records.deferral(tx, board.get(ref).id, rt.machine)
    assert row is not None and int(row["failures"]) == 4
    assert ticker.next_due_ms <= int(row["next_at"]) + 1_000
    store.close()


def test_status_names_deferred_and_queued_cards_by_their_ref(
    store_url: str, tmp_path: Path
) -> None:
    """``lb status`` speaks of cards as people do (G-1), not by their row ids."""
    from laneboard.supervisor.poll import poll
    from laneboard.supervisor.reports_text import render_status
    from laneboard.supervisor.status import status_report

    clock, store, board, ref, rt = _nowhere(store_url, tmp_path, fillers=3)  # ids != numbers
    poll(rt)
    card = board.get(ref)
    with store.write() as tx:  # a live row, as a dispatch leaves it
        records.enqueue(
            tx, "handoff", card.id, "worker", card.project_id, "m", str(tmp_path), 1, 0, {}
        )
    rep = status_report(store, clock, machine="m")
    assert [d["card"] for d in rep["deferrals"]] == [ref]
    assert [r["card"] for r in rep["queue"]["live"]] == [ref]
    text = render_status(rep)
    deferred = [line for line in text.splitlines() if "failures 1" in line]
    assert deferred and deferred[0].strip().startswith(f"card {ref} "), text
    row = [line for line in text.splitlines() if line.strip().startswith("row ")]
    assert row and f" card {ref} " in row[0], text
    store.close()


def test_dry_run_plans_and_changes_nothing(sqlite_store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    store, board, _ = _setup(sqlite_store_url, tmp_path, clock)
    board.create_card(human(), "F", "ready")
    rt = Runtime(
        store, config(tmp_path), "m", LogFile(str(tmp_path / "log")), pool_alive=lambda: True
    )
    with store.read() as tx:
        before = tx.max_event_id()
    result = ticks.Ticker(rt).tick(force=True, dry_run=True)
    assert result.passes["poll"]["plan"] == [
        {"card": "F-1", "role": "worker", "kind": "scripted", "stale": False, "action": "claim"}
    ]
    with store.read() as tx:
        assert tx.max_event_id() == before
        assert tx.lock_row("tick:m") is None
    store.close()


def test_idle_tick_writes_nothing(sqlite_store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    store, board, _ = _setup(sqlite_store_url, tmp_path, clock)
    rt = Runtime(
        store, config(tmp_path), "m", LogFile(str(tmp_path / "log")), pool_alive=lambda: True
    )
    ticker = ticks.Ticker(rt)
    assert ticker.tick().state == "ran"
    raw = store._acquire()
    changes = raw.total_changes
    store._release(raw)
    again = ticker.tick()
    assert again.state == "idle"
    raw = store._acquire()
    assert raw.total_changes == changes
    store._release(raw)
    board.create_card(human(), "F", "new")  # an event: the next tick works again
    assert ticker.tick().state == "ran"
    store.close()


def test_overlapping_ticks_skip_and_never_claim_twice(store_url: str, tmp_path: Path) -> None:
    clock = RealNowClock()
    store, board, _ = _setup(store_url, tmp_path, clock)
    for i in range(6):
        board.create_card(human(), "F", f"c{i}")
    gate, entered = threading.Event(), threading.Event()

    def slow_pass(rt: Runtime, dry: bool) -> dict[str, Any]:
        entered.set()
        gate.wait(30)
        return {}

    ticks.PASSES["patrol"] = slow_pass
    try:
        rt1 = Runtime(
            store, config(tmp_path), "m", LogFile(str(tmp_path / "l1")), pool_alive=lambda: True
        )
        store2 = open_store(store_url, clock)
        rt2 = Runtime(
            store2, config(tmp_path), "m", LogFile(str(tmp_path / "l2")), pool_alive=lambda: True
        )
        results: list[Any] = []
        t = threading.Thread(target=lambda: results.append(ticks.Ticker(rt1).tick(force=True)))
        t.start()
        assert entered.wait(30)
        second = ticks.Ticker(rt2).tick(force=True)
        gate.set()
        t.join(30)
    finally:
        ticks.PASSES["patrol"] = patrol.patrol_pass  # registered again for later tests
    assert second.state == "skipped" and "lock held" in second.reason
    assert results[0].state == "ran" and len(results[0].passes["poll"]["claimed"]) == 6
    claims = [e for e in board.events(limit=1000) if e.type == "card.claimed"]
    assert len(claims) == len({e.card_id for e in claims}) == 6
    store2.close()
    store.close()


def _lb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_second_supervisor_refused_and_continue_once_skips(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LANEBOARD_DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        "LANEBOARD_MACHINE": "box",
    }
    first = subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "start", "--agent", "scripted"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stderr is not None
        line = first.stderr.readline()
        assert "supervisor running" in line
        second = _lb(env, "start", "--agent", "scripted")
        assert second.returncode == 1
        assert second.stderr.startswith(
            "error SUPERVISOR_RUNNING: a supervisor is already running on box"
        )
        store = open_store(env["LANEBOARD_DATABASE_URL"])

        def tick_lease() -> Any:
            with store.read() as tx:
                return tx.lock_row("tick:box")

        # the resident keeps the machine's tick lease from its first tick on, between ticks
        wait_for(lambda: tick_lease() is not None, what="the resident's first tick")
        held = tick_lease()
        assert str(held["holder"]).endswith("/tick")
        skipped = _lb(env, "loop", "run", "--continue-once", "--json")
        assert skipped.returncode == 3 and '"state": "skipped"' in skipped.stdout
        assert str(held["holder"]) in skipped.stdout
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
        if first.stderr:
            first.stderr.close()
    with store.read() as tx:  # given back at its shutdown
        assert tx.lock_row("tick:box") is None
    store.close()


def test_handoff_is_bounded_with_maximal_title_and_id() -> None:
    from laneboard.domain.clock import FakeClock
    from laneboard.domain.model import AcceptanceMode, Card, CardKind, Criterion
    from laneboard.domain.status import Status

    now = FakeClock().now_ms()
    card = Card(
        id=10**12,
        ref="ABCDEFGHIJ-999999999999",
        project_id=1,
        title="T" * 500,
        description="d " * 50_000,
        kind=CardKind.TASK,
        parent_id=None,
        status=Status.IN_PROGRESS,
        assignee="worker",
        priority=0,
        labels=("x",) * 50,
        acceptance=tuple(Criterion(f"A{i}", "must " * 100) for i in range(40)),
        acceptance_mode=AcceptanceMode.AUTO,
        delivery_round=99,
        checks=("pytest -q",) * 30,
        allowed_paths=("src/" + "p" * 200,) * 20,
        holder="worker",
        holder_kind=None,
        session_id=None,
        claimed_at=now,
        heartbeat_at=now,
        claim_epoch=7,
        meta={},
        idempotency_key=None,
        run_id=None,
        status_since=now,
        created_at=now,
        updated_at=now,
        version=1,
    )
    role = Role(
        "worker", title="W" * 300, responsibilities=("r" * 300,) * 3, boundaries=("b" * 300,) * 3
    )
    text = prompts.handoff(card, role, "/very/long/" + "x" * 300 + "/card.md")
    assert len(text) <= prompts.HANDOFF_MAX
    assert card.ref in text and "lb card move ABCDEFGHIJ-999999999999 in_review" in text
    turns = [prompts.TranscriptTurn("p" * 5000, "r" * 5000) for _ in range(30)]
    assert len(prompts.replay(card, role, turns, "gone")) <= prompts.REPLAY_MAX
    assert len(prompts.resume(card, "x" * 10_000)) <= prompts.RESUME_MAX


def test_time_contract_invariants() -> None:
    t = TimeContract()
    assert t.heartbeat_fresh < t.stale_same_holder < t.stale_anyone
    assert t.heartbeat_fresh <= TimeContract.MAX_FRESH
    assert t.turn_timeout < t.ledger_reap and t.tick_interval < t.turn_timeout
    assert t.pool_stale > t.pool_heartbeat
    assert t.violations() == []
    assert replace(t, turn_timeout=60).violations() == []  # a one-minute turn is allowed
    for bad in (
        {"turn_timeout": 59},
        {"tick_interval": 4000},
        {"turn_timeout": 60, "tick_interval": 1200},
        {"pool_stale": 10},
        {"heartbeat_fresh": 40 * 60},
    ):
        with pytest.raises(LaneboardError) as err:
            replace(t, **bad).validate()
        assert err.value.code == "CONFIG_INVALID"


def test_start_refuses_an_invalid_time_contract(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LANEBOARD_DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
    }
    out = _lb(env, "start", "--turn-timeout", "59")
    assert out.returncode == 2
    assert out.stderr.startswith("error CONFIG_INVALID: time contract violated: turn_timeout")


def test_two_continue_once_runs_at_once_one_skips_and_nothing_is_claimed_twice(
    tmp_path: Path,
) -> None:
    """Two real ``lb loop run --continue-once`` overlap: the first holds the tick while its
    patrol pipes an alert to a slow notify command; the second skips with exit 3."""
    from laneboard.domain.clock import MINUTE_MS, FakeClock, iso
    from laneboard.domain.model import agent

    clock = FakeClock()
    url = f"sqlite:///{tmp_path / 'b.db'}"
    store = open_store(url, clock)
    board = Board(store)
    me = human("alice")
    project = tmp_path / "proj"
    project.mkdir()
    board.add_project(me, "P", path=str(project))
    ready = [board.create_card(me, "P", f"ready {i}").ref for i in range(5)]
    ghost = board.create_card(me, "P", "held by a dead worker")
    board.claim(agent("ghost"), ghost.ref)  # its heartbeat goes stale: the patrol alerts
    clock.advance(31 * MINUTE_MS)
    with store.write() as tx:  # this machine's resident pool (this test process) is up
        instances.register(tx, "box", TimeContract(), {"agent": "scripted"})
    store.close()
    marker, alerts = tmp_path / "notify-started", tmp_path / "alerts.jsonl"
    release = tmp_path / "notify-release"  # the first run's notify lasts until the second ran
    env = {
        **os.environ,
        "LANEBOARD_DATABASE_URL": url,
        "LANEBOARD_NOW": str(iso(clock.now_ms())),
        "LANEBOARD_NOTIFY_COMMAND": (
            f"touch {marker}; until [ -e {release} ]; do sleep 0.05; done; cat >> {alerts}"
        ),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        "LANEBOARD_MACHINE": "box",
    }
    args = ("loop", "run", "--continue-once", "--agent", "scripted", "--json")
    cmd = [sys.executable, "-m", "laneboard.cli.main", *args]
    first = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(marker.exists, 30, "the first run's patrol to start notifying")
        second = _lb(env, *args)
        release.touch()
        assert second.returncode == 3, second.stderr
        assert '"state": "skipped"' in second.stdout
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        assert sorted(json.loads(out)["passes"]["poll"]["claimed"]) == sorted(ready), out
    finally:
        release.touch()  # (a notify command left waiting would outlive the test)
        if first.poll() is None:
            first.kill()
            first.wait()
    store = open_store(url, clock)
    board = Board(store)
    try:
        claimed = [e.payload["ref"] for e in board.events(limit=1000) if e.type == "card.claimed"]
        assert sorted(claimed) == sorted([ghost.ref, *ready])  # each exactly once
        assert all(board.get(ref).status.value == "in_progress" for ref in ready)
        third = _lb(env, *args)  # after: nothing new
        assert third.returncode == 0, third.stderr
        again = [e.payload["ref"] for e in board.events(limit=1000) if e.type == "card.claimed"]
        assert again == claimed
        assert len(alerts.read_text().splitlines()) == 1  # the repeat was suppressed
    finally:
        store.close()
