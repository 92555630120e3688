"""ask and wait as services, with an injected clock and sleep (nothing sleeps for real)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from laneboard.board import questions
from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.model import Actor, agent, human
from laneboard.errors import LaneboardError

ME = human("alice")


def _asked(board: Board) -> tuple[Actor, str, int]:
    board.add_project(ME, "W")
    c = board.create_card(ME, "W", "work", assignee="worker")
    worker = agent("worker", c.id, 1)
    board.claim(worker, c.ref)
    q = questions.ask(board, worker, c.ref, "Q1: A or B? I recommend A.")
    assert board.get(c.ref).status.value == "in_progress"
    return worker, c.ref, q.id


def _sleeper(
    clock: FakeClock, on_sleep: Callable[[int], None] | None = None
) -> Callable[[float], None]:
    calls = {"n": 0}

    def sleep(seconds: float) -> None:
        calls["n"] += 1
        clock.advance(int(seconds * 1000))
        if on_sleep is not None:
            on_sleep(calls["n"])

    return sleep


def test_a_note_does_not_end_the_hold_the_release_does(board: Board, clock: FakeClock) -> None:
    worker, ref, qid = _asked(board)
    director = agent("Director", board.get(ref).id, 1)

    def director_acts(n: int) -> None:
        if n == 2:
            board.comment(director, ref, "Take A.", "note")
        if n == 4:
            board.release(director, ref)

    res = questions.wait(board, worker, ref, qid, clock=clock, sleep=_sleeper(clock, director_acts))
    assert res.outcome == "answered" and res.status == "todo"
    assert "Take A." in res.answer and res.waited_s == 8.0
    assert res.to_dict()["outcome"] == "answered"


def test_escalated_moved_and_timeout(board: Board, clock: FakeClock) -> None:
    worker, ref, qid = _asked(board)
    director = agent("Director", board.get(ref).id, 1)
    res = questions.wait(
        board,
        worker,
        ref,
        qid,
        clock=clock,
        sleep=_sleeper(
            clock,
            lambda n: (
                board.move(director, ref, "awaiting", reason="E2", question="Budget?")
                if n == 1
                else None
            ),
        ),
    )
    assert res.outcome == "escalated" and res.reason == "E2"
    board.comment(ME, ref, "Budget is fine.")  # a human answer releases awaiting -> todo
    board.claim(worker, ref)
    q2 = questions.ask(board, agent("worker", board.get(ref).id, 2), ref, "Q2: ship?")
    worker2 = agent("worker", board.get(ref).id, 2)
    moved = questions.wait(
        board,
        worker2,
        ref,
        q2.id,
        clock=clock,
        sleep=_sleeper(
            clock, lambda n: board.move(ME, ref, "blocked", reason="x") if n == 1 else None
        ),
    )
    assert moved.outcome == "moved" and moved.status == "blocked"


def test_timeout_is_bounded_and_pulses_the_heartbeat(board: Board, clock: FakeClock) -> None:
    worker, ref, qid = _asked(board)
    start = clock.now_ms()
    res = questions.wait(board, worker, ref, qid, 540, clock=clock, sleep=_sleeper(clock))
    assert res.outcome == "timeout" and res.waited_s == 540.0
    assert res.pulses == 2, "a pulse every 240 s"
    hb = board.get(ref).heartbeat_at
    assert hb is not None and hb >= start + 480_000
    short = questions.wait(board, worker, ref, qid, clock=clock, sleep=_sleeper(clock))
    assert short.outcome == "timeout" and short.waited_s == 110.0


def test_bad_waits_are_refused(board: Board, clock: FakeClock) -> None:
    worker, ref, qid = _asked(board)
    with pytest.raises(LaneboardError, match="out of range"):
        questions.wait(board, worker, ref, qid, 541, clock=clock, sleep=_sleeper(clock))
    with pytest.raises(LaneboardError, match="does not exist"):
        questions.wait(board, worker, ref, qid + 99, clock=clock, sleep=_sleeper(clock))
    with pytest.raises(LaneboardError, match="empty"):
        questions.ask(board, worker, ref, "  ")
    board.release(worker, ref)
    with pytest.raises(LaneboardError, match="in_progress"):
        questions.ask(board, worker, ref, "late question")
