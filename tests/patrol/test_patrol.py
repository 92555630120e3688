"""SLA patrol rows with an injected clock: each fires at its threshold and not before,
repeats are suppressed, a tier promotion is sent again, and the board never changes."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human
from laneboard.errors import LaneboardError
from laneboard.store import Store
from laneboard.supervisor import patrol
from laneboard.supervisor.patrol import PatrolSettings, run_patrol
from laneboard.supervisor.workflow import review_key

ME = human("alice")


def _cards(store: Store) -> list[dict[str, Any]]:
    with store.read() as tx:
        return [dict(r) for r in tx.all("SELECT * FROM cards ORDER BY id")]


def _run(store: Store, s: PatrolSettings) -> patrol.PatrolResult:
    before = _cards(store)
    res = run_patrol(store, s, "m1")
    assert _cards(store) == before, "the patrol changed the board"
    return res


def _rows(res: patrol.PatrolResult, row: str) -> list[dict[str, Any]]:
    return [a for a in res.sent if a["row"] == row]


@pytest.fixture
def notified(tmp_path: Path) -> Path:
    return tmp_path / "alerts.jsonl"


@pytest.fixture
def settings(notified: Path) -> PatrolSettings:
    return PatrolSettings(notify_command=f"cat >> {shlex.quote(str(notified))}")


def _setup(board: Board) -> None:
    board.add_project(ME, "P")


def test_stale_heartbeat_fires_after_30_min_then_promotes(
    board: Board, clock: FakeClock, settings: PatrolSettings, notified: Path
) -> None:
    _setup(board)
    c = board.create_card(ME, "P", "work")
    board.claim(ME, c.ref)
    clock.advance(minutes=30)
    assert _rows(_run(board.store, settings), "heartbeat_stale") == []
    clock.advance(1)
    res = _run(board.store, settings)
    [a] = _rows(res, "heartbeat_stale")
    assert a["tier"] == "overdue" and a["card"] == c.ref and a["threshold_min"] == 30
    assert a["severity"] == "warning" and a["target"] == "leader"
    assert a["measure_start_at"] and a["due_at"] and a["evidence"]["holder"] == "alice"
    again = _run(board.store, settings)
    assert _rows(again, "heartbeat_stale") == [] and a["dedup_key"] in again.suppressed
    clock.advance(minutes=330)
    [b] = _rows(_run(board.store, settings), "heartbeat_stale")
    assert b["tier"] == "escalate" and b["severity"] == "critical"
    assert b["dedup_key"] == a["dedup_key"]
    sent = [json.loads(line) for line in notified.read_text().splitlines()]
    assert [(x["row"], x["tier"]) for x in sent] == [
        ("heartbeat_stale", "overdue"),
        ("heartbeat_stale", "escalate"),
    ]
    with board.store.read() as tx:
        events = tx.all("SELECT payload FROM events WHERE type = 'alert'")
    assert len(events) == 2


def test_an_epic_in_progress_is_not_a_stale_worker(
    board: Board, clock: FakeClock, settings: PatrolSettings
) -> None:
    _setup(board)
    e = board.create_card(ME, "P", "epic", kind="epic")
    with board.store.write() as tx:
        tx.update_card(e.id, e.version, {"status": "in_progress", "heartbeat_at": tx.now()})
    clock.advance(minutes=600)
    res = _run(board.store, settings)
    assert [a for a in res.sent if a["card"] == e.ref] == []


def test_unreadable_heartbeat_is_reported(
    board: Board, clock: FakeClock, settings: PatrolSettings
) -> None:
    _setup(board)
    c = board.create_card(ME, "P", "work")
    board.claim(ME, c.ref)
    with board.store.write() as tx:
        cur = tx.card(c.id)
        assert cur is not None
        tx.update_card(c.id, cur.version, {"heartbeat_at": None})
    clock.advance(minutes=9)
    assert _rows(_run(board.store, settings), "heartbeat_unreadable") == []
    clock.advance(minutes=1)
    [a] = _rows(_run(board.store, settings), "heartbeat_unreadable")
    assert a["severity"] == "critical" and a["confidence"] == "low"
    d = board.create_card(ME, "P", "future heartbeat")
    board.claim(ME, d.ref)
    with board.store.write() as tx:
        cur = tx.card(d.id)
        assert cur is not None
        tx.update_card(d.id, cur.version, {"heartbeat_at": tx.now() + 3_600_000})
    got = _rows(_run(board.store, settings), "heartbeat_unreadable")
    assert [x["card"] for x in got] == [d.ref], "a heartbeat in the future is unreadable at once"


def test_question_waiting_tiers(board: Board, clock: FakeClock, settings: PatrolSettings) -> None:
    _setup(board)
    c = board.create_card(ME, "P", "work", assignee="worker")
    worker = agent("worker", c.id)
    board.claim(worker, c.ref)
    board.comment(worker, c.ref, "Q1: which API?", "question")
    for _ in range(5):  # a live worker keeps its heartbeat fresh
        clock.advance(minutes=12)
        board.heartbeat(worker, c.ref)
    assert _rows(_run(board.store, settings), "question_waiting") == []
    clock.advance(1)
    [a] = _rows(_run(board.store, settings), "question_waiting")
    assert a["tier"] == "overdue" and a["threshold_min"] == 60
    board.move(worker, c.ref, "awaiting", reason="E1", question="Which API, please?")
    clock.advance(minutes=60)
    assert _rows(_run(board.store, settings), "question_waiting") == []
    clock.advance(1)
    [b] = _rows(_run(board.store, settings), "question_waiting")
    assert b["dedup_key"] != a["dedup_key"], "a new wait on the same card is a new alert"
    clock.advance(minutes=1380)
    [e] = _rows(_run(board.store, settings), "question_waiting")
    assert e["tier"] == "escalate" and e["dedup_key"] == b["dedup_key"]


def test_blocked_waiting_tiers(board: Board, clock: FakeClock, settings: PatrolSettings) -> None:
    _setup(board)
    c = board.create_card(ME, "P", "work")
    board.move(ME, c.ref, "blocked", reason="external", note="waits on a vendor")
    clock.advance(minutes=120)
    assert _rows(_run(board.store, settings), "blocked_waiting") == []
    clock.advance(1)
    [a] = _rows(_run(board.store, settings), "blocked_waiting")
    assert a["tier"] == "overdue"
    clock.advance(minutes=1320)
    [b] = _rows(_run(board.store, settings), "blocked_waiting")
    assert b["tier"] == "escalate"


def test_review_aging_and_missing_review(
    board: Board, clock: FakeClock, settings: PatrolSettings
) -> None:
    _setup(board)
    c = board.create_card(ME, "P", "delivered work")
    board.claim(ME, c.ref)
    board.report(ME, c.ref, "done")
    board.move(ME, c.ref, "in_review")
    clock.advance(minutes=30)
    assert _rows(_run(board.store, settings), "review_missing") == []
    clock.advance(1)
    [m] = _rows(_run(board.store, settings), "review_missing")
    assert m["card"] == c.ref and m["evidence"]["round"] == 1
    # an open review for the same round suppresses the row for the next delivery
    d = board.create_card(ME, "P", "second delivery")
    board.claim(ME, d.ref)
    board.report(ME, d.ref, "done")
    board.move(ME, d.ref, "in_review")
    r = board.create_card(
        ME,
        "P",
        f"review {d.ref}",
        meta={"review_of": d.ref, "review_round": 1},
        idempotency_key=review_key(d.ref, 1),
    )
    clock.advance(minutes=59)
    res = _run(board.store, settings)
    assert [a["card"] for a in _rows(res, "review_missing")] == []
    assert _rows(res, "review_aging") == []
    clock.advance(minutes=2)
    [aging] = _rows(_run(board.store, settings), "review_aging")
    assert aging["card"] == r.ref and aging["evidence"]["review_of"] == d.ref


def test_leader_stalled_only_with_owed_work(
    board: Board, clock: FakeClock, settings: PatrolSettings
) -> None:
    _setup(board)
    c = board.create_card(ME, "P", "work")
    clock.advance(minutes=1000)
    assert _rows(_run(board.store, settings), "leader_stalled") == [], "no owed work, no alarm"
    worker = agent("worker", c.id)
    board.claim(ME, c.ref)
    board.move(ME, c.ref, "blocked", reason="decision")
    # a worker's change comment is not the leader's action
    board.comment(worker, c.ref, "I changed the plan", "change")
    clock.advance(minutes=240)
    assert _rows(_run(board.store, settings), "leader_stalled") == []
    clock.advance(1)
    [a] = _rows(_run(board.store, settings), "leader_stalled")
    assert a["evidence"]["owed_count"] == 1 and a["target"] == "leader"
    board.comment(ME, c.ref, "Decision: keep going", "decision")
    clock.advance(minutes=200)
    assert _rows(_run(board.store, settings), "leader_stalled") == []


def test_inspector_liveness(board: Board, clock: FakeClock, settings: PatrolSettings) -> None:
    _setup(board)
    assert _rows(_run(board.store, settings), "inspector_liveness") == [], "unconfigured: quiet"
    s = replace(settings, peer_marker="patrol:peer", peer_period_s=600)
    [missing] = _rows(_run(board.store, s), "inspector_liveness")
    assert missing["confidence"] == "low"
    with board.store.write() as tx:
        patrol.mark(tx, "patrol:peer", {})
    clock.advance(minutes=30)
    assert _rows(_run(board.store, s), "inspector_liveness") == []
    clock.advance(1)
    [late] = _rows(_run(board.store, s), "inspector_liveness")
    assert late["threshold_min"] == 30
    with board.store.read() as tx:
        mine = patrol.marks(tx, "patrol:m1")
    assert mine and mine[0]["at"] == clock.now_ms(), "the pass records its last success"


def test_working_hours_window(board: Board, clock: FakeClock, notified: Path) -> None:
    s = PatrolSettings(
        notify_command=f"cat >> {shlex.quote(str(notified))}",
        timezone="UTC",
        window="09:00-17:00",
    )
    _setup(board)
    clock.advance(minutes=16 * 60 + 30)  # 2026-01-01 16:30 UTC
    c = board.create_card(ME, "P", "blocked late in the day")
    board.move(ME, c.ref, "blocked", reason="decision")
    clock.advance(minutes=16 * 60 + 30)  # next day 09:00: 30 working minutes, not 16.5 h
    assert _rows(_run(board.store, s), "blocked_waiting") == []
    clock.advance(minutes=90)
    assert _rows(_run(board.store, s), "blocked_waiting") == []
    clock.advance(1)
    [a] = _rows(_run(board.store, s), "blocked_waiting")
    assert a["evidence"]["counting"] == "working hours"
    assert patrol.elapsed_ms(0, 3_600_000, PatrolSettings()) == 3_600_000


def test_a_settled_alert_is_dropped_by_the_recheck(
    board: Board, clock: FakeClock, settings: PatrolSettings
) -> None:
    _setup(board)
    c = board.create_card(ME, "P", "work")
    board.move(ME, c.ref, "blocked", reason="decision")
    clock.advance(minutes=121)
    with board.store.read() as tx:
        [a] = [x for x in patrol.plan(tx, clock.now_ms(), settings) if x.card == c.ref]
    board.move(ME, c.ref, "todo")
    with board.store.read() as tx:
        assert not patrol._recheck(tx, a, clock.now_ms(), settings)


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[patrol]\nwindow = "18:00-09:00"\ntimezone = "UTC"\n')
    with pytest.raises(LaneboardError, match="ends before it starts"):
        patrol.load_settings(str(cfg))
    cfg.write_text('[patrol]\nnotify_comand = "x"\n')
    with pytest.raises(LaneboardError, match=r"config.toml:2: unknown key 'notify_comand'"):
        patrol.load_settings(str(cfg))
    cfg.write_text('[patrol]\nnotify_command = "cat"\n')
    assert patrol.load_settings(str(cfg)).notify_command == "cat"
