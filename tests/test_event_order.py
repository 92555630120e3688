"""A follower resuming from its cursor never skips an event committed before one it saw.

Writer A appends an event and keeps its transaction open; writer B appends after it.
On PostgreSQL B commits at once (writers no longer queue on one lock), yet a follower
must not pass A's open transaction: it sees neither event until A commits, then both,
A's first. On SQLite B waits on the single write lock, and the follower's view is the
same. A history read (``Tx.events``) is only a snapshot: on PostgreSQL it shows B while A
is open, which is exactly why followers use ``events_after``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from laneboard.domain.clock import FakeClock
from laneboard.domain.cursor import EventCursor
from laneboard.domain.model import Actor, Event, system
from laneboard.store import Store, open_store
from laneboard.store.tx import Tx

ACTOR = system("order-test")


def _append(tx: Tx, type_: str, actor: Actor) -> int:
    """Append an event and write it now, while the transaction stays open."""
    tx.append_event(type_, actor)
    assert tx.last_event is not None
    return tx.last_event.id


def _until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``cond`` (other sessions' open transactions on a shared server delay it)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _follow(store: Store, cursor: EventCursor) -> tuple[list[Event], EventCursor]:
    with store.autocommit() as tx:
        return tx.events_after(cursor, limit=50)


def test_a_follower_never_passes_an_open_transaction(store_url: str) -> None:
    a_drew, release_a, b_done = threading.Event(), threading.Event(), threading.Event()
    a_store, b_store, reader = (open_store(store_url, FakeClock()) for _ in range(3))
    pg = reader.dialect == "postgresql"
    ids: dict[str, int] = {}
    a_at: list[EventCursor] = []
    try:
        with reader.read() as tx:
            start = tx.event_head()

        def writer_a() -> None:
            with a_store.write() as tx:
                ids["a"] = _append(tx, "test.a", ACTOR)
                assert tx.last_event is not None
                a_at.append(tx.last_event)
                a_drew.set()
                release_a.wait(60)

        def writer_b() -> None:
            with b_store.write() as tx:
                ids["b"] = _append(tx, "test.b", ACTOR)
            b_done.set()

        ta = threading.Thread(target=writer_a)
        ta.start()
        assert a_drew.wait(30)
        tb = threading.Thread(target=writer_b)
        tb.start()
        if pg:
            assert b_done.wait(30), "writer B waited for writer A: the log serializes writers"
            with reader.read() as tx:  # the history snapshot already shows B ...
                assert [e.type for e in tx.events(0)] == ["test.b"]
        for _ in range(10):  # ... but a follower does not pass A's open transaction
            seen, cursor = _follow(reader, start)
            assert seen == [], f"a follower saw {[e.type for e in seen]} while A was open"
            assert cursor < a_at[0], "the follower's cursor moved past A's open transaction"
            with reader.autocommit() as tx:
                assert not tx.has_events_after(start)
        release_a.set()
        ta.join(30)
        tb.join(30)
        got: list[Event] = []
        cursor = start

        def caught_up() -> bool:
            nonlocal cursor
            batch, cursor = _follow(reader, cursor)
            got.extend(batch)
            return len(got) >= 2

        _until(caught_up, "both events after A committed")
        assert [(e.id, e.type) for e in got] == [(ids["a"], "test.a"), (ids["b"], "test.b")]
    finally:
        release_a.set()
        for s in (a_store, b_store, reader):
            s.close()
