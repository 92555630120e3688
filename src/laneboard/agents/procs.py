"""Subprocess helpers shared by adapters that talk JSON lines over stdio."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any


class LineProcess:
    """A child process whose stdout is read line by line on a background thread."""

    def __init__(
        self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], stderr_path: str | None
    ) -> None:
        self._stderr: IO[bytes] | int
        if stderr_path:
            os.makedirs(os.path.dirname(stderr_path), exist_ok=True)
            self._stderr = open(stderr_path, "ab")  # noqa: SIM115 - closed in close()
        else:
            self._stderr = subprocess.DEVNULL
        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode("utf-8", "replace"))
        self.lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def write_json(self, obj: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def kill(self) -> None:
        """Terminate the whole process group (the agent and anything it started)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        else:
            self.kill_orphans()
        self._release()

    def kill_orphans(self) -> None:
        """The agent's own process is gone: stop what it started, which may still hold its
        output open (a launcher killed on its own leaves the real agent running)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def _release(self) -> None:
        """After the process ended: let the reader drain, then close our pipe ends."""
        self._reader.join(timeout=5)
        for pipe in (self.proc.stdout, self.proc.stdin):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if not isinstance(self._stderr, int):
            self._stderr.close()
            self._stderr = subprocess.DEVNULL

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.kill()
        self._release()


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
