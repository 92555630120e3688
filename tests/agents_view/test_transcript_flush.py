"""A transcript flush is one write whatever it holds, keeps the entries' order, writes
nothing when empty, and the turn's end writes what is left."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from laneboard.agents.base import TurnResult, Usage
from laneboard.board.service import Board
from laneboard.domain.transcript import entry
from laneboard.supervisor.transcript_sink import TranscriptSink

from .test_turns_board import ME, claimed, runtime, start_turn


@contextmanager
def statements(board: Board, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SQL statements the store sends while inside, but for the followers' wake-ups
    (a store announces a burst of writes together, from a thread of its own)."""
    sent: list[str] = []
    if board.store.dialect == "postgresql":
        import psycopg

        execute = psycopg.Cursor.execute  # every statement's way, a raw cursor's too

        def counted(self: Any, query: Any, *a: Any, **kw: Any) -> Any:
            text = query.decode() if isinstance(query, bytes) else str(query)
            if "pg_notify" not in text:
                sent.append(text)
            return execute(self, query, *a, **kw)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted)
        yield sent
        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        return
    raw = board.store._acquire()
    trace: Callable[[str], None] = sent.append
    raw.set_trace_callback(trace)
    board.store._release(raw)
    yield sent
    raw.set_trace_callback(None)


@pytest.fixture
def web(board: Board) -> Board:
    board.add_project(ME, "WEB", "Website", "/srv/web", "main")
    return board


def test_a_flush_is_one_write_in_order_and_the_end_writes_the_rest(
    web: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    card = claimed(web)
    turn = start_turn(web, card)
    sink = TranscriptSink(runtime(web), card, turn, "claude")
    sink._closed.set()  # the test flushes by hand: no timed flush runs
    sink._thread.join()
    with statements(web, monkeypatch) as one:
        sink.add(entry("prompt", "go"))
        sink.flush()
    with statements(web, monkeypatch) as many:
        for n in range(7):
            sink.add(entry("lb", f"lb card get WEB-{n}"))
        sink.flush()
    with statements(web, monkeypatch) as empty:
        sink.flush()
    assert empty == []  # nothing to write: no statement at all
    assert len(many) == len(one)  # the entries are one insert, whatever their number
    if web.store.dialect == "postgresql":
        assert len(one) == 1  # entries and event: one statement, committed on its own
    sink.add(entry("message", "almost"))
    sink.close(TurnResult(True, final_text="done", usage=Usage(3, 2, 0.0)), "ok")
    got = web.transcript(card.ref)["entries"]
    assert [e["seq"] for e in got] == list(range(1, 11))  # ids follow the order of entries
    assert [e["id"] for e in got] == sorted(e["id"] for e in got)
    assert [e["type"] for e in got[-2:]] == ["message", "result"]  # the end's flush
    outputs = [e for e in web.events(card=card.ref, limit=100) if e.type == "turn.output"]
    assert [e.payload["entries"] for e in outputs] == [1, 7, 2]
    assert outputs[-1].payload == {"turn": turn, "entries": 2, "last": got[-1]["id"]}
