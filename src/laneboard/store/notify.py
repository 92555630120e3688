"""Wake-ups when the event log grows: ``Broadcaster.wait(cursor, timeout)``.

Three sources wake every waiter, and a woken waiter then reads the log itself, so a
spurious wake-up costs one index probe and a missed one at most one poll interval:

* a write committed through this process's ``Store`` (a commit hook; both backends; one
  whose events are all ``quiet`` types, when the store can tell, wakes nobody);
* on PostgreSQL, a ``NOTIFY`` from any process writing to the same board: every write
  that appends events announces its last event's cursor on the board's channel right
  after it commits (``PostgresStore._commit``), naming its events' types when it can; a
  listener thread with a connection of its own ``LISTEN``s and reconnects when the
  connection drops (then wakes everyone, since notifications sent meanwhile are lost).
  A broadcaster made with ``quiet`` types is not woken by a write that named only those
  (the supervisor's loop: the turn path's own records; see ``supervisor.loop.NOISE``),
  and one that ignores all of ``store.quiet.QUIET_TYPES`` does not even listen to the
  quiet channel those writes are announced on;
* polling: every ``poll_s`` while nothing listens (SQLite across processes, or the
  listener reconnecting), and every ``listen_poll_s`` as a safety net while it listens.

On PostgreSQL a committed event may still wait behind an older open transaction before
followers may read it (see ``q_events``); a waiter that sees such an event re-checks
quickly, backing off, rather than waiting for the next notification.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from laneboard.domain.cursor import EventCursor, LogMarks, parse_cursor
from laneboard.store.base import Store
from laneboard.store.quiet import QUIET_TYPES

RETRY_MAX_S = 5.0


class Broadcaster:
    """One per process and board; thread-safe. ``start()`` it, ``close()`` it."""

    def __init__(
        self,
        store: Store,
        *,
        poll_s: float = 0.5,
        listen_poll_s: float = 10.0,
        retry_s: float = 0.2,
        listen: bool = True,
        quiet: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        self.quiet = quiet  # a NOTIFY naming only these event types wakes nobody
        self.poll_s = poll_s
        self.listen_poll_s = listen_poll_s
        self.retry_s = retry_s
        self._listen = listen and store.dialect == "postgresql"
        self._cond = threading.Condition()
        self._generation = 0
        self._waiting = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._raw: Any = None
        self.listening = False
        self.channels: tuple[str, ...] = ()  # what the listener LISTENs on
        self.reconnects = 0
        self.backend_pid: int | None = None
        self.last_error: str | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> Broadcaster:
        self.store.add_typed_commit_hook(self._on_commit)
        if self._listen and self._thread is None:
            self._thread = threading.Thread(
                target=self._listen_loop, name="laneboard-listen", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        self.store.remove_typed_commit_hook(self._on_commit)
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> Broadcaster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- waking and waiting -------------------------------------------------------------
    def wake(self) -> None:
        """Wake every waiter (for in-process sources other than the store's writes)."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    @property
    def generation(self) -> int:
        """A number that grows at every wake-up (for ``wait_wake``)."""
        with self._cond:
            return self._generation

    def wait_wake(self, seen: int, timeout: float) -> bool:
        """Block until a wake-up after ``generation`` was ``seen`` (True) or ``timeout``
        passes; while nothing listens, at most ``poll_s``. For a loop that reads the log
        itself right after (its read is the probe): it never sleeps past a write that
        woke it between that read and this wait."""
        limit = max(0.0, timeout if self.listening else min(timeout, self.poll_s))
        with self._cond:
            self._waiting += 1
            try:
                return self._cond.wait_for(lambda: self._generation != seen, limit)
            finally:
                self._waiting -= 1

    @property
    def waiting(self) -> int:
        """How many threads are blocked in ``wait`` right now."""
        with self._cond:
            return self._waiting

    def wait(self, cursor: str | int | EventCursor, timeout: float) -> bool:
        """Block until an event after ``cursor`` can be read (True) or ``timeout`` passes."""
        with self.store.autocommit() as tx:
            at = tx.resolve_cursor(parse_cursor(cursor))

        def probe() -> tuple[bool, bool]:
            with self.store.autocommit() as tx:
                return tx.event_backlog(at)

        return self._wait(probe, timeout)

    def wait_changed(self, marks: LogMarks, timeout: float) -> bool:
        """Block until anything is logged after ``marks`` (``Tx.log_marks``), in any order:
        for a loop that only needs to know that something happened."""

        def probe() -> tuple[bool, bool]:
            with self.store.autocommit() as tx:
                return tx.log_changed(marks), False

        return self._wait(probe, timeout)

    def _wait(self, probe: Callable[[], tuple[bool, bool]], timeout: float) -> bool:
        deadline = time.monotonic() + max(timeout, 0.0)
        backoff = 0.01
        while True:
            with self._cond:
                seen = self._generation
            settled, pending = probe()
            if settled:
                return True
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.is_set():
                return False
            if pending:  # committed, behind an older open transaction: look again soon
                slice_s, backoff = backoff, min(backoff * 2, self.poll_s)
            else:
                slice_s = self.listen_poll_s if self.listening else self.poll_s
            self._wait_change(seen, min(left, slice_s))

    def _wait_change(self, seen: int, timeout: float) -> None:
        with self._cond:
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: self._generation != seen, timeout)
            finally:
                self._waiting -= 1

    def _on_commit(self, _cursor: EventCursor, types: frozenset[str] | None) -> None:
        if not (self.quiet and types and types <= self.quiet):  # as ``_ignored``, in process
            self.wake()

    # -- the PostgreSQL listener -------------------------------------------------------
    def _listen_loop(self) -> None:
        delay = self.retry_s
        while not self._stop.is_set():
            try:
                self._connect()
                delay = self.retry_s
                self._drain()
            except Exception as exc:  # the connection dropped or could not be opened
                self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            finally:
                self._disconnect()
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, RETRY_MAX_S)
            self.reconnects += 1

    def _connect(self) -> None:
        import psycopg

        from laneboard.store.postgres import PostgresStore, quote_ident

        assert isinstance(self.store, PostgresStore)
        channels = [self.store.notify_channel()]
        if not self.quiet >= QUIET_TYPES:  # it wants the writes of only those types too
            channels.append(self.store.notify_channel(quiet=True))
        raw = psycopg.connect(self.store.url, autocommit=True, connect_timeout=10)
        self._raw = raw
        for channel in channels:
            raw.execute(f"LISTEN {quote_ident(channel)}")
        self.channels = tuple(channels)
        self.backend_pid = int(raw.info.backend_pid)
        self.listening = True
        self.wake()  # anything committed while nobody listened is found by the waiters

    def _drain(self) -> None:
        while not self._stop.is_set():
            for note in self._raw.notifies(timeout=0.5):
                if not self._ignored(str(note.payload)):
                    self.wake()

    def _ignored(self, payload: str) -> bool:
        """A write that announced only ``quiet`` event types ('' names none: it wakes)."""
        return bool(self.quiet and payload) and set(payload.split(",")) <= self.quiet

    def _disconnect(self) -> None:
        self.listening = False
        raw, self._raw = self._raw, None
        if raw is not None:
            try:
                raw.close()
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        self.wake()  # waiters fall back to polling


class WakingEvent(threading.Event):
    """A ``threading.Event`` whose ``set()`` also wakes a ``Broadcaster``'s waiters."""

    def __init__(self) -> None:
        super().__init__()
        self.wakeups: Broadcaster | None = None

    def set(self) -> None:
        super().set()
        if self.wakeups is not None:
            self.wakeups.wake()
