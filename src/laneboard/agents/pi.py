"""The Pi adapter: one resident ``pi --mode rpc`` process per session.

A turn is one ``prompt`` command in and events until ``agent_end``; ``get_state`` gives the
session id as soon as the process is up (before the first turn); ``--session <id>`` resumes
a stored session; ``abort`` interrupts. Usage and cost are summed from the assistant
messages of the turn. An ``agent_end`` after a failed model request is not yet the end: Pi
retries a transient error itself (``auto_retry_start`` follows at once), so the turn goes on
until Pi's retry ends it, or fails when no retry starts within ``RETRY_GRACE_S``. Before a
prompt the session asks Pi whether it is still streaming (aborting and waiting if so): Pi is
never sent a prompt while it is still processing the last one.

The permission boundary: ``--tools`` names the role's tools (no ``edit``/``write`` outside
the worker lane) and a generated extension (``-e``) blocks every ``bash`` call whose command
does not start, in each of its parts, with one of the role's commands (``lb``, ``git``, the
checks). The guard reads shell text, so it is a best-effort boundary: the adapter logs that
once. ``allow_all_tools`` drops both.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

from laneboard.agents.base import AdapterError, EventSink, ProbeResult, TurnResult
from laneboard.agents.jsonlines import TurnDriver, TurnParser, tail
from laneboard.agents.permissions import (
    ToolPolicy,
    allow_all_reason,
    pi_tools,
    policy_for,
    warn_once,
)
from laneboard.agents.procs import LineProcess
from laneboard.agents.sandbox import Sandbox
from laneboard.domain.roles import Role

KIND = "pi"
RPC_TIMEOUT_S = 60.0
RETRY_GRACE_S = 1.5  # Pi announces its own retry right after the failed run's agent_end
IDLE_WAIT_S = 30.0  # how long a prompt waits for an aborted earlier run to stop


class PiParser(TurnParser):
    kind = KIND

    def __init__(self, on_event: EventSink | None = None, request_id: str = "") -> None:
        super().__init__(on_event)
        self.request_id = request_id
        self.model_error = ""  # the last assistant message's error, if it failed
        self.failed_end_at: float | None = None  # an agent_end after a failed request

    def idle(self) -> None:
        ended = self.failed_end_at
        if ended is not None and time.monotonic() - ended >= RETRY_GRACE_S:
            self.fail(f"pi model error: {self.model_error}")
            self._end()

    def feed(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if kind == "response":
            if obj.get("id") == self.request_id and not obj.get("success", False):
                self.fail(f"pi refused the prompt: {obj.get('error', 'no reason given')}")
                self.done = True
            return
        if kind == "message_update":
            delta = obj.get("assistantMessageEvent") or {}
            if delta.get("type") == "text_delta":
                self.emit("text_delta", text=delta.get("delta", ""))
        elif kind == "message_end":
            self._message(obj.get("message") or {})
        elif kind == "tool_execution_start":
            self.emit(
                "tool_use",
                name=obj.get("toolName"),
                input=obj.get("args"),
                id=obj.get("toolCallId"),
            )
        elif kind == "tool_execution_end":
            result = obj.get("result") or {}
            content = result.get("content") if isinstance(result, dict) else None
            text = " ".join(str(c.get("text", "")) for c in content or [] if isinstance(c, dict))
            self.emit(
                "tool_result",
                id=obj.get("toolCallId"),
                name=obj.get("toolName"),
                is_error=bool(obj.get("isError")),
                content=text[:1000],
            )
        elif kind == "extension_error":
            self.fail(f"pi extension error: {obj.get('error', obj)}")
        elif kind == "auto_retry_start":
            self.failed_end_at = None  # Pi retries: the turn goes on
            self.emit("retry", attempt=obj.get("attempt"), error=obj.get("errorMessage"))
        elif kind == "auto_retry_end" and obj.get("success") is False:
            self.fail(f"pi gave up retrying the model: {obj.get('finalError', 'unknown')}")
            self._end()
        elif kind == "agent_end":
            if self.model_error:
                self.failed_end_at = time.monotonic()  # unless Pi's own retry starts
            else:
                self._end()

    def _end(self) -> None:
        self.failed_end_at = None
        self.done = True
        self.emit("result", usage=self.usage.to_dict())

    def _message(self, msg: dict[str, Any]) -> None:
        if msg.get("role") != "assistant":
            return
        failed = msg.get("stopReason") == "error"
        self.model_error = str(msg.get("errorMessage") or "no reason given") if failed else ""
        usage = msg.get("usage") or {}
        self.usage.input_tokens += (
            int(usage.get("input") or 0)
            + int(usage.get("cacheRead") or 0)
            + int(usage.get("cacheWrite") or 0)
        )
        self.usage.output_tokens += int(usage.get("output") or 0)
        cost = (usage.get("cost") or {}).get("total")
        if isinstance(cost, int | float):
            self.usage.cost_usd = (self.usage.cost_usd or 0.0) + float(cost)
        text = "".join(
            str(b.get("text", ""))
            for b in msg.get("content") or []
            if isinstance(b, dict) and b.get("type") == "text"
        )
        if text:
            self.text_parts.append(text)
            self.final_text = text
            self.emit("text", text=text)
        stop = msg.get("stopReason")
        if stop == "aborted":
            self.interrupted = True
        elif stop == "error":  # a failure only if Pi does not retry it (``idle``)
            self.emit("model_error", message=self.model_error)


GUARD_JS = r"""// Generated by laneboard: the role's shell command list for this session.
const ALLOWED = __ALLOWED__;
const SEPS = new Set(["&&", "||", ";", "|", "&", "|&"]);

