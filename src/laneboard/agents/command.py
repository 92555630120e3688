"""The ``command`` agent kind: any CLI agent, one process per turn from a template.

Configure it under ``[supervisor.agent_kinds.command]`` with ``template``, e.g.
``template = "my-agent --cwd {cwd} --prompt-file {prompt_file}"``. Placeholders:
``{cwd}``, ``{prompt_file}``, ``{session_id}``, ``{role}``, ``{card}``. The prompt is
also written to the process's stdin. Exit code 0 is a successful turn; stdout is the
final text. In a sandbox the prompt file lies in the session's private temporary
directory and ``{prompt_file}`` names it as the command sees it. The session id is laneboard's own (a command has no native session), so
"resume" means the same id is passed again.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from typing import IO, Any

from laneboard.agents.base import AdapterError, EventSink, ProbeResult, TurnResult, Usage
from laneboard.agents.procs import kill_group
from laneboard.agents.sandbox import Sandbox, start
from laneboard.domain.roles import Role
from laneboard.errors import LaneboardError


class CommandSession:
    def __init__(
        self,
        template: str,
        cwd: str,
        session_id: str,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.template = template
        self.cwd = cwd
        self.session_id: str | None = session_id
        self.role = role
        self.env = dict(env)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._interrupted = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def send(self, prompt: str, *, timeout: float, on_event: EventSink | None = None) -> TurnResult:
        self._interrupted = False
        tmp = None
        if self.sandbox is not None:
            self.sandbox.prepare()
            tmp = self.sandbox.spec.tmp
        with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, dir=tmp) as fh:
            fh.write(prompt)
            prompt_file = fh.name
        values = {
            "cwd": self.cwd,
            "prompt_file": self.sandbox.inside(prompt_file) if self.sandbox else prompt_file,
            "session_id": self.session_id or "",
            "role": self.role.id,
            "card": self.env.get("LANEBOARD_CARD", ""),
        }
        argv = [part.format(**values) for part in shlex.split(self.template)]
        started = time.monotonic()
        try:
            with self._lock:
                self._proc = start(
                    self.sandbox,
                    argv,
                    self.env,
                    cwd=self.cwd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            out, err = _Tail(self._proc.stdout), _Tail(self._proc.stderr)
            _feed(self._proc.stdin, prompt.encode())
            if not _ended(self._proc, (out, err), started + timeout):
                self._kill()
                return TurnResult(
                    False,
                    session_id=self.session_id,
                    timed_out=True,
                    error=f"turn timed out after {timeout:.0f}s",
                )
        except OSError as exc:
            return TurnResult(False, session_id=self.session_id, error=f"cannot run: {exc}")
        finally:
            os.unlink(prompt_file)
        ms = int((time.monotonic() - started) * 1000)
        code = self._proc.returncode
        if self._interrupted:
            return TurnResult(
                False,
                session_id=self.session_id,
                interrupted=True,
                exit_code=code,
                error="turn interrupted",
                usage=Usage(duration_ms=ms),
            )
        text = out.text()
        return TurnResult(
            code == 0,
            final_text=text,
            session_id=self.session_id,
            exit_code=code,
            error=None if code == 0 else f"exit {code}: {err.text()[-500:]}",
            usage=Usage(duration_ms=ms),
        )

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            kill_group(proc.pid)
            proc.wait(timeout=5)

    def interrupt(self) -> None:
        self._interrupted = True
        self._kill()

    def close(self) -> None:
        self._kill()


KEEP_BYTES = 64 << 10  # of a command's stdout (its final text) and stderr: the last ones


class _Tail:
    """The last ``KEEP_BYTES`` of a pipe, read to its end on a thread of its own: an agent
    that writes without end costs the supervisor no more than that."""

    def __init__(self, pipe: IO[bytes] | None) -> None:
        self.kept = bytearray()
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        with pipe, contextlib.suppress(OSError, ValueError):
            while chunk := os.read(pipe.fileno(), 1 << 16):  # unbuffered: nothing else reads it
                self.kept += chunk
                if len(self.kept) > KEEP_BYTES:
                    del self.kept[: len(self.kept) - KEEP_BYTES]

    def text(self) -> str:
        return self.kept.decode("utf-8", "replace")


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    """Write the prompt to the command's stdin and close it, on a thread: a command that
    does not read it stalls nothing."""

    def write() -> None:
        if pipe is None:
            return
        with contextlib.suppress(OSError, ValueError), pipe:
            pipe.write(data)

    threading.Thread(target=write, daemon=True).start()


def _ended(proc: subprocess.Popen[bytes], tails: tuple[_Tail, ...], deadline: float) -> bool:
    """Whether the command exited and its output closed before ``deadline``."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    for tail in tails:
        tail.thread.join(max(0.0, deadline - time.monotonic()))
        if tail.thread.is_alive():  # something it started holds its output open
            return False
    return True


class CommandAdapter:
    kind = "command"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        self.template = str(self.config.get("template", ""))

    def open_session(
        self,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
    ) -> CommandSession:
        if not self.template:
            raise LaneboardError(
                "CONFIG_INVALID",
                "the command agent has no template",
                "set supervisor.agent_kinds.command.template",
            )
        try:
            shlex.split(self.template)
        except ValueError as exc:
            raise AdapterError(f"command template does not parse: {exc}") from None
        sid = session_id or str(uuid.uuid4())
        return CommandSession(self.template, cwd, sid, role, env, sandbox)

    def probe(self, handshake: bool = False) -> ProbeResult:
        if not self.template:
            return ProbeResult("command", False, error="no template configured")
        exe = shlex.split(self.template)[0]
        path = shutil.which(exe)
        return ProbeResult(
            "command",
            path is not None,
            path,
            None,
            None,
            None if path else f"{exe} not found on PATH",
        )
