"""The server's one log follower: pushed SSE, one read per change, resync of laggards."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import anyio
import pytest
from starlette.testclient import TestClient

from laneboard.board.service import Board
from laneboard.domain.cursor import START, EventCursor
from laneboard.domain.model import Event, human
from laneboard.server import feed as feed_mod
from laneboard.server.app import create_app
from laneboard.server.feed import Feed, position
from laneboard.store import Store

BASE = "/api/v1"
SSE = {"Accept": "text/event-stream"}


def until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def read_stream(client: TestClient, params: dict[str, str], out: list[tuple[str, str]]) -> None:
    with client.stream("GET", BASE + "/events", params=params, headers=SSE) as resp:
        assert resp.status_code == 200
        ident = ""
        for line in resp.iter_lines():
            if line.startswith("id: "):
                ident = line[4:]
            elif line.startswith("event: "):
                out.append((ident, line[7:]))


def test_a_write_reaches_open_streams_from_one_read_per_change(store: Store) -> None:
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    first = board.events(0)[0]
    # settled before the streams start at the head (an open transaction elsewhere on the
    # server may hold it back for a moment; then it would still be news to them)
    until(lambda: store_head(store) >= EventCursor(first.xid, first.id), "the first event")
    app = create_app(store, local_user="alice", sse_poll_s=30.0, with_mcp=False)
    srv = app.app.state.server
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1)) as client:
        got: list[list[tuple[str, str]]] = [[], [], []]
        readers = [
            threading.Thread(target=read_stream, args=(client, {"max_events": "3"}, out))
            for out in got
        ]
        for t in readers:
            t.start()
        until(lambda: srv.feed.subscribers == 3, "three subscribers")
        reads_before = srv.feed.reads
        cards = [board.create_card(me, "WEB", f"c{i}") for i in range(3)]
        for t in readers:
            t.join(30)
            assert not t.is_alive()
        # polling every 30 s would not have delivered them: the write itself woke the feed
        expected = [(board.events(0, card=c.ref)[0].cursor, "card.created") for c in cards]
        assert got == [expected, expected, expected]
        # three writes, three streams: the log was read at most once per write, not per stream
        assert srv.feed.reads - reads_before <= 3


def test_a_stream_resumes_from_a_cursor_behind_the_feed(store: Store) -> None:
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    first = board.create_card(me, "WEB", "one")
    app = create_app(store, local_user="alice", with_mcp=False)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 1)) as client:
        board.create_card(me, "WEB", "two")
        event = board.events(0, card=first.ref)[0]
        mark = event.cursor
        # a cursor behind the feed: settled (an open transaction elsewhere on the server,
        # another test's, may hold the log's settled end back for a moment)
        until(lambda: store_head(store) >= EventCursor(event.xid, event.id), "the event")
        got: list[tuple[str, str]] = []
        read_stream(client, {"after": mark, "max_events": "1"}, got)
        assert [t for _, t in got] == ["card.created"]
        assert got[0][0] == board.events(0, card="WEB-2")[0].cursor
        resp = client.get(BASE + "/events", params={"after": "1.2.3"}, headers=SSE)
        assert resp.status_code == 422
        assert resp.json()["code"] == "BAD_INPUT"


def test_a_subscriber_that_falls_behind_reads_for_itself_and_misses_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed_mod, "MAX_QUEUED", 2)
    monkeypatch.setattr(feed_mod, "BATCH", 3)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    feed = Feed(store, poll_s=0.05)
    seen: list[Event] = []

    async def main() -> None:
        it = feed.follow(START, keepalive_s=0.2)
        seen.extend(await it.__anext__())  # joined; the project event is behind the feed
        for i in range(12):  # many batches while this subscriber reads nothing
            card = board.create_card(me, "WEB", f"c{i}")
            # the feed has read past this card's event (not the store's head: on PostgreSQL
            # that is the cluster's watermark, which any other database's work moves on)
            written = position(board.events(0, card=card.ref)[0])
            await anyio.to_thread.run_sync(until, read_past(feed, written), "the feed's read")
        while len([e for e in seen if e.type == "card.created"]) < 12:
            seen.extend(await it.__anext__())
        await it.aclose()

    try:
        anyio.run(main)
    finally:
        feed.close()
    assert [e.id for e in seen] == [e.id for e in board.events(0, limit=1000)]
    assert feed.subscribers == 0


def read_past(feed: Feed, at: EventCursor) -> Callable[[], bool]:
    return lambda: feed.head >= at


def store_head(store: Store) -> EventCursor:
    with store.autocommit() as tx:
        return tx.event_head()


def test_end_stops_every_follower_and_any_later_one(store: Store) -> None:
    """The server stopping: a follower waiting for news returns (its stream ends), and
    one that starts afterwards returns at once, both with nothing lost or invented."""
    Board(store).add_project(human("alice"), "WEB")
    feed = Feed(store, poll_s=30.0)
    got: list[list[Event]] = []

    async def waiting() -> None:
        async for batch in feed.follow(store_head(store), keepalive_s=3600):
            got.append(batch)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            await anyio.to_thread.run_sync(until, lambda: feed.subscribers == 1, "the follower")
            await anyio.to_thread.run_sync(feed.end)  # from another thread, as a signal's
        async for batch in feed.follow(START, keepalive_s=3600):
            got.append(batch)

    try:
        anyio.run(main)
    finally:
        feed.close()
    assert got == [] and feed.subscribers == 0
