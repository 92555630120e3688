"""What the three resident adapters share: one turn read from a JSON-lines stream.

A ``TurnParser`` is a pure state machine: ``feed_line(raw)`` takes one line of the agent's
stdout and records events, text, usage and errors; ``done`` says the turn's end event
arrived. A malformed line does not stop the reading — the line is recorded as the turn's
error and the parser keeps its events, so nothing read so far is lost and the stream stays
in step with the agent (the next turn does not start inside this one's tail).

``drive_turn`` runs a parser against a live ``LineProcess`` with a deadline: at the deadline
it asks the session to interrupt, waits a grace period for the end event, and kills the
process if none comes. When the agent's own process is gone but the stream stays open (a
launcher killed while the agent it started lives on), what it started is stopped, so the
turn ends instead of waiting out its deadline. Unit tests feed recorded streams straight into the parsers.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from laneboard.agents.base import AgentEvent, EventSink, TurnResult, Usage
from laneboard.agents.procs import DroppedLine, LineProcess

INTERRUPT_GRACE_S = 15.0
ORPHAN_GRACE_S = 2.0  # the agent exited but its output is still open: stop what it started
MAX_EVENTS = 2000  # a turn keeps at most this many events (the oldest text deltas go first)


class TurnParser:
    """Base class: subclasses implement ``feed(obj)`` for one decoded JSON object."""

    kind = "agent"

    def __init__(self, on_event: EventSink | None = None) -> None:
        self.on_event = on_event
        self.events: list[AgentEvent] = []
        self.text_parts: list[str] = []
        self.final_text: str | None = None
        self.usage = Usage()
        self.errors: list[str] = []
        self.done = False
        self.ok = True
        self.interrupted = False
        self.session_id: str | None = None
        self.lines = 0

    # -- input ---------------------------------------------------------------------------------

    def idle(self) -> None:
        """Called while no line arrives: a parser waiting on time (not on a line) decides."""

    def feed_line(self, raw: str) -> None:
        if isinstance(raw, DroppedLine):  # too long to be read: the turn says so
            self.fail(f"from {self.kind}: {raw}")
            return
        line = raw.rstrip("\r\n")
        if not line.strip():
            return
        self.lines += 1
        try:
            obj = json.loads(line)
        except ValueError:
            self.fail(f"malformed line from {self.kind}: {_clip(line)}")
            return
        if not isinstance(obj, dict):
            self.fail(f"unexpected line from {self.kind} (not an object): {_clip(line)}")
            return
        self.feed(obj)

    def feed(self, obj: dict[str, Any]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def end_of_stream(self, exit_code: int | None, stderr_tail: str = "") -> None:
        """The agent's stdout closed before the turn ended."""
        if self.done:
            return
        msg = f"{self.kind} exited before the turn finished (exit code {exit_code})"
        if stderr_tail:
            msg += f"; stderr: {stderr_tail}"
        self.fail(msg)
        self.done = True

    # -- recording -------------------------------------------------------------------------------

    def emit(self, kind: str, **data: Any) -> None:
        ev = AgentEvent(kind, data)
        if len(self.events) >= MAX_EVENTS:
            for i, old in enumerate(self.events):
                if old.kind == "text_delta":
                    del self.events[i]
                    break
            else:
                del self.events[0]
        self.events.append(ev)
        if self.on_event is not None:
            try:
                self.on_event(ev)
            except Exception as exc:  # a broken sink must not break the turn
                self.errors.append(f"event sink failed: {exc}")

    def fail(self, message: str) -> None:
        self.ok = False
        self.errors.append(message)
        self.emit("error", message=message)

    def text(self) -> str:
        if self.final_text is not None:
            return self.final_text
        return "".join(self.text_parts)

    def result(self, *, exit_code: int | None = None, timed_out: bool = False) -> TurnResult:
        error = "; ".join(self.errors) if self.errors else None
        ok = self.ok and not self.interrupted and not timed_out and self.done
        if not self.done and error is None:
            error = f"{self.kind} turn did not finish"
        return TurnResult(
            ok=ok,
            final_text=self.text(),
            session_id=self.session_id,
            usage=self.usage,
            exit_code=exit_code,
            error=error,
            interrupted=self.interrupted or timed_out,
            timed_out=timed_out,
            events=list(self.events),
        )


def _clip(text: str, n: int = 200) -> str:
    return repr(text if len(text) <= n else text[:n] + "…")


def tail(path: str | None, n: int = 600) -> str:
    """The last ``n`` characters of a log file, on one line."""
    if not path or not os.path.exists(path):
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - n))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return " ".join(data.split())[-n:]


class TurnDriver:
    """Runs one turn of a parser against a process, with a deadline and interrupts."""

    def __init__(
        self,
        proc: LineProcess,
        parser: TurnParser,
        *,
        stderr_path: str | None,
        send_interrupt: Callable[[], None],
        on_message: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.proc = proc
        self.parser = parser
        self.stderr_path = stderr_path
        self.send_interrupt = send_interrupt
        self.on_message = on_message  # sees each decoded object first; True = consumed
        self.interrupt_requested = threading.Event()

    def run(self, timeout: float) -> TurnResult:
        start = time.monotonic()
        deadline = start + timeout
        timed_out = False
        interrupt_sent = False
        killed = False
        exited_at: float | None = None  # the agent's own process was first seen gone
        orphans_stopped = False
        while not self.parser.done:
            if self.interrupt_requested.is_set() and not interrupt_sent:
                interrupt_sent = True
                self._interrupt()
                deadline = min(deadline, time.monotonic() + INTERRUPT_GRACE_S)
            now = time.monotonic()
            if now >= deadline:
                if not interrupt_sent:
                    timed_out = True
                    interrupt_sent = True
                    self._interrupt()
                    deadline = now + INTERRUPT_GRACE_S
                    continue
                self.parser.fail(
                    f"{self.parser.kind} did not end the turn after an interrupt; "
                    "its process was stopped"
                )
                self.proc.kill()
                killed = True
                break
            try:
                raw = self.proc.lines.get(timeout=min(0.2, max(0.0, deadline - now)))
            except queue.Empty:
                self.parser.idle()
                if not orphans_stopped and not self.proc.alive():
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at >= ORPHAN_GRACE_S:
                        orphans_stopped = True
                        self.proc.kill_orphans()
                continue
            if raw is None:
                self.proc.lines.put(None)  # keep EOF visible to later turns
                try:
                    code = self.proc.proc.wait(timeout=5)
                except Exception:
                    code = None
                self.parser.end_of_stream(code, tail(self.stderr_path))
                break
            if self.on_message is not None and raw.strip():
                try:
                    obj = json.loads(raw)
                except ValueError:
                    obj = None
                if isinstance(obj, dict) and self.on_message(obj):
                    continue
            self.parser.feed_line(raw)
        if interrupt_sent and not timed_out:
            self.parser.interrupted = True
        result = self.parser.result(
            exit_code=self.proc.proc.poll() if (killed or not self.proc.alive()) else None,
            timed_out=timed_out,
        )
        result.usage.duration_ms = result.usage.duration_ms or int(
            (time.monotonic() - start) * 1000
        )
        return result

    def _interrupt(self) -> None:
        self.parser.emit("interrupt")
        try:
            self.send_interrupt()
        except (OSError, ValueError) as exc:
            self.parser.errors.append(f"interrupt could not be sent: {exc}")