function tokens(cmd) {
  const out = []; let word = ""; let quote = null; let has = false;
  const flush = () => { if (has) out.push({ w: word }); word = ""; has = false; };
  for (let i = 0; i < cmd.length; i++) {
    const c = cmd[i];
    if (quote) {
      if (c === quote) quote = null;
      else if (c === "\\" && quote === '"' && i + 1 < cmd.length) word += cmd[++i];
      else word += c;
      continue;
    }
    if (c === "'" || c === '"') { quote = c; has = true; continue; }
    if (c === "\\" && i + 1 < cmd.length) { word += cmd[++i]; has = true; continue; }
    if (c === " " || c === "\t") { flush(); continue; }
    if (c === "\n") { flush(); out.push({ op: ";" }); continue; }
    if ("&|;<>(){}".includes(c)) {
      flush(); let op = c;
      while (i + 1 < cmd.length && "&|;<>".includes(cmd[i + 1])) op += cmd[++i];
      out.push({ op }); continue;
    }
    word += c; has = true;
  }
  if (quote) return null;
  flush();
  return out;
}

function check(cmd) {
  if (/`|\$\(|<\(|>\(/.test(cmd)) return "command substitution cannot be checked";
  const toks = tokens(cmd);
  if (toks === null) return "unbalanced quotes";
  const parts = []; let cur = [];
  for (let i = 0; i < toks.length; i++) {
    const t = toks[i];
    if (t.op === undefined) { cur.push(t.w); continue; }
    if (SEPS.has(t.op)) { if (cur.length) parts.push(cur); cur = []; continue; }
    if (/^[<>&]+$/.test(t.op) && /[<>]/.test(t.op)) {
      const next = toks[i + 1];
      const target = next && next.w !== undefined ? next.w : "";
      const dup = t.op.endsWith("&") && /^\d+$/.test(target);
      if (dup || (t.op.includes(">") && target === "/dev/null")) {
        if (cur.length && /^\d+$/.test(cur[cur.length - 1])) cur.pop();
        i++; continue;
      }
      return "redirects are not allowed for this role";
    }
    return "subshells and groups are not allowed for this role";
  }
  if (cur.length) parts.push(cur);
  if (!parts.length) return "empty command";
  for (let words of parts) {
    while (words.length && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0])) words = words.slice(1);
    if (!words.length) continue;
    const ok = ALLOWED.some((p) => p.length && p.every((w, k) => words[k] === w));
    if (!ok) return `'${words[0]}' is not in this role's command list (${ALLOWED.map((p) => p.join(" ")).join(", ")})`;
  }
  return null;
}

