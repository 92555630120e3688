"""The event cursor: writers run side by side, followers see every event exactly once.

On PostgreSQL writers commit in any order; the tests force commits out of id order
(a chain of transactions that commit in reverse) and hold a long transaction open
while later ones commit. A follower that always resumes from the cursor it was given
must end with every event once, in ``(xid, id)`` order, and never move past an open
transaction. The same follower code runs on SQLite, whose single writer keeps id order.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from laneboard.board.service import Board
from laneboard.domain.clock import FakeClock
from laneboard.domain.cursor import START, EventCursor, parse_cursor
from laneboard.domain.model import Actor, Event, human, system
from laneboard.errors import LaneboardError
from laneboard.store import Store, open_store
from laneboard.store.tx import Tx

ACTOR = system("cursor-test")


def _append(tx: Tx, type_: str, actor: Actor) -> int:
    """Append an event and write it now, while the transaction stays open."""
    tx.append_event(type_, actor)
    assert tx.last_event is not None
    return tx.last_event.id


class HeldOpen:
    """A write transaction on ``store`` that appended one event (``test.long``) and stays
    open, in a thread of its own, from ``open`` until ``close``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.opened, self.release = threading.Event(), threading.Event()
        self.event: EventCursor | None = None  # the appended event's position
        self.thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        with self.store.write() as tx:
            _append(tx, "test.long", ACTOR)
            self.event = tx.last_event
            self.opened.set()
            assert self.release.wait(60)

    def open(self) -> EventCursor:
        self.thread.start()
        assert self.opened.wait(30)
        assert self.event is not None
        return self.event

    def close(self) -> None:
        self.release.set()
        self.thread.join(30)


def _until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``cond``; open transactions of other sessions on the server delay it."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Follower(threading.Thread):
    """Reads the log from a cursor, resuming only from the cursor each read returns."""

    def __init__(self, store: Store, start: EventCursor) -> None:
        super().__init__(daemon=True)
        self.store, self.cursor = store, start
        self.seen: list[Event] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def read_once(self) -> None:
        with self.store.autocommit() as tx:
            batch, nxt = tx.events_after(self.cursor, limit=7)
        assert nxt >= self.cursor, "a cursor moved backwards"
        with self.lock:
            self.seen.extend(batch)
            self.cursor = nxt

    def run(self) -> None:
        while not self.stop.is_set():
            self.read_once()
            time.sleep(0.002)

    def catch_up(self, count: int) -> list[Event]:
        self.stop.set()
        if self.is_alive():
            self.join(30)

        def done() -> bool:
            self.read_once()
            return len(self.seen) >= count

        _until(done, f"{count} events")
        self.read_once()
        return self.seen


@pytest.fixture
def stores(store_url: str) -> Iterator[Callable[[], Store]]:
    opened: list[Store] = []

    def make() -> Store:
        s = open_store(store_url, FakeClock())
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def _head(store: Store) -> EventCursor:
    with store.autocommit() as tx:
        return tx.event_head()


def _assert_exactly_once(seen: list[Event], written: list[int]) -> None:
    ids = [e.id for e in seen]
    assert len(ids) == len(set(ids)), "a follower saw an event twice"
    assert sorted(ids) == sorted(written), f"a follower skipped {sorted(set(written) - set(ids))}"
    positions = [(e.xid, e.id) for e in seen]
    assert positions == sorted(positions), "events arrived out of log order"


def test_free_for_all_writers_and_a_follower(stores: Callable[[], Store]) -> None:
    """Four writers, multi-event transactions of random length; one follower."""
    follower = Follower(stores(), _head(stores()))
    written: list[int] = []
    lock = threading.Lock()

    def writer(index: int) -> None:
        store, rng = stores(), random.Random(index)
        for _ in range(15):
            with store.write() as tx:
                mine = []
                for _ in range(rng.randint(1, 3)):
                    mine.append(_append(tx, f"test.w{index}", ACTOR))
                    time.sleep(rng.random() / 500)  # widen the window for interleaving
            with lock:
                written.extend(mine)

    follower.start()
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    _assert_exactly_once(follower.catch_up(len(written)), written)


