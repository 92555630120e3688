"""A process's announcements of its writes, coalesced (PostgreSQL ``NOTIFY``).

PostgreSQL serializes the commits of every transaction that notifies, on one lock for
the whole server, so processes that each announce every write queue on it: with a few
processes writing hundreds of times a second the announcements, not the writes, set the
pace. An ``Announcer`` keeps that to one announcement per ``gap_s`` per process:

* a write that comes after a quiet spell is announced at once, in the writer's own
  round trip (``now_or_later`` answers True and the writer sends it);
* a write within ``gap_s`` of the last announcement is queued (False), and a thread of
  the store announces everything queued in one notification when the gap ends, with
  the writes' event types merged, on a connection of its own: the writer never waits.

A listener therefore wakes at most ``gap_s`` after any write, and a burst of writes costs
one notification per gap instead of one each. ``close`` (and the interpreter's exit)
sends what is still queued. The payload is a write's event types, comma-separated, or
'' when some write could not name them (a listener then reads the log).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable

GAP_S = 0.025  # at most one announcement per process in this long, after the first
TYPES_MAX = 1000  # a longer merged list of types is announced as '' (unknown)


class Announcer:
    """Decides which writes announce themselves and announces the rest together."""

    def __init__(
        self,
        send: Callable[[str], None],
        *,
        gap_s: float = GAP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send  # one NOTIFY with this payload, on a connection of the store's
        self.gap_s = gap_s
        self._clock = clock
        self._cond = threading.Condition()
        self._last = float("-inf")  # when the last announcement was decided or sent
        self._types: set[str] = set()
        self._queued = False
        self._unknown = False  # a queued write could not name its types
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._closed = False
        self.sent = 0  # announcements sent by the thread (a queued batch counts once)

    def now_or_later(self, types: str) -> bool:
        """True: the caller announces this write now, itself. False: it is queued."""
        with self._cond:
            if self._pid != os.getpid():  # forked: the parent's thread is not here
                self._reset_after_fork()
            now = self._clock()
            if not self._queued and (now - self._last >= self.gap_s or self._closed):
                self._last = now
                return True
            was_queued = self._queued
            self._queue(types)
            if not was_queued:  # else the thread already waits for this gap to end
                self._ensure_thread()
                self._cond.notify()
            return False

    def flush(self) -> None:
        """Send what is queued now (the store closes, or the process exits)."""
        payload = self._take()
        if payload is not None:
            self._send_quietly(payload)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        self.flush()
        atexit.unregister(self.flush)

    # -- inside ------------------------------------------------------------------------
    def _queue(self, types: str) -> None:
        self._queued = True
        if not types:
            self._unknown = True
        else:
            self._types.update(types.split(","))

    def _take(self) -> str | None:
        """The queued announcement's payload, emptying the queue (None: nothing queued)."""
        with self._cond:
            if not self._queued:
                return None
            text = "" if self._unknown else ",".join(sorted(self._types))
            self._types, self._queued, self._unknown = set(), False, False
            self._last = self._clock()
        return text if len(text) <= TYPES_MAX else ""

    def _ensure_thread(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(
                target=self._run, name="laneboard-announce", daemon=True
            )
            self._thread.start()
            atexit.register(self.flush)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not (
                    self._queued and self._clock() - self._last >= self.gap_s
                ):
                    wait = (
                        None
                        if not self._queued
                        else max(0.0, self._last + self.gap_s - self._clock())
                    )
                    self._cond.wait(wait)
                if self._closed:
                    return
            self.flush()

    def _send_quietly(self, payload: str) -> None:
        try:
            self._send(payload)
            self.sent += 1
        except Exception:  # best effort: listeners also poll, as for a lost notification
            return

    def _reset_after_fork(self) -> None:
        self._pid = os.getpid()
        self._thread = None
        self._types, self._queued, self._unknown = set(), False, False
        self._last = float("-inf")