export default function (pi) {
  pi.on("tool_call", async (event) => {
    if (event.toolName !== "bash") return undefined;
    const why = check(String((event.input && event.input.command) || ""));
    if (why) return { block: true, reason: `laneboard: ${why}` };
    return undefined;
  });
}
"""


def guard_source(policy: ToolPolicy) -> str:
    allowed = [p.split() for p in policy.commands]
    return GUARD_JS.replace("__ALLOWED__", json.dumps(allowed))


class PiSession:
    def __init__(
        self,
        adapter: PiAdapter,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
    ) -> None:
        from laneboard.agents.roles import render_role

        self.adapter = adapter
        self.policy = policy_for(KIND, role, adapter.config)
        if sandbox is not None:
            sandbox.prepare()  # the guard goes where the sandboxed pi can read it
        self._tmp = tempfile.mkdtemp(prefix="lb-pi-", dir=sandbox.spec.tmp if sandbox else None)
        argv = [adapter.binary(), "--mode", "rpc", "--tools", ",".join(pi_tools(self.policy))]
        if not self.policy.allow_all:
            guard = os.path.join(self._tmp, "laneboard-guard.js")
            with open(guard, "w", encoding="utf-8") as fh:
                fh.write(guard_source(self.policy))
            argv += ["-e", sandbox.inside(guard) if sandbox else guard]
            warn_once(
                KIND,
                "the shell command list is checked by a tool_call guard that reads "
                "the command text; a script the role may run can still do more",
            )
        role_text = render_role(role)
        if role_text:
            argv += ["--append-system-prompt", role_text]
        if adapter.config.get("provider"):
            argv += ["--provider", str(adapter.config["provider"])]
        if adapter.config.get("model"):
            argv += ["--model", str(adapter.config["model"])]
        if session_id:
            argv += ["--session", session_id]
        argv += [str(a) for a in adapter.config.get("args") or ()]
        self.stderr_path = adapter.stderr_path(env, session_id)
        try:
            self.proc = LineProcess(
                argv, cwd=cwd, env=env, stderr_path=self.stderr_path, sandbox=sandbox
            )
        except OSError as exc:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise AdapterError(f"pi could not start: {exc}") from None
        self._write_lock = threading.Lock()
        self._turn_lock = threading.Lock()
        self._driver: TurnDriver | None = None
        self._seq = 0
        try:
            state = self._call({"type": "get_state"})
        except AdapterError:
            self.close()
            raise
        sid = state.get("sessionId")
        self.session_file = state.get("sessionFile")
        if (
            session_id
            and sid
            and not str(sid).startswith(session_id)
            and not session_id.startswith(str(sid))
        ):
            self.close()
            raise AdapterError(f"pi did not resume session {session_id} (it opened {sid})")
        self.session_id: str | None = str(sid) if sid else session_id
        if not self.session_id:
            self.close()
            raise AdapterError("pi did not report a session id")

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.alive()

    def _write(self, obj: dict[str, Any]) -> None:
        with self._write_lock:
            self.proc.write_json(obj)

    def _call(self, command: dict[str, Any]) -> dict[str, Any]:
        self._seq += 1
        rid = f"lb-{self._seq}"
        self._write({"id": rid, **command})
        deadline = time.monotonic() + RPC_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AdapterError(
                    f"pi did not answer {command['type']} within {RPC_TIMEOUT_S:.0f} s"
                )
            try:
                raw = self.proc.lines.get(timeout=left)
            except queue.Empty:
                continue
            if raw is None:
                self.proc.lines.put(None)
                raise AdapterError(
                    f"pi exited during {command['type']} (exit code "
                    f"{self.proc.proc.poll()}); stderr: {tail(self.stderr_path)}"
                )
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("type") == "response" and obj.get("id") == rid:
                if not obj.get("success"):
                    raise AdapterError(f"pi refused {command['type']}: {obj.get('error')}")
                data = obj.get("data")
                return data if isinstance(data, dict) else {}

    def _wait_idle(self) -> str:
        """Pi must not be sent a prompt while it still runs an earlier one (a run cut by a
        timeout, a retry of its own): abort it and wait. Returns why not, or ''."""
        if not self._call({"type": "get_state"}).get("isStreaming"):
            return ""
        self._write({"type": "abort"})
        deadline = time.monotonic() + IDLE_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if not self._call({"type": "get_state"}).get("isStreaming"):
                return ""
        return f"pi was still processing an earlier prompt {IDLE_WAIT_S:.0f} s after an abort"

    def _send_interrupt(self) -> None:
        self._write({"type": "abort"})

    def send(self, prompt: str, *, timeout: float, on_event: EventSink | None = None) -> TurnResult:
        with self._turn_lock:
            self._seq += 1
            parser = PiParser(on_event, request_id=f"lb-{self._seq}")
            parser.session_id = self.session_id
            if not self.proc.alive():
                parser.end_of_stream(self.proc.proc.poll(), tail(self.stderr_path))
                return parser.result(exit_code=self.proc.proc.poll())
            try:
                busy = self._wait_idle()
            except AdapterError as exc:
                busy = str(exc)
            if busy:
                parser.fail(busy)
                parser.done = True
                return parser.result(exit_code=self.proc.proc.poll())
            try:
                self._write({"id": parser.request_id, "type": "prompt", "message": prompt})
            except (OSError, ValueError) as exc:
                parser.fail(f"pi stopped reading its input: {exc}")
                parser.done = True
                return parser.result(exit_code=self.proc.proc.poll())
            self._driver = TurnDriver(
                self.proc, parser, stderr_path=self.stderr_path, send_interrupt=self._send_interrupt
            )
            try:
                return self._driver.run(timeout)
            finally:
                self._driver = None

    def interrupt(self) -> None:
        driver = self._driver
        if driver is not None:
            driver.interrupt_requested.set()

    def close(self) -> None:
        self.proc.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


class PiAdapter:
    kind = KIND

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        allow_all_reason(KIND, self.config)

    def binary(self) -> str:
        from laneboard.agents.discovery import require_binary

        return require_binary(KIND, self.config)

    def stderr_path(self, env: Mapping[str, str], session_id: str | None) -> str:
        from laneboard.agents.discovery import stderr_path

        return stderr_path(KIND, self.config, env, session_id)

    def open_session(
        self,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
    ) -> PiSession:
        return PiSession(self, cwd, session_id, role, env, sandbox)

    def probe(self, handshake: bool = False) -> ProbeResult:
        from laneboard.agents.discovery import probe

        return probe(KIND, self.config, handshake=handshake)
