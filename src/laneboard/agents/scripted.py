"""The ``scripted`` agent kind: a deterministic agent process for tests and the demo.

Each session is one resident child process (``python -m laneboard.agents.scripted_agent``)
speaking JSON lines on stdio, exactly like a real agent: prompts in, events and a
result out. What it does in a turn comes from a script of steps (see
``scripted_agent``), so every supervisor path — delivery, questions, crashes, hangs,
resumes — can be exercised with real processes, real files and real ``lb`` calls.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sys
import time
import uuid
from collections.abc import Mapping
from typing import Any

from laneboard.agents.base import (
    AdapterError,
    AgentEvent,
    EventSink,
    ProbeResult,
    TurnResult,
    Usage,
)
from laneboard.agents.procs import LineProcess
from laneboard.agents.sandbox import Sandbox
from laneboard.domain.roles import Role


class SessionGone(AdapterError):
    """The native session id is unknown to the agent (it cannot be resumed)."""


class ScriptedSession:
    def __init__(self, proc: LineProcess, session_id: str) -> None:
        self._proc = proc
        self.session_id: str | None = session_id
        self._interrupted = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.alive()

    def send(self, prompt: str, *, timeout: float, on_event: EventSink | None = None) -> TurnResult:
        self._interrupted = False
        started = time.monotonic()
        events: list[AgentEvent] = []
        try:
            self._proc.write_json({"type": "prompt", "text": prompt})
        except (BrokenPipeError, OSError) as exc:
            return TurnResult(
                False,
                session_id=self.session_id,
                error=f"agent is gone: {exc}",
                exit_code=self._proc.proc.poll(),
            )
        deadline = started + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._proc.kill()
                return TurnResult(
                    False,
                    session_id=self.session_id,
                    timed_out=True,
                    error=f"turn timed out after {timeout:.0f}s",
                    events=events,
                    usage=Usage(duration_ms=int(timeout * 1000)),
                )
            try:
                line = self._proc.lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            ms = int((time.monotonic() - started) * 1000)
            if line is None:
                code = self._proc.proc.wait()
                if self._interrupted:
                    return TurnResult(
                        False,
                        session_id=self.session_id,
                        interrupted=True,
                        exit_code=code,
                        error="turn interrupted",
                        events=events,
                        usage=Usage(duration_ms=ms),
                    )
                return TurnResult(
                    False,
                    session_id=self.session_id,
                    exit_code=code,
                    error=f"agent exited with code {code} during the turn",
                    events=events,
                    usage=Usage(duration_ms=ms),
                )
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                events.append(AgentEvent("malformed", {"line": line[:500]}))
                continue
            if msg.get("type") == "event":
                ev = AgentEvent(str(msg.get("kind", "event")), dict(msg.get("data") or {}))
                events.append(ev)
                if on_event:
                    on_event(ev)
            elif msg.get("type") == "result":
                u = msg.get("usage") or {}
                return TurnResult(
                    bool(msg.get("ok")),
                    final_text=str(msg.get("text", "")),
                    session_id=self.session_id,
                    error=msg.get("error"),
                    events=events,
                    usage=Usage(
                        int(u.get("input_tokens", 0)),
                        int(u.get("output_tokens", 0)),
                        u.get("cost_usd"),
                        ms,
                    ),
                )

    def interrupt(self) -> None:
        self._interrupted = True
        self._proc.kill()

    def close(self) -> None:
        self._proc.close()


class ScriptedAdapter:
    kind = "scripted"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config = dict(config or {})

    def open_session(
        self,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
    ) -> ScriptedSession:
        sid = session_id or str(uuid.uuid4())
        argv = [
            sys.executable,
            "-m",
            "laneboard.agents.scripted_agent",
            "--session",
            sid,
            "--role",
            role.id,
        ]
        if session_id:
            argv.append("--resume")
        proc = LineProcess(
            argv, cwd=cwd, env=env, stderr_path=env.get("LANEBOARD_AGENT_STDERR"), sandbox=sandbox
        )
        first = None
        with contextlib.suppress(queue.Empty):
            first = proc.lines.get(timeout=30)
        if first is None:
            code = proc.proc.wait(timeout=5) if not proc.alive() else None
            proc.kill()
            raise AdapterError(f"scripted agent did not start (exit {code})")
        hello = json.loads(first)
        if hello.get("type") == "error" and hello.get("code") == "session_not_found":
            proc.close()
            raise SessionGone(f"session {sid} no longer exists")
        if hello.get("type") != "ready":
            proc.kill()
            raise AdapterError(f"scripted agent said {first.strip()[:200]}")
        return ScriptedSession(proc, sid)

    def probe(self, handshake: bool = False) -> ProbeResult:
        return ProbeResult("scripted", True, sys.executable, "builtin", True if handshake else None)


def state_root(env: Mapping[str, str]) -> str:
    root = env.get("LANEBOARD_AGENT_STATE") or os.path.join(os.getcwd(), ".laneboard", "scripted")
    return root
