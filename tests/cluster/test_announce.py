"""A process's announcements are coalesced: the first write of a quiet spell is announced
at once, a burst costs one notification per gap, and nothing queued is ever dropped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from laneboard.domain.model import human
from laneboard.store import Store
from laneboard.store.announce import Announcer


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_write_after_a_quiet_spell_is_announced_by_its_writer() -> None:
    sent: list[str] = []
    clock = Clock()
    a = Announcer(sent.append, gap_s=0.5, clock=clock)
    assert a.now_or_later("card.created") is True
    clock.t += 0.6
    assert a.now_or_later("card.moved") is True
    assert sent == []  # the writer sends those itself, in its own round trip
    a.close()


def test_a_burst_is_queued_and_announced_once_with_its_types_merged() -> None:
    sent: list[str] = []
    gate = threading.Event()
    clock = Clock()

    def send(payload: str) -> None:
        sent.append(payload)
        gate.set()

    a = Announcer(send, gap_s=0.5, clock=clock)
    assert a.now_or_later("card.created") is True
    assert a.now_or_later("card.moved") is False
    assert a.now_or_later("report.added,card.moved") is False
    assert a.now_or_later("card.claimed") is False
    assert not gate.wait(0.05)  # the gap has not ended on the injected clock
    clock.t += 0.5
    with a._cond:  # the thread re-reads the clock when woken
        a._cond.notify_all()
    assert gate.wait(10)
    assert sent == ["card.claimed,card.moved,report.added"]
    assert a.now_or_later("card.moved") is False  # the gap restarted with that announcement
    a.close()
    assert sent[-1] == "card.moved"  # close sends what is still queued


def test_a_write_that_cannot_name_its_types_makes_the_batch_unknown() -> None:
    sent: list[str] = []
    a = Announcer(sent.append, gap_s=3600, clock=Clock())
    a.now_or_later("card.created")
    a.now_or_later("card.moved")
    a.now_or_later("")
    a.close()
    assert sent == [""]


def test_a_failing_send_is_dropped_quietly() -> None:
    def send(payload: str) -> None:
        raise OSError("the server went away")

    a = Announcer(send, gap_s=3600, clock=Clock())
    a.now_or_later("card.created")
    a.now_or_later("card.moved")
    a.close()  # no exception: listeners fall back to polling
    assert a.sent == 0


def test_a_burst_of_writes_wakes_a_listener_with_few_notifications(store: Store) -> None:
    import psycopg

    from laneboard.board.service import Board
    from laneboard.store.postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        pytest.skip("NOTIFY is PostgreSQL's")
    board = Board(store)
    me = human("alice")
    board.add_project(me, "P")
    clock = Clock()  # the announcer's own, so the quiet spell and the gap are not waited for
    store.announcer.close()
    store.announcer = Announcer(store.announcer._send, gap_s=0.5, clock=clock)
    got: list[psycopg.Notify] = []
    with psycopg.connect(store.url, autocommit=True) as listener:
        listener.add_notify_handler(got.append)
        listener.execute(f'LISTEN "{store.notify_channel()}"')
        clock.t += 1.0  # a quiet spell before the burst
        for i in range(40):
            board.create_card(me, "P", f"card {i}")
        assert store.announcer.sent == 0  # the first was its writer's; the rest are queued
        clock.t += 0.5  # the gap ends: the store's thread announces the rest, once
        with store.announcer._cond:  # the thread re-reads the clock when woken
            store.announcer._cond.notify_all()
        _until(lambda: bool(listener.execute("SELECT 1")) and store.announcer.sent >= 1, "it")
        listener.execute("SELECT 1")
        _until(lambda: bool(listener.execute("SELECT 1")) and len(got) >= 2, "both")
    assert 2 <= len(got) < 40
    assert got[0].payload == "card.created"
    assert got[-1].payload == "card.created"
