"""Event ids follow commit order: a reader resuming after an id never skips an event.

Writer A draws an event id and keeps its transaction open; writer B tries to append
meanwhile. Until A commits, a reader must never see an id above A's (on PostgreSQL B
waits on the event-ordering lock; on SQLite on the write lock), and afterwards it sees
A's event before B's.
"""

from __future__ import annotations

import threading
import time

from laneboard.domain.clock import FakeClock
from laneboard.domain.model import system
from laneboard.store import open_store

ACTOR = system("order-test")


def test_a_reader_never_sees_a_later_id_before_an_earlier_commit(store_url: str) -> None:
    a_drew, release_a, b_done = threading.Event(), threading.Event(), threading.Event()
    a_store, b_store, reader = (open_store(store_url, FakeClock()) for _ in range(3))
    try:
        with reader.read() as tx:
            start = tx.max_event_id()
        ids: dict[str, int] = {}

        def writer_a() -> None:
            with a_store.write() as tx:
                ids["a"] = tx.append_event("test.a", ACTOR)
                a_drew.set()
                release_a.wait(30)

        def writer_b() -> None:
            with b_store.write() as tx:
                ids["b"] = tx.append_event("test.b", ACTOR)
            b_done.set()

        ta = threading.Thread(target=writer_a)
        ta.start()
        assert a_drew.wait(30)
        tb = threading.Thread(target=writer_b)
        tb.start()
        deadline = time.monotonic() + 1.0  # real concurrency: B gets a full second to race
        while time.monotonic() < deadline:
            with reader.read() as tx:
                seen = [e.id for e in tx.events(start, limit=10)]
            assert seen == [], f"a reader saw {seen} while event {ids['a']} was uncommitted"
            time.sleep(0.02)
        assert not b_done.is_set()
        release_a.set()
        ta.join(30)
        tb.join(30)
        assert b_done.is_set() and ids["a"] < ids["b"]
        with reader.read() as tx:
            got = [(e.id, e.type) for e in tx.events(start, limit=10)]
        assert got == [(ids["a"], "test.a"), (ids["b"], "test.b")]
    finally:
        release_a.set()
        for s in (a_store, b_store, reader):
            s.close()
