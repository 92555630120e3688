"""The director lane's bounds, driven directly with an injected clock: a note without a
release is retried after 30 s and the row fails after 2 turns; a route row assigns from the
routing table, and two failed route turns park the card blocked (decision)."""

from __future__ import annotations

from pathlib import Path

import pytest

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import agent, human
from laneboard.store import Store
from laneboard.supervisor import records
from laneboard.supervisor.director import DirectorLane, lane_machine, routing_table
from laneboard.supervisor.doctor import doctor_report

from .helpers import config, runtime

ME = human("alice")


def _rows(store: Store, card_id: int) -> list[records.QueueRow]:
    with store.read() as tx:
        return records.queue_rows(
            tx, states=("pending", "processing", "done", "failed"), card_id=card_id
        )


def test_note_without_release_is_retried_then_left_for_a_human(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_NOW", str(clock.now_ms()))  # the agents' lb reads this time
    board = Board(store)
    board.add_project(ME, "D", path=str(tmp_path))
    c = board.create_card(
        ME,
        "D",
        "asks",
        assignee="worker",
        meta={"director_script": [{"comment": "Still thinking.", "kind": "note"}]},
    )
    worker = agent("worker", c.id, 1)
    board.claim(worker, c.ref)
    board.comment(worker, c.ref, "Q1: which schema?", "question")
    rt = runtime(store, config(tmp_path))
    lane = DirectorLane(rt)
    try:
        first = lane.run_once()
        assert first["enqueued"]["question"] == [c.ref]
        [row] = _rows(store, c.id)
        assert row.kind == "question" and row.machine == lane_machine(rt.machine)
        assert row.state == "pending" and row.attempts == 1, "a note is not a release"
        assert lane.run_once()["ran"] == [], "the retry waits 30 s"
        clock.advance(seconds=30)
        lane.run_once()
        [row] = _rows(store, c.id)
        assert row.state == "failed" and row.attempts == 2
        assert "not settled" in (row.last_error or "")
        lane.run_once()
        assert len(_rows(store, c.id)) == 1, "a question gets at most its two turns"
    finally:
        lane.close()
    notes = [x for x in board.comments(c.ref) if x.author == "Director"]
    assert len(notes) == 2 and all(n.author_kind.value == "agent" for n in notes)
    assert board.get(c.ref).status.value == "in_progress", "the director never moved it"
    rep = doctor_report(store, clock, rt.config, machine=rt.machine)
    assert [q["card"] for q in rep["question_lane"]] == [c.ref] and rep["attention"]


def test_route_rows_assign_or_hold(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_NOW", str(clock.now_ms()))
    board = Board(store)
    board.add_project(ME, "R", path=str(tmp_path))
    good = board.create_card(
        ME,
        "R",
        "write the tests",
        meta={"director_script": [{"lb": "card edit {card} --assignee worker"}]},
    )
    stuck = board.create_card(ME, "R", "nobody knows", meta={"director_script": []})
    rt = runtime(store, config(tmp_path))
    assert [r["role"] for r in routing_table(rt)] == ["worker"]
    assert "tests" in routing_table(rt)[0]["shapes"]
    lane = DirectorLane(rt)
    try:
        clock.advance(minutes=29)
        assert lane.run_once()["enqueued"]["route"] == [], "routing waits 30 minutes"
        clock.advance(minutes=2)
        lane.run_once()
        assert board.get(good.ref).assignee == "worker"
        assert [(r.kind, r.state) for r in _rows(store, good.id)] == [("route", "done")]
        assert board.get(stuck.ref).status.value == "todo"
        clock.advance(seconds=30)
        lane.run_once()
    finally:
        lane.close()
    held = board.get(stuck.ref)
    assert held.status.value == "blocked" and held.assignee is None
    assert held.meta["hold_cycle"] == "route" and held.meta["hold_reason"] == "decision"
    assert held.meta["hold_bound"] == 2
    q = [x for x in board.comments(stuck.ref) if x.kind.value == "question"]
    assert q and "route" in q[-1].body and "lb card edit" in q[-1].body
    # a human move starts a fresh, still bounded, epoch
    board.move(ME, stuck.ref, "todo")
    clock.advance(minutes=31)
    lane2 = DirectorLane(rt)
    try:
        lane2.run_once()
    finally:
        lane2.close()
    routes = [r for r in _rows(store, stuck.id) if r.kind == "route"]
    assert len(routes) == 2 and routes[-1].attempts == 1
