"""One follower of the event log per server, fanned out to every subscriber.

``Feed.follow(cursor)`` yields the events after ``cursor``, batch by batch, in log order
and without skipping one (the guarantee of ``store.q_events``). However many clients
follow, the log is read once per change: a thread waits on the process's
``store.notify.Broadcaster`` (a write through this server, a NOTIFY from any other
process, polling only as a fallback) and reads from its own cursor, and each subscriber
receives those batches. A subscriber that starts behind the feed (``Last-Event-ID``,
``?after=``) or falls behind it (a slow client) reads the log itself from its own cursor
until it reaches the feed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio.to_thread

from laneboard.domain.cursor import EventCursor, parse_cursor
from laneboard.domain.model import Event
from laneboard.store.base import Store
from laneboard.store.notify import Broadcaster

BATCH = 500  # events per read
MAX_QUEUED = 64  # batches a subscriber may hold before it reads for itself
WAIT_S = 10.0  # the feed thread re-checks its stop flag this often


def position(e: Event) -> EventCursor:
    return EventCursor(e.xid, e.id)


@dataclass
class Batch:
    events: list[Event]
    upto: EventCursor  # the feed's cursor after these events


END = Batch([], EventCursor(0, 0))  # a follower's last batch: the server stops


@dataclass
class _Sub:
    loop: asyncio.AbstractEventLoop
    base: EventCursor  # the feed's cursor when this subscriber joined (or resynced)
    queue: asyncio.Queue[Batch | None] = field(default_factory=asyncio.Queue)
    queued: int = 0
    lagged: bool = False

    def push(self, batch: Batch) -> None:
        if self.lagged:
            return
        if self.queued >= MAX_QUEUED:  # it reads the log itself from its cursor
            self.lagged = True
            batch_or_none: Batch | None = None
        else:
            self.queued += 1
            batch_or_none = batch
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, batch_or_none)
        except RuntimeError:  # its event loop is gone
            self.lagged = True

    def end(self) -> None:
        """Its ``follow`` returns (sent to the queue it has when the loop runs this)."""
        with contextlib.suppress(RuntimeError):  # its loop is gone, and the follower too
            self.loop.call_soon_threadsafe(lambda: self.queue.put_nowait(END))


class Feed:
    """Started on the first subscriber; ``close()`` ends its thread."""

    def __init__(self, store: Store, *, poll_s: float = 0.5) -> None:
        self.store = store
        self.poll_s = poll_s
        self.broadcaster: Broadcaster | None = None
        self.head = EventCursor(0, 0)
        self.reads = 0  # log reads by the feed thread (one per change, however many follow)
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._subs: list[_Sub] = []
        self._stop = threading.Event()
        self._ended = False  # followers end at once (``end``)
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def _ensure_started(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            with self.store.autocommit() as tx:
                self.head = tx.event_head()
            self.broadcaster = Broadcaster(self.store, poll_s=self.poll_s).start()
            self._thread = threading.Thread(target=self._run, name="laneboard-feed", daemon=True)
            self._thread.start()

    def end(self) -> None:
        """End every follower now, and any that starts later at once: each ``follow``
        returns, so the server's streams end cleanly and their connections can close
        (a server stopping does not wait for clients that never leave). Returns at once;
        safe from any thread."""
        with self._lock:
            self._ended = True
            subs = list(self._subs)
        for sub in subs:
            sub.end()

    def close(self) -> None:
        self.end()
        self._stop.set()
        if self.broadcaster is not None:
            self.broadcaster.close()  # its waiters return at once
        if self._thread is not None:
            self._thread.join(10)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subs)

    # -- the one reader -----------------------------------------------------------------
    def _run(self) -> None:
        assert self.broadcaster is not None
        while not self._stop.is_set():
            try:
                if not self.broadcaster.wait(self.head, WAIT_S):
                    continue
                with self.store.autocommit() as tx:
                    events, upto = tx.events_after(self.head, limit=BATCH)
                self.reads += 1
            except Exception as exc:  # the store is away: try again after a poll interval
                self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                self._stop.wait(self.poll_s)
                continue
            with self._lock:
                self.head = max(self.head, upto)
                batch = Batch(events, self.head)
                for sub in self._subs:
                    sub.push(batch)

    # -- subscribers --------------------------------------------------------------------
    def _join(self, sub: _Sub | None = None) -> _Sub:
        with self._lock:
            if sub is None:
                sub = _Sub(asyncio.get_running_loop(), self.head)
                self._subs.append(sub)
            else:  # resync a lagged subscriber: it reads up to here, then takes batches
                sub.base, sub.lagged, sub.queued = self.head, False, 0
                sub.queue = asyncio.Queue()
            return sub

    def _leave(self, sub: _Sub) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def resolve(self, cursor: str | int | EventCursor) -> EventCursor:
        """A client's cursor (an event id or a cursor's text) as a position."""
        with self.store.autocommit() as tx:
            at = tx.resolve_cursor(parse_cursor(cursor))
            tx.refuse_ahead(at)
            return at

    def head_now(self) -> EventCursor:
        with self.store.autocommit() as tx:
            return tx.event_head()

    async def follow(
        self, cursor: EventCursor, *, keepalive_s: float = 15.0
    ) -> AsyncIterator[list[Event]]:
        """Batches of the events after ``cursor``; an empty batch when ``keepalive_s``
        passed with nothing new. It returns when the feed ends (``end``, ``close``)."""
        await anyio.to_thread.run_sync(self._ensure_started)
        sub = self._join()
        at = cursor
        try:
            while not self._ended:
                while at < sub.base and not self._ended:  # behind: read from our own cursor
                    events, upto = await anyio.to_thread.run_sync(self._read, at)
                    if events:
                        yield events
                    if upto <= at:
                        break
                    at = upto
                try:
                    batch = await asyncio.wait_for(sub.queue.get(), keepalive_s)
                except TimeoutError:
                    yield []
                    continue
                if batch is END:
                    return
                if batch is None:  # fell behind: resync, then read for ourselves
                    self._join(sub)
                    continue
                with self._lock:
                    sub.queued -= 1
                fresh = [e for e in batch.events if position(e) > at]
                at = max(at, batch.upto)
                if fresh:
                    yield fresh
        finally:
            self._leave(sub)

    def _read(self, at: EventCursor) -> tuple[list[Event], EventCursor]:
        with self.store.autocommit() as tx:
            return tx.events_after(at, limit=BATCH)
