"""A check's output, read from its pipe into a log of bounded size.

A card's checks run the lane's code, which an agent wrote: a test that prints without end
would otherwise fill the disk of the machine at the speed it writes, for as long as the
check's timeout lets it (the log used to take everything). The runtime reads the output
itself and its log keeps the first ``LOG_HEAD`` bytes and the last ``LOG_TAIL``, with a
line between them saying how many bytes were cut; the check runs on as before, however
much it prints, and its evidence (the log's digest, the summary from its end) describes
the log as kept.

The reader stops at the check's end, not at its output's: a process the check left
running in the background may hold the pipe open, and its output after the check's end
is read only while it is already there (``DRAIN_S`` at most).
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import subprocess
import time
from typing import BinaryIO

LOG_HEAD = 8 << 20  # the first bytes of a check's output its log keeps,
LOG_TAIL = 1 << 20  # and the last ones
READ_S = 0.1  # how often the reader looks at the check's process and its clock
DRAIN_S = 1.0  # after the check ended (or was killed): output already there, this long
CHUNK = 1 << 16
READ_CHUNKS = 64  # read in one go at most, before the clock is looked at again


class CappedLog:
    """A log file that keeps the first ``head`` and the last ``tail`` bytes written."""

    def __init__(self, fh: BinaryIO, head: int = LOG_HEAD, tail: int = LOG_TAIL) -> None:
        self.fh = fh
        self.head_left = head
        self.tail_size = tail
        self.ends: collections.deque[bytes] = collections.deque()
        self.ends_size = 0
        self.cut = 0  # bytes between the head and the tail, dropped

    def write(self, data: bytes) -> None:
        if self.head_left > 0:
            part = data[: self.head_left]
            self.fh.write(part)
            self.head_left -= len(part)
            data = data[len(part) :]
        if not data:
            return
        self.ends.append(data)
        self.ends_size += len(data)
        while self.ends_size - len(self.ends[0]) >= self.tail_size:
            self.cut += len(self.ends[0])
            self.ends_size -= len(self.ends.popleft())

    def finish(self) -> None:
        """Write the tail kept (after a line saying what was cut, when anything was)."""
        end = b"".join(self.ends)
        extra = len(end) - self.tail_size
        if extra > 0:
            self.cut += extra
            end = end[extra:]
        if self.cut:
            self.fh.write(
                f"\n[laneboard] {self.cut} bytes of output cut here: a check's log keeps its "
                f"first {LOG_HEAD >> 20} MiB and its last {LOG_TAIL >> 20} MiB\n".encode()
            )
        self.fh.write(end)
        self.ends.clear()
        self.ends_size = 0


def copy_output(proc: subprocess.Popen[bytes], log: CappedLog, deadline: float) -> bool:
    """Read ``proc``'s output into ``log`` until the process ends; at ``deadline`` kill its
    process group. Whether it was killed for time."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    waiter = select.poll()
    waiter.register(fd, select.POLLIN)
    open_ = True
    try:
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                _drain(fd, log, open_)
                return True
            if not open_:  # its output closed early: only its end is waited for now
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=min(left, READ_S))
                continue
            if waiter.poll(min(left, READ_S) * 1000):
                open_ = _read(fd, log)
        _drain(fd, log, open_)
        return False
    finally:
        proc.stdout.close()


def _read(fd: int, log: CappedLog) -> bool:
    """What the pipe holds now into ``log`` (``READ_CHUNKS`` at most: a writer faster than
    the reader still lets it look at the clock); False once its writers are all gone."""
    for _ in range(READ_CHUNKS):
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return True
        if not data:
            return False
        log.write(data)
    return True


def _drain(fd: int, log: CappedLog, open_: bool) -> None:
    """The output already written when the check ended, for ``DRAIN_S`` at most."""
    until = time.monotonic() + DRAIN_S
    while open_ and time.monotonic() < until:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        if not data:
            return
        log.write(data)