def test_commits_in_reverse_order_are_never_skipped(stores: Callable[[], Store]) -> None:
    """Each round, writer i appends before writer i+1 but commits after it."""
    first = stores()
    if first.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: commits cannot be reordered")
    follower = Follower(stores(), _head(first))
    writers = [stores() for _ in range(4)]
    written: list[int] = []
    follower.start()
    for _ in range(6):
        appended = [threading.Event() for _ in writers]
        committed = [threading.Event() for _ in writers]

        def write(
            i: int, appended: list[threading.Event], committed: list[threading.Event]
        ) -> None:
            if i > 0:
                assert appended[i - 1].wait(30)
            with writers[i].write() as tx:
                written.append(_append(tx, f"test.chain{i}", ACTOR))
                appended[i].set()
                if i + 1 < len(writers):
                    assert committed[i + 1].wait(30), "writers serialize on the event log"
            committed[i].set()

        threads = [
            threading.Thread(target=write, args=(i, appended, committed))
            for i in range(len(writers))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(c.is_set() for c in committed)
    _assert_exactly_once(follower.catch_up(len(written)), written)


def test_a_long_transaction_holds_followers_until_it_commits(
    stores: Callable[[], Store],
) -> None:
    long_store, short_store, reader = stores(), stores(), stores()
    pg = reader.dialect == "postgresql"
    start = _head(reader)
    held = HeldOpen(long_store)
    long_at = [held.open()]
    short_ids: list[int] = []
    if pg:  # later transactions commit while the long one stays open
        for _ in range(20):
            with short_store.write() as tx:
                short_ids.append(_append(tx, "test.short", ACTOR))
        with reader.read() as tx:
            assert len(tx.events(0, types=["test.short"])) == 20
    follower = Follower(reader, start)
    for _ in range(5):
        follower.read_once()
        assert follower.seen == [], "a follower passed an open transaction"
        assert follower.cursor < long_at[0]
    held.close()
    if not pg:  # SQLite: the later writes could only start now
        for _ in range(20):
            with short_store.write() as tx:
                short_ids.append(_append(tx, "test.short", ACTOR))
    seen = follower.catch_up(21)
    assert [e.type for e in seen] == ["test.long"] + ["test.short"] * 20
    _assert_exactly_once(seen, [long_at[0].id, *short_ids])


def test_writers_hold_transactions_open_side_by_side(stores: Callable[[], Store]) -> None:
    """All four writers have appended and are still open at once: nothing serializes."""
    if stores().dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time")
    barrier = threading.Barrier(4, timeout=30)
    errors: list[BaseException] = []

    def writer(store: Store) -> None:
        try:
            with store.write() as tx:
                _append(tx, "test.side", ACTOR)
                barrier.wait()  # the old event lock made this wait forever
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(stores(),)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


def test_a_filtered_follower_moves_past_other_events(stores: Callable[[], Store]) -> None:
    store = stores()
    board = Board(store)
    me = human("alice")
    board.add_project(me, "P")
    a = board.create_card(me, "P", "a")
    b = board.create_card(me, "P", "b")
    cursor = START

    def created() -> bool:  # another session's open transaction may hold it back a while
        nonlocal cursor
        got, cursor = board.events_after(0, card=a.ref)
        return [e.type for e in got] == ["card.created"]

    _until(created, "a's creation to settle")
    board.comment(me, b.ref, "only b")
    got, nxt = board.events_after(cursor, card=a.ref)
    assert got == []

    def passed() -> bool:
        nonlocal nxt
        _, nxt = board.events_after(nxt, card=a.ref)
        return not board.has_events_after(nxt)

    _until(passed, "the cursor to pass b's comment")
    board.comment(me, a.ref, "now a")
    _until(lambda: board.has_events_after(nxt), "a's comment")
    got, _ = board.events_after(nxt, card=a.ref)
    assert [e.type for e in got] == ["comment.added"] and got[0].card_id == a.id


def test_plain_ids_and_text_cursors_resume_alike(stores: Callable[[], Store]) -> None:
    store = stores()
    board = Board(store)
    me = human("alice")
    board.add_project(me, "P")
    for i in range(4):
        board.create_card(me, "P", f"c{i}")
    _until(lambda: len(board.events_after(0)[0]) == 5, "five settled events")
    events, _ = board.events_after(0)
    third = events[2]
    by_id, cur_a = board.events_after(third.id)
    by_cursor, cur_b = board.events_after(third.cursor)
    assert [e.id for e in by_id] == [e.id for e in by_cursor] == [e.id for e in events[3:]]
    with store.autocommit() as tx:  # the mark may move on between the two reads
        last = EventCursor(events[-1].xid, events[-1].id)
        assert tx.resolve_cursor(parse_cursor(cur_a)) >= last
        assert tx.resolve_cursor(parse_cursor(cur_b)) >= last
    assert str(parse_cursor(cur_a)) == cur_a  # the text round-trips
    assert [e.to_dict()["cursor"] for e in events] == [e.cursor for e in events]
    _, tail_cursor = board.events_tail(2)
    assert board.events_tail(2)[0] == events[-2:]
    assert not board.has_events_after(tail_cursor)
    assert board.events_after(tail_cursor)[0] == []
    for bad in ("abc", "-1", "1.2.3", "", "1.x"):
        with pytest.raises(LaneboardError) as err:
            board.events_after(bad)
        assert err.value.code == "BAD_INPUT"
    missing = events[-1].id + 1000
    with pytest.raises(LaneboardError) as err:
        board.events_after(missing)
    assert err.value.code == "BAD_INPUT"
    said = "names no event" if store.dialect == "postgresql" else "ahead of this board's log"
    assert said in err.value.message


def test_a_cursor_ahead_of_the_log_is_refused_not_followed(stores: Callable[[], Store]) -> None:
    """A cursor from another board (or a restored database) that lies past this log's end
    would make a follower skip every event until the log caught up with it: refused with
    BAD_INPUT naming the end, on every reader that takes a client's cursor."""
    store = stores()
    board = Board(store)
    board.add_project(human("alice"), "P")
    _until(lambda: len(board.events_after(0)[0]) == 1, "one settled event")
    head = board.event_head()
    at = parse_cursor(head)
    if store.dialect == "postgresql":
        assert isinstance(at, EventCursor)
        ahead: object = EventCursor(at.xid + 1000, 5)
    else:
        assert isinstance(at, int)
        ahead = at + 1000
    for cursor in (str(ahead), ahead):
        assert isinstance(cursor, (str, int, EventCursor))
        with pytest.raises(LaneboardError) as err:
            board.events_after(cursor)
        assert err.value.code == "BAD_INPUT", err.value.line()
        assert "ahead of this board's log" in err.value.message
        assert "lb events tail" in err.value.fix
        named = re.search(r"its end is (\S+)\)", err.value.message)
        assert named is not None, err.value.message
        if store.dialect == "postgresql":  # transaction ids are the server's: a write to
            # any database on it (another test's) moves the end on between the two reads
            assert at <= parse_cursor(named.group(1)) < parse_cursor(str(ahead))
        else:
            assert named.group(1) == head
    from laneboard.server.feed import Feed

    with pytest.raises(LaneboardError) as err:  # an SSE client's Last-Event-ID
        Feed(store).resolve(str(ahead))
    assert err.value.code == "BAD_INPUT"
    assert board.events_after(head)[0] == []  # the end itself is a cursor like any other


def test_a_cursor_of_an_event_not_settled_yet_is_refused_for_what_it_is(
    stores: Callable[[], Store],
) -> None:
    """A history read returns committed events that are not settled yet (an older
    transaction is still open): following from one's cursor could skip what that
    transaction adds before it, so it is refused, but as what it is, not as a cursor of
    another board; once the older transaction ends, the same cursor is followed."""
    long_store, store = stores(), stores()
    if store.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: every committed event is settled")
    board = Board(store)
    held = HeldOpen(long_store)
    held.open()
    try:
        with store.write() as tx:
            later = _append(tx, "test.later", ACTOR)
        [event] = [e for e in board.events(later - 1) if e.id == later]
        with pytest.raises(LaneboardError) as err:
            board.events_after(event.cursor)
        assert err.value.code == "BAD_INPUT", err.value.line()
        assert "not settled yet" in err.value.message, err.value.message
        assert "another board" not in err.value.message
        assert "lb events tail" in err.value.fix
    finally:
        held.close()
    _until(lambda: _head(store) > EventCursor(event.xid, event.id), "the event to settle")
    assert board.events_after(event.cursor)[0] == []  # followed: nothing after it yet


def test_new_events_record_their_transaction(stores: Callable[[], Store]) -> None:
    store = stores()
    if store.dialect != "postgresql":
        with store.write() as tx:
            tx.append_event("test.x", ACTOR)
            assert tx.last_event is not None and tx.last_event.xid == 0
        return
    with store.write() as tx:
        tx.append_event("test.x", ACTOR)
        tx.append_event("test.y", ACTOR)
        own = int(tx.scalar("SELECT pg_current_xact_id()::text::bigint"))
        assert tx.last_event is not None and tx.last_event.xid == own
    with store.write() as tx:  # a row as written before migration 90: xid 0, log order first
        tx.run(
            "INSERT INTO events (at, type, actor, actor_kind, payload, xid) "
            "VALUES (0, 'test.old', 'x', 'system', '{}', 0)"
        )
    seen: list[Event] = []
    cursor = START

    def all_three() -> bool:
        nonlocal cursor
        with store.autocommit() as tx:
            batch, cursor = tx.events_after(cursor)
        seen.extend(batch)
        return len(seen) >= 3

    _until(all_three, "three events")
    assert [e.type for e in seen] == ["test.old", "test.x", "test.y"]
    assert seen[0].cursor == str(seen[0].id) and seen[1].cursor == f"{own}.{seen[1].id}"


def test_events_written_with_the_commit_keep_their_payload_and_order(
    stores: Callable[[], Store],
) -> None:
    """The events a write leaves for its commit: exact payloads, log order, the hook's cursor."""
    store = stores()
    seen_by_hook: list[EventCursor] = []
    store.add_commit_hook(seen_by_hook.append)
    odd = {"text": 'it\'s 100% \\ "quoted" — ünïcode\n', "n": [1, None, 2.5]}
    with store.write() as tx:
        tx.append_event("test.first", ACTOR, payload=odd)
        tx.append_event("test.second", ACTOR, card_id=None, payload={"k": "%s ? $1"})
    with store.write() as tx:
        tx.append_event("test.third", ACTOR)
        assert [e.type for e in tx.last_events(1)] == ["test.third"]  # reads see it
    got: list[Event] = []
    cursor = START

    def all_three() -> bool:
        nonlocal cursor
        with store.autocommit() as tx:
            batch, cursor = tx.events_after(cursor)
        got.extend(batch)
        return len(got) >= 3

    _until(all_three, "three events")
    assert [e.type for e in got] == ["test.first", "test.second", "test.third"]
    assert got[0].payload == odd and got[1].payload == {"k": "%s ? $1"}
    assert len(seen_by_hook) == 2
    assert seen_by_hook[0] == EventCursor(got[1].xid, got[1].id)
    assert seen_by_hook[1] == EventCursor(got[2].xid, got[2].id)


def test_events_written_with_the_commit_are_scrubbed(
    stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CURSOR_TEST_API_KEY", "s3cr3t-value-123")
    store = stores()
    with store.write() as tx:
        tx.append_event("test.leak", ACTOR, payload={"said": "key is s3cr3t-value-123"})
    with store.read() as tx:
        (event,) = tx.events(0, types=["test.leak"])
    assert event.payload == {"said": "key is ***"}


def test_log_changed_sees_a_write_at_once_and_a_late_commit_later(
    stores: Callable[[], Store],
) -> None:
    """The loop's "did anything happen" check: a commit counts at once, even while an
    older transaction is open; and that older transaction's events count when it commits,
    though they sort before everything seen since."""
    long_store, short_store, reader = stores(), stores(), stores()
    with reader.autocommit() as tx:
        marks = tx.log_marks()
        assert not tx.log_changed(marks)
    held = HeldOpen(long_store)
    if reader.dialect == "postgresql":  # SQLite has one writer at a time
        held.open()
    with short_store.write() as tx:
        _append(tx, "test.short", ACTOR)
    with reader.autocommit() as tx:
        assert tx.log_changed(marks)  # not held back by the open transaction
        marks = tx.log_marks()
        assert not tx.log_changed(marks)
    if reader.dialect == "postgresql":
        held.close()
    else:
        with long_store.write() as tx:
            _append(tx, "test.long", ACTOR)

    def changed() -> bool:  # once it settles (other sessions on the server may delay it)
        with reader.autocommit() as tx:
            return tx.log_changed(marks)

    _until(changed, "the late commit to count")  # it sorts first, and still counts
    with reader.autocommit() as tx:
        assert not tx.log_changed(tx.log_marks())


def test_events_seen_while_an_older_transaction_was_open_are_not_news_again(
    stores: Callable[[], Store],
) -> None:
    """An older transaction (here one that writes no event, as any session on the server
    may hold) keeps a committed event unsettled; once it ends, that event is settled but
    not new: the marks taken after it was seen report nothing, so a loop does not tick
    again for it."""
    writer, reader = stores(), stores()
    if reader.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: every committed event is settled")
    import psycopg

    from laneboard.store.postgres import PostgresStore

    assert isinstance(reader, PostgresStore)
    with psycopg.connect(reader.url) as older:
        older.execute("SELECT pg_current_xact_id()")  # holds an id: the watermark stays
        with writer.write() as tx:
            _append(tx, "test.short", ACTOR)
        with reader.autocommit() as tx:
            marks = tx.log_marks()
            assert not tx.log_changed(marks)
            _, types = tx.log_news(marks)
            assert types == set()
        older.rollback()
    with reader.autocommit() as tx:
        assert not tx.log_changed(marks)
        _, types = tx.log_news(marks)
        assert types == set()


def test_log_news_names_a_late_commit_of_a_transaction_open_at_the_marks(
    stores: Callable[[], Store],
) -> None:
    """The other half: an event of a transaction that was open when the marks were read
    sorts before what was seen since, and is news once it commits."""
    long_store, short_store, reader = stores(), stores(), stores()
    if reader.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: commits cannot be reordered")
    held = HeldOpen(long_store)
    held.open()
    with short_store.write() as tx:
        _append(tx, "test.short", ACTOR)
    with reader.autocommit() as tx:
        marks, types = tx.log_news(tx.log_marks())
        assert types == set()
    held.close()
    with reader.autocommit() as tx:
        marks, types = tx.log_news(marks)
        assert types == {"test.long"}
        assert tx.log_news(marks)[1] == set()
