"""Subprocess helpers shared by adapters that talk JSON lines over stdio.

A ``LineProcess`` given a ``Sandbox`` starts its argv inside it (``agents.sandbox``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from laneboard.agents.sandbox import Sandbox, start

MAX_LINE = 8 << 20  # bytes of one line of an agent's output read whole; a longer one is dropped
QUEUED_LINES = 8  # lines read ahead of the turn that reads them
READER_JOIN_S = 5.0  # for the reader of a process let go to end (something may hold its pipe)


class DroppedLine(str):
    """In place of a line longer than ``MAX_LINE`` bytes: what the turn records of it."""

    def __new__(cls, size: int) -> DroppedLine:
        return super().__new__(
            cls, f"a line of more than {MAX_LINE >> 20} MiB ({size} bytes) was dropped unread"
        )


class LineProcess:
    """A child process whose stdout is read line by line on a background thread."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        stderr_path: str | None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self._stderr: IO[bytes] | int
        if stderr_path:
            os.makedirs(os.path.dirname(stderr_path), exist_ok=True)
            self._stderr = open(stderr_path, "ab")  # noqa: SIM115 - closed in close()
        else:
            self._stderr = subprocess.DEVNULL
        try:
            self.proc = start(
                sandbox,
                argv,
                env,
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                start_new_session=True,
            )
        except BaseException:
            if not isinstance(self._stderr, int):
                self._stderr.close()
            raise
        # bounded: an agent that writes faster than its turn reads waits on its own pipe
        self.lines: queue.Queue[str | None] = queue.Queue(maxsize=QUEUED_LINES)
        self._closing = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Each line of the agent's stdout, up to ``MAX_LINE`` bytes: a longer one is read
        to its end and dropped, and a ``DroppedLine`` saying so is queued instead."""
        assert self.proc.stdout is not None
        out = self.proc.stdout
        while raw := out.readline(MAX_LINE + 1):
            if len(raw) <= MAX_LINE or raw.endswith(b"\n"):
                line: str = raw.decode("utf-8", "replace")
            else:
                size = len(raw)
                while raw and not raw.endswith(b"\n"):
                    raw = out.readline(MAX_LINE)
                    size += len(raw)
                line = DroppedLine(size)
            if not self._put(line):
                break
        self._end()

    def _put(self, line: str) -> bool:
        """Queue ``line`` once the turn has room for it. Once the process is let go
        (``_release``) a line is queued only if there is room, and False ends the reading:
        a turn that still reads gets what fits, then the end."""
        while not self._closing:
            try:
                self.lines.put(line, timeout=0.5)
                return True
            except queue.Full:
                continue
        with contextlib.suppress(queue.Full):
            self.lines.put_nowait(line)
            return True
        return False

    def _end(self) -> None:
        """Queue the output's end (``None``) always: a turn still reading waits for it.
        Once the process is let go, lines nobody read make room for it."""
        while True:
            try:
                self.lines.put(None, timeout=0.5)
                return
            except queue.Full:
                if self._closing:
                    with contextlib.suppress(queue.Empty):
                        self.lines.get_nowait()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def write_json(self, obj: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def kill(self, *, grace_s: float | None = None) -> None:
        """Terminate the whole process group (the agent and anything it started).

        SIGTERM goes to the group; it returns once no process of the group runs. What is
        still running after ``grace_s`` (``TERM_GRACE_S``) — the agent or a grandchild
        that ignores SIGTERM — is SIGKILLed and waited for (``kill_group``).
        """
        grace = TERM_GRACE_S if grace_s is None else grace_s
        pgid = self.proc.pid
        if self.proc.poll() is None or group_running(pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while True:
                self.proc.poll()  # reap the agent as soon as it exits
                if not group_running(pgid) or time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
            if group_running(pgid):
                kill_group(pgid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=GROUP_EXIT_WAIT_S)
        self._release()

    def kill_orphans(self) -> None:
        """The agent's own process is gone: stop what it started, which may still hold its
        output open (a launcher killed on its own leaves the real agent running)."""
        kill_group(self.proc.pid)

    def _release(self) -> None:
        """After the process ended: let the reader end, then close our pipe ends. Nobody
        reads the lines any more, so a reader waiting for room in the queue gives up."""
        self._closing = True
        self._reader.join(timeout=READER_JOIN_S)
        for pipe in (self.proc.stdout, self.proc.stdin):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if not isinstance(self._stderr, int):
            self._stderr.close()
            self._stderr = subprocess.DEVNULL

    def close(self) -> None:
        """Close the agent's stdin and let it exit (3 s); then ``kill`` what still runs of
        its group — the agent itself, or anything it started and left behind."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.kill()
        if group_running(self.proc.pid):
            self.kill()
        self._release()


GROUP_EXIT_WAIT_S = 5.0  # after SIGKILL: the bound on waiting for the group to be gone
TERM_GRACE_S = 5.0  # after SIGTERM: how long the group may take to exit before SIGKILL


def kill_group(pgid: int, *, wait_s: float = GROUP_EXIT_WAIT_S) -> None:
    """SIGKILL a process group and wait (at most ``wait_s``) until none of it runs: a
    signal is only queued, and a loaded machine may run the process a while longer."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while group_running(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def group_running(pgid: int) -> bool:
    """Whether a process of the group is still alive (a zombie is not)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return True  # no /proc to tell a zombie from a live member
    for name in entries:
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True
