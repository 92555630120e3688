"""``Broadcaster.wait``: woken by this process's writes, by NOTIFY, or by polling.

Each test sets every poll interval it does not exercise to an hour, so a waiter that
returns in time can only have been woken by the source under test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from laneboard.domain.clock import FakeClock
from laneboard.domain.model import system
from laneboard.store import Store, open_store
from laneboard.store.notify import Broadcaster

ACTOR = system("notify-test")
HOUR = 3600.0
WRITE = """
import sys
from laneboard.domain.model import system
from laneboard.store import open_store

store = open_store(sys.argv[1])
with store.write() as tx:
    tx.append_event("test.remote", system("remote"))
store.close()
"""


def _until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


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


class Waiter(threading.Thread):
    def __init__(self, b: Broadcaster, cursor: str, timeout: float = HOUR) -> None:
        super().__init__(daemon=True)
        self.b, self.cursor, self.timeout = b, cursor, timeout
        self.result: bool | None = None

    def run(self) -> None:
        self.result = self.b.wait(self.cursor, self.timeout)

    def blocked(self) -> Waiter:
        self.start()
        _until(lambda: self.b.waiting >= 1, "the waiter to block")
        return self

    def finished(self) -> bool | None:
        self.join(60)
        assert not self.is_alive(), "the waiter was never woken"
        return self.result


def _head(store: Store) -> str:
    with store.autocommit() as tx:
        return str(tx.event_head())


def _remote_write(url: str) -> None:
    """Append one event from another process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", WRITE, url], check=True, env=env, timeout=60)


def test_a_write_through_the_same_store_wakes_at_once(stores: Callable[[], Store]) -> None:
    store = stores()
    with Broadcaster(store, poll_s=HOUR, listen_poll_s=HOUR, listen=False) as b:
        waiter = Waiter(b, _head(store)).blocked()
        with store.write() as tx:
            tx.append_event("test.local", ACTOR)
        assert waiter.finished() is True


def test_polling_finds_writes_of_other_processes(
    stores: Callable[[], Store], store_url: str
) -> None:
    store = stores()
    with Broadcaster(store, poll_s=0.05, listen_poll_s=HOUR, listen=False) as b:
        waiter = Waiter(b, _head(store)).blocked()
        _remote_write(store_url)
        assert waiter.finished() is True


def test_wait_answers_at_once_when_the_log_already_moved(stores: Callable[[], Store]) -> None:
    store = stores()
    head = _head(store)
    with Broadcaster(store, poll_s=HOUR, listen_poll_s=HOUR, listen=False) as b:
        assert b.wait(head, 0) is False
        with store.write() as tx:
            tx.append_event("test.local", ACTOR)
        _until(lambda: b.wait(head, 0), "the event to settle")


def test_close_releases_waiters(stores: Callable[[], Store]) -> None:
    store = stores()
    b = Broadcaster(store, poll_s=HOUR, listen_poll_s=HOUR, listen=False).start()
    waiter = Waiter(b, _head(store)).blocked()
    b.close()
    assert waiter.finished() is False


@pytest.fixture
def pg_store(stores: Callable[[], Store]) -> Store:
    store = stores()
    if store.dialect != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    return store


def test_notify_from_another_process_wakes_the_listener(pg_store: Store) -> None:
    with Broadcaster(pg_store, poll_s=HOUR, listen_poll_s=HOUR) as b:
        _until(lambda: b.listening, "the listener")
        waiter = Waiter(b, _head(pg_store)).blocked()
        _remote_write(pg_store.url)
        assert waiter.finished() is True


def test_the_listener_reconnects_after_its_backend_is_killed(pg_store: Store) -> None:
    with Broadcaster(pg_store, poll_s=HOUR, listen_poll_s=HOUR, retry_s=0.05) as b:
        _until(lambda: b.listening, "the listener")
        first = b.backend_pid
        with pg_store.autocommit() as tx:
            assert tx.scalar("SELECT pg_terminate_backend(?)", (first,)) is True
        _until(
            lambda: b.reconnects >= 1 and b.listening and b.backend_pid != first,
            "the listener to reconnect",
        )
        assert b.last_error is not None
        waiter = Waiter(b, _head(pg_store)).blocked()
        _remote_write(pg_store.url)
        assert waiter.finished() is True


def test_while_the_listener_is_down_waiters_poll(pg_store: Store) -> None:
    with Broadcaster(pg_store, poll_s=0.05, listen_poll_s=HOUR, retry_s=HOUR) as b:
        _until(lambda: b.listening, "the listener")
        with pg_store.autocommit() as tx:
            tx.scalar("SELECT pg_terminate_backend(?)", (b.backend_pid,))
        _until(lambda: not b.listening, "the listener to notice")
        waiter = Waiter(b, _head(pg_store)).blocked()
        _remote_write(pg_store.url)
        assert waiter.finished() is True
        assert b.reconnects == 0


def test_a_claim_next_that_finds_no_card_announces_nothing(pg_store: Store) -> None:
    """Only a write that changed something notifies: a miss wakes no supervisor."""
    import psycopg

    from laneboard.board.service import Board
    from laneboard.domain.model import agent, human
    from laneboard.errors import LaneboardError
    from laneboard.store.postgres import PostgresStore

    assert isinstance(pg_store, PostgresStore)
    board = Board(pg_store)
    board.add_project(human("alice"), "P")
    got: list[psycopg.Notify] = []
    with psycopg.connect(pg_store.url, autocommit=True) as listener:
        listener.add_notify_handler(got.append)
        listener.execute(f'LISTEN "{pg_store.notify_channel()}"')
        for _ in range(3):
            with pytest.raises(LaneboardError) as err:
                board.claim_next(agent("w"), include_unassigned=True)
            assert err.value.code == "NOTHING_READY"
        board.create_card(human("alice"), "P", "one")  # one write: one announcement
        _until(lambda: bool(listener.execute("SELECT 1") and got), "the write's notification")
        listener.execute("SELECT 1")  # anything queued before it has arrived by now
    assert len(got) == 1


QUIET_WRITE = """
import sys
from laneboard.domain.model import system
from laneboard.store import open_store

store = open_store(sys.argv[1])
with store.write() as tx:
    tx.append_event("turn.output", system("remote"))
store.close()
"""


def test_writes_of_the_turn_path_reach_only_followers_of_the_whole_log(
    pg_store: Store,
) -> None:
    """They are announced on the quiet channel: a follower of the whole log listens to it
    and is woken; the supervisor's loop, which skips them, does not even listen."""
    from laneboard.store.postgres import PostgresStore
    from laneboard.store.quiet import QUIET_TYPES

    assert isinstance(pg_store, PostgresStore)
    main, noise = pg_store.notify_channel(), pg_store.notify_channel(quiet=True)
    with (
        Broadcaster(pg_store, poll_s=HOUR, listen_poll_s=HOUR) as follower,
        Broadcaster(pg_store, poll_s=HOUR, listen_poll_s=HOUR, quiet=QUIET_TYPES) as loop,
    ):
        _until(lambda: follower.listening and loop.listening, "the listeners")
        assert follower.channels == (main, noise)
        assert loop.channels == (main,)
        waiter = Waiter(follower, _head(pg_store)).blocked()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        subprocess.run(
            [sys.executable, "-c", QUIET_WRITE, pg_store.url], check=True, env=env, timeout=60
        )
        assert waiter.finished() is True
