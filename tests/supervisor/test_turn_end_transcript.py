"""A turn's end writes the rest of its transcript in the transaction that records the
end, events after every write; should that transaction fail, the rest is still written."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from laneboard.agents.base import TurnResult, Usage
from laneboard.board.service import Board
from laneboard.domain.model import agent, human, system
from laneboard.domain.transcript import entry
from laneboard.store import open_store
from laneboard.supervisor.transcript_sink import TranscriptSink

from .helpers import RealNowClock


def _turn(store_url: str, tmp_path: Any) -> tuple[Board, Any, TranscriptSink]:
    board = Board(open_store(store_url, RealNowClock()))
    board.add_project(human(), "E", path=str(tmp_path))
    card = board.claim(agent("worker"), board.create_card(human(), "E", "end").ref)
    with board.store.write() as tx:
        turn = tx.start_turn(None, card.id, card.delivery_round, None, "claude", "s-1", "go")
    log = SimpleNamespace(warn=lambda *a, **k: None, info=lambda *a, **k: None)
    rt = SimpleNamespace(store=board.store, actor=system("Orchestrator"), log=log,
                         now=board.store.clock.now_ms)  # fmt: skip
    sink = TranscriptSink(rt, card, turn, "claude")  # type: ignore[arg-type]
    sink.add(entry("prompt", "go"))
    sink.flush()
    sink.add(entry("message", "almost"))
    return board, card, sink


def test_the_end_writes_the_rest_in_its_transaction_with_the_events_last(
    store_url: str, tmp_path: Any
) -> None:
    board, card, sink = _turn(store_url, tmp_path)
    with board.store.write() as tx:
        tx.finish_turn(sink.turn_id, "ok", "done", None, 0, Usage(3, 2, 0.0).to_dict())
        sink.close_in(tx, TurnResult(True, final_text="done", usage=Usage(3, 2, 0.0)), "ok")
        assert tx.events_pending or not tx.pg  # on PostgreSQL: written with the commit
    sink.committed()
    sink.abandon()  # nothing left: writes nothing more
    got = board.transcript(card.ref)["entries"]
    assert [e["type"] for e in got] == ["prompt", "message", "result"]
    outputs = [e for e in board.events(card=card.ref, limit=100) if e.type == "turn.output"]
    assert [e.payload["entries"] for e in outputs] == [1, 2]
    board.store.close()


def test_a_failed_end_transaction_still_leaves_the_rest_to_write(
    store_url: str, tmp_path: Any
) -> None:
    board, card, sink = _turn(store_url, tmp_path)
    with pytest.raises(RuntimeError), board.store.write() as tx:
        sink.close_in(tx, TurnResult(True, final_text="done", usage=Usage(3, 2, 0.0)), "ok")
        raise RuntimeError("the database went away")
    assert [e["type"] for e in board.transcript(card.ref)["entries"]] == ["prompt"]
    sink.abandon()  # what the pool does when the end's transaction fails
    got = board.transcript(card.ref)["entries"]
    assert [e["type"] for e in got] == ["prompt", "message", "result"]
    board.store.close()


def test_entries_a_write_could_not_send_while_the_database_was_away_are_kept(
    store_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush found no connection (the database restarting): nothing of its batch was
    written, so the batch goes back ahead of what came after it, and the next write (here
    the turn's end) writes every entry once, in order. They were dropped."""
    from laneboard.supervisor import transcript_sink

    # the timed flush waits for the end: only this test's writes run
    monkeypatch.setattr(transcript_sink, "_pause", lambda closed, _s: closed.wait())
    board, card, sink = _turn(store_url, tmp_path)
    store: Any = board.store

    def away() -> Any:
        raise ConnectionRefusedError("the database is away")

    real = store._connect
    store._drop_idle()
    store._connect = away
    with pytest.raises(ConnectionRefusedError):
        sink.flush()
    sink.add(entry("message", "after"))
    store._connect = real
    with board.store.write() as tx:
        sink.close_in(tx, TurnResult(True, final_text="done", usage=Usage(3, 2, 0.0)), "ok")
    sink.committed()
    got = board.transcript(card.ref)["entries"]
    assert [(e["type"], e.get("text")) for e in got][:3] == [
        ("prompt", "go"),
        ("message", "almost"),
        ("message", "after"),
    ]
    assert [e["type"] for e in got] == ["prompt", "message", "message", "result"]
    board.store.close()


def test_a_running_turns_transcript_is_written_every_half_second(
    store_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from laneboard.supervisor import transcript_sink

    waits: list[float] = []
    flushes: list[int] = []

    def pause(closed: Any, seconds: float) -> bool:
        waits.append(seconds)
        return closed.is_set() or len(waits) > 2  # two timed flushes, then stop

    monkeypatch.setattr(transcript_sink, "_pause", pause)
    monkeypatch.setattr(TranscriptSink, "_write", lambda self: flushes.append(1))
    board, _, sink = _turn(store_url, tmp_path)
    sink._thread.join(5)
    assert waits == [0.5, 0.5, 0.5] and len(flushes) == 2  # one write per half second
    board.store.close()
