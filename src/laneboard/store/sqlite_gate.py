"""The write gate of a SQLite board: laneboard's writers queue in the kernel.

SQLite's busy handler polls: a writer that finds the write lock taken sleeps 1, 2, 5, 10
... 100 ms and tries again, so the lock can sit free while every waiter sleeps, and a
waiter can lose to newcomers again and again. Before ``BEGIN IMMEDIATE`` each laneboard
writer therefore takes an exclusive ``flock`` on a sidecar file next to the board
(``<board>-lock``): the kernel keeps the waiters blocked and wakes them the moment the
holder lets go, or dies (the kernel drops a dead process's lock). SQLite's busy handler
then only ever waits for writers that are not laneboard (an open ``sqlite3`` shell).
The gate is an optimisation, never the guard: SQLite's own lock still decides.

Threads of one process queue on a ``threading.Lock`` (whose wait has a timeout); the one
in front waits for the kernel lock through a helper thread, so that its own wait can end
at the timeout. A helper whose waiter gave up keeps waiting and hands the lock straight
back when the kernel grants it (or gives it to the next thread that came to wait). At
most one helper runs per gate, and it ends when the kernel grants the lock.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import suppress

SUFFIX = "-lock"


class GateTimeout(Exception):
    """The gate stayed taken for the whole timeout (nothing was written)."""


class WriteGate:
    """An exclusive, kernel-queued lock on ``<path>-lock`` for one board, per process."""

    def __init__(self, path: str) -> None:
        self.path = path + SUFFIX
        self.waits = 0  # writes that found another process's writer in front of them
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._local = threading.Lock()  # this process's writers, one at a time
        self._cond = threading.Condition(threading.Lock())
        self._fd: int | None = None
        self._helper: threading.Thread | None = None
        self._wanted = False  # the thread in front waits for the helper
        self._granted = False  # the helper holds the kernel lock for that thread
        self._held = False
        self._closed = False

    def _forked(self) -> None:
        """A forked child shares its parent's open file (and lock): it opens its own."""
        if self._pid == os.getpid():
            return
        if self._fd is not None:
            with suppress(OSError):
                os.close(self._fd)  # closing the child's copy leaves the parent's lock be
        self._reset()

    def _file(self) -> int:
        if self._fd is None:
            try:
                mode = os.stat(self.path.removesuffix(SUFFIX)).st_mode & 0o666
            except OSError:
                mode = 0o600
            # read-only is enough for flock, and lets every user of the board take it
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, mode)
            self._closed = False
        return self._fd

    def acquire(self, timeout: float) -> None:
        """Take the gate within ``timeout`` seconds, else ``GateTimeout`` (nothing held).

        ``OSError`` when the sidecar cannot be opened (the caller writes ungated)."""
        self._forked()
        deadline = time.monotonic() + timeout
        if not self._local.acquire(timeout=max(timeout, 0.0)):
            raise GateTimeout
        try:
            self._kernel(deadline)
        except BaseException:
            self._local.release()
            raise
        self._held = True

    def _kernel(self, deadline: float) -> None:
        with self._cond:
            self._closed = False
            fd = self._file()
            if self._helper is None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    pass
                self.waits += 1
                self._helper = threading.Thread(
                    target=self._wait_kernel, args=(fd,), name="laneboard-write-gate", daemon=True
                )
                self._helper.start()
            self._wanted, took = True, False
            try:
                while not self._granted:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise GateTimeout
                    self._cond.wait(left)
                took = True
            finally:
                if self._granted and not took:  # interrupted just as it came
                    fcntl.flock(fd, fcntl.LOCK_UN)
                self._wanted = self._granted = False

    def _wait_kernel(self, fd: int) -> None:
        """The helper: block in the kernel's queue, then hand the lock on or back."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # the file was closed under it: the waiter times out
            with self._cond:
                self._helper = None
            return
        with self._cond:
            self._helper = None
            if self._wanted:
                self._granted = True
                self._cond.notify_all()
                return
            fcntl.flock(fd, fcntl.LOCK_UN)
            if self._closed:
                self._close_fd()

    def release(self) -> None:
        """Let the next writer in (the kernel wakes it at once)."""
        if not self._held or self._pid != os.getpid():
            return
        self._held = False
        try:
            with self._cond:
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                if self._closed and self._helper is None:
                    self._close_fd()
        finally:
            self._local.release()

    def helper_running(self) -> bool:
        with self._cond:
            return self._helper is not None

    def close(self) -> None:
        """Close the sidecar (a helper still waiting closes it once granted)."""
        with self._cond:
            self._closed = True
            if self._helper is None and not self._held:
                self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            with suppress(OSError):
                os.close(self._fd)
        self._fd = None
