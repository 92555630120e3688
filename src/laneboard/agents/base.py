"""The adapter protocol every agent kind implements.

``Adapter.open_session(cwd, session_id, role, env)`` starts (or resumes, when
``session_id`` is given) one native agent session bound to ``cwd``. The native
session id must be known when ``open_session`` returns, so the pool can store it
before the first turn starts; given a ``Sandbox``, every process of the session starts
inside it. ``Session.send(prompt)`` runs one turn and returns
a ``TurnResult``; ``interrupt()`` stops a running turn from another thread;
``close()`` ends the session's process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from laneboard.agents.sandbox import Sandbox
from laneboard.domain.roles import Role


@dataclass(frozen=True)
class AgentEvent:
    """One streamed event of a turn (text, tool use, usage, ...)."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    duration_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "duration_ms": self.duration_ms,
        }


@dataclass
class TurnResult:
    ok: bool
    final_text: str = ""
    session_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    exit_code: int | None = None
    error: str | None = None
    interrupted: bool = False
    timed_out: bool = False
    events: list[AgentEvent] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "final_text": self.final_text[-4000:],
            "session_id": self.session_id,
            "usage": self.usage.to_dict(),
            "exit_code": self.exit_code,
            "error": self.error,
            "interrupted": self.interrupted,
            "timed_out": self.timed_out,
        }


EventSink = Callable[[AgentEvent], None]


class Session(Protocol):
    session_id: str | None
    """The native session id (known once ``open_session`` returns)."""

    def send(
        self, prompt: str, *, timeout: float, on_event: EventSink | None = None
    ) -> TurnResult: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...

    def alive(self) -> bool:
        """True while the session's process (if any) is running."""
        ...

    @property
    def pid(self) -> int | None: ...


@runtime_checkable
class Steerable(Protocol):
    """A session that can add a message to its running turn (Codex ``turn/steer``)."""

    def steer(self, text: str, timeout: float = 10.0) -> bool:
        """True only when the agent accepted ``text`` into the running turn."""
        ...


@dataclass(frozen=True)
class ProbeResult:
    kind: str
    found: bool
    path: str | None = None
    version: str | None = None
    handshake: bool | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "found": self.found,
            "path": self.path,
            "version": self.version,
            "handshake": self.handshake,
            "error": self.error,
        }


class Adapter(Protocol):
    kind: str

    def open_session(
        self,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
    ) -> Session: ...

    def probe(self, handshake: bool = False) -> ProbeResult: ...


class AdapterError(Exception):
    """An adapter could not start or talk to its agent (the message says why)."""


class ConfigurationError(AdapterError):
    """The agent cannot start until its configuration is repaired; ``fix`` says how."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix
