"""The pool's own records, written in one statement each: a session it closes, a row it
takes.

A session whose process the pool closes is recorded in one statement of its own
(``store.q_queue.settle_session``): ``idle`` while its card is open (it can be resumed),
``closed`` once the card is terminal or gone. The pool closed one per card (evicting the
least recently used idle session at its cap) in a transaction of five statements."""

from __future__ import annotations

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import Actor
from laneboard.store import Store
from laneboard.store.q_queue import settle_session
from laneboard.supervisor import records

STATES = ("open", "running", "idle", "closed", "stale")


def _session(store: Store, key: str, card_id: int | None, state: str = "running") -> None:
    with store.write() as tx:
        records.save_session(
            tx, "scripted", key, card_id=card_id, role="worker", cwd="/tmp",
            native_id="n-" + key, round_=1, state=state, pid=4242,
        )  # fmt: skip


def _states(store: Store) -> dict[str, tuple[str, int | None]]:
    with store.read() as tx:
        return {s.lane_key: (s.state, s.pid) for s in records.sessions(tx, STATES)}


def test_a_closed_session_is_idle_while_its_card_is_open_else_closed(
    board: Board, me: Actor
) -> None:
    store = board.store
    board.add_project(me, "P")
    open_card = board.create_card(me, "P", "open")
    done_card = board.create_card(me, "P", "done")
    board.move(me, done_card.id, "canceled")
    _session(store, "a", open_card.id)
    _session(store, "b", done_card.id, "idle")
    _session(store, "c", None, "open")
    _session(store, "d", open_card.id, "stale")
    _session(store, "e", open_card.id)
    with store.read() as tx:
        events = tx.max_event_id()
    for key in "abcd":
        settle_session(store, "scripted", key)
    states = _states(store)
    assert states["a"] == ("idle", None)
    assert states["b"] == ("closed", None)
    assert states["c"] == ("closed", None)
    assert states["d"] == ("stale", 4242)  # a record without a process is left as it is
    assert states["e"] == ("running", 4242)  # another lane's session is not touched
    with store.read() as tx:
        assert tx.max_event_id() == events  # no event, so no wake-up


def test_the_drain_takes_a_pending_row_once_and_wakes_nobody(
    board: Board, me: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's drain takes each pending row in one statement of its own
    (``records.take_pending``); it took it in a transaction of three round trips."""
    store = board.store
    board.add_project(me, "P")
    card = board.create_card(me, "P", "work")
    with store.write() as tx:
        queued = records.enqueue(tx, "handoff", card.id, "worker", card.project_id, "m",
                                 "/tmp", 1, 1, {})  # fmt: skip
    assert queued is not None
    sent: list[str] = []
    announcer = getattr(store, "announcer", None)
    if announcer is not None:  # PostgreSQL: every wake-up is sent, or queued, through it
        real = announcer.now_or_later
        monkeypatch.setattr(announcer, "now_or_later", lambda t: sent.append(t) or real(t))
    with store.read() as tx:
        events = tx.max_event_id()
    taken = records.take_pending(store, queued.id, "sup-1")
    assert taken is not None
    assert (taken.state, taken.owner, taken.attempts) == ("processing", "sup-1", 1)
    assert records.take_pending(store, queued.id, "sup-2") is None  # not pending any more
    with store.read() as tx:
        assert records.queue_row(tx, queued.id) == taken
        assert tx.max_event_id() == events
    assert sent == []
