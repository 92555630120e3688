"""Logs: one logfmt file per process, rotated by size by the program itself.

``supervisor.log`` is written by ``lb start`` and the one-shot passes (``lb loop …``),
``server.log`` by ``lb serve`` when it runs as a service; both live in the state
directory. Several processes may append to one file: a lock file beside it serializes
the size check, the rotation and the append. ``lb logs`` reads them (``logs_read``).
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from laneboard.store import redact_url


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n\t'):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


_TOKEN = re.compile(r"lbt_[A-Za-z0-9_\-]{8,}")
_ASSIGNED = re.compile(r"(?i)(api[_-]?key|token|secret|password)=([^\s&]+)")
_SK = re.compile(r"\b(sk-[A-Za-z0-9]{6})[A-Za-z0-9_\-]+")
_URL = re.compile(r"[a-z][a-z0-9+.\-]*://[^\s/@]+@[^\s]+")


def redact(text: str) -> str:
    """Hide tokens, keys and credentials in URLs before they reach a log or an event."""
    from laneboard.secrets import scrub

    text = scrub(text)
    # each pattern only where its telltale is (most lines have none of them)
    if "lbt_" in text:
        text = _TOKEN.sub("lbt_***", text)
    if "=" in text:
        text = _ASSIGNED.sub(r"\1=***", text)
    if "sk-" in text:
        text = _SK.sub(r"\1***", text)
    if "://" in text:
        text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    return text


class LogFile:
    """One log file, appended to by any number of threads and processes.

    The lock file and the log stay open between lines (one ``flock`` and one ``write``
    per line); a log another process rotated away, or a lock file removed by hand, is
    noticed by its inode and opened again, and a forked child opens its own.
    """

    def __init__(self, path: str, max_bytes: int = 10 * 1024 * 1024, keep: int = 5) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        self._fds: list[int] = []  # [lock file, log] while open; closed when collected
        self._pid = 0
        weakref.finalize(self, _close_all, self._fds)
        os.makedirs(os.path.dirname(path), exist_ok=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """This thread and every other process writing the same file, one at a time."""
        with self._lock:
            if self._pid != os.getpid():  # first line, or a forked child: its own files
                _close_all(self._fds)
                self._fds.append(_open_lock(self.path))
                self._fds.append(_open_log(self.path))
                self._pid = os.getpid()
            self._lock_file()
            try:
                yield
            finally:
                fcntl.flock(self._fds[0], fcntl.LOCK_UN)

    def _lock_file(self) -> None:
        """Lock the file at the lock path: one removed by hand meanwhile (another writer
        may have made a new one) is let go and the new one opened and locked instead."""
        while True:
            fcntl.flock(self._fds[0], fcntl.LOCK_EX)
            try:
                here = _is_open_file(self.path + ".lock", self._fds[0])
            except BaseException:  # the lock is not kept by a write that never happens
                fcntl.flock(self._fds[0], fcntl.LOCK_UN)
                raise
            if here is not None:
                return
            os.close(self._fds[0])  # closing lets the lock of the removed file go
            self._fds[0] = _open_lock(self.path)

    def _current(self) -> int:
        """The log's size, with the open file made the one at ``path`` (rotated away by
        another process, or removed: opened again)."""
        here = _is_open_file(self.path, self._fds[1])
        if here is None:
            os.close(self._fds[1])
            self._fds[1] = _open_log(self.path)
            return os.fstat(self._fds[1]).st_size
        return here.st_size

    def _rotate(self) -> None:
        for i in range(self.keep - 1, 0, -1):
            src = f"{self.path}.{i}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{i + 1}")
        if os.path.exists(self.path):
            os.replace(self.path, f"{self.path}.1")
        extra = f"{self.path}.{self.keep + 1}"
        if os.path.exists(extra):
            os.remove(extra)
        os.close(self._fds[1])
        self._fds[1] = _open_log(self.path)

    def write(self, level: str, component: str, message: str, **fields: Any) -> None:
        parts = [
            f"time={time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())}Z",
            f"level={level}",
            f"component={component}",
            f"msg={_quote(redact(message))}",
        ]
        fields.setdefault("actor_kind", "system")
        for k, v in fields.items():
            if isinstance(v, (int, float)):  # a number holds no secret (bool is an int)
                parts.append(f"{k}={v}")
            elif v is not None:
                parts.append(f"{k}={_quote(redact(str(v)))}")
        line = (" ".join(parts) + "\n").encode()
        with self._locked():
            if self._current() + len(line) > self.max_bytes:
                self._rotate()
            view = memoryview(line)
            while view:  # O_APPEND: each write lands at the end, whoever wrote last
                view = view[os.write(self._fds[1], view) :]

    def info(self, component: str, message: str, **fields: Any) -> None:
        self.write("info", component, message, **fields)

    def warn(self, component: str, message: str, **fields: Any) -> None:
        self.write("warn", component, message, **fields)

    def error(self, component: str, message: str, **fields: Any) -> None:
        self.write("error", component, message, **fields)


PROCESSES = ("supervisor", "server")


def process_log(state_dir: str, process: str) -> str:
    """The log file of one process kind (``supervisor`` or ``server``)."""
    return os.path.join(state_dir, f"{process}.log")


def _is_open_file(path: str, fd: int) -> os.stat_result | None:
    """``path``'s status when it is the file open as ``fd``; None when the name is gone or
    names another file now."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    mine = os.fstat(fd)
    return st if (st.st_ino, st.st_dev) == (mine.st_ino, mine.st_dev) else None


def _open_lock(path: str) -> int:
    return os.open(path + ".lock", os.O_CREAT | os.O_RDWR, 0o600)


def _open_log(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)


def _close_all(fds: list[int]) -> None:
    while fds:
        with suppress(OSError):
            os.close(fds.pop())


class OutputCapture:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so child
    processes that inherit them too) into a log file as logfmt lines."""

    def __init__(self, log: LogFile, *, discard_stdout: bool = False) -> None:
        self.log = log
        self.discard_stdout = discard_stdout
        self._saved: list[tuple[int, int]] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> OutputCapture:
        import sys

        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pairs = [(1, "stdout"), (2, "stderr")]
        if self.discard_stdout:  # a report printed every minute is not worth a log line
            self._saved.append((1, os.dup(1)))
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
            pairs = [(2, "stderr")]
        for fd, name in pairs:
            read_end, write_end = os.pipe()
            self._saved.append((fd, os.dup(fd)))
            os.dup2(write_end, fd)
            os.close(write_end)
            t = threading.Thread(target=self._pump, args=(read_end, name), daemon=True)
            t.start()
            self._threads.append(t)
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        return self

    def _pump(self, fd: int, stream: str) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for raw in pipe:
                text = raw.decode("utf-8", "replace").rstrip("\n")
                if text.strip():
                    self.log.write("info", "output", text, stream=stream)

    def stop(self, timeout: float = 2.0) -> None:
        import sys

        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, saved in self._saved:
            os.dup2(saved, fd)
            os.close(saved)
        for t in self._threads:
            t.join(timeout)
        self._saved, self._threads = [], []
