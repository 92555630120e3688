"""The Codex adapter: ``codex app-server`` over stdio JSON-RPC, one thread per session.

Protocol (checked against ``codex app-server generate-json-schema`` of codex-cli 0.171):
``initialize`` → ``initialized`` → ``thread/start`` (or ``thread/resume`` with a stored
thread id) with ``cwd``, ``sandbox`` and ``approvalPolicy``; each turn is ``turn/start``
followed by notifications (``item/*``, ``thread/tokenUsage/updated``) until
``turn/completed``, whose ``turn.status`` is ``completed``, ``interrupted`` or ``failed``.
``turn/interrupt`` stops a running turn. The thread id is the session id; it is known when
``thread/start`` answers, before the first turn.

The permission boundary: every turn runs in the ``workspace-write`` sandbox (the lane, the
repository's git directory, the lane's own git directory and the SQLite board's directory
are writable) with the ``untrusted`` approval policy, and the adapter itself answers each
approval request from the role's tool set — file changes only for the worker lane, shell commands only when every
part of them starts with one of the role's commands (``lb``, ``git``, the checks). Nothing
waits for a human. ``allow_all_tools`` switches to ``danger-full-access`` with approvals
``never``.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from laneboard.agents.base import AdapterError, EventSink, ProbeResult, TurnResult
from laneboard.agents.jsonlines import TurnDriver, TurnParser, tail
from laneboard.agents.mcp_config import McpServer
from laneboard.agents.permissions import (
    ToolPolicy,
    allow_all_reason,
    command_allowed,
    policy_for,
    unwrap_shell,
)
from laneboard.agents.procs import LineProcess
from laneboard.agents.sandbox import Sandbox
from laneboard.domain.roles import Role

KIND = "codex"
RPC_TIMEOUT_S = 60.0
MCP_STARTUP_S = 60.0  # how long a new session waits for its MCP servers to start


class CodexParser(TurnParser):
    kind = KIND

    def __init__(self, on_event: EventSink | None = None, request_id: int = 0) -> None:
        super().__init__(on_event)
        self.request_id = request_id
        self.turn_id: str | None = None
        self.turn_started = threading.Event()

    def feed(self, obj: dict[str, Any]) -> None:
        if "id" in obj and "method" not in obj:
            if obj.get("id") != self.request_id:
                return
            if "error" in obj:
                err = obj.get("error") or {}
                self.fail(f"codex refused turn/start: {err.get('message', err)}")
                self.done = True
                return
            turn = (obj.get("result") or {}).get("turn") or {}
            self._set_turn(turn.get("id"))
            return
        method = obj.get("method")
        params = _dict(obj.get("params"))
        if method == "turn/started":
            self._set_turn((params.get("turn") or {}).get("id"))
        elif method == "item/agentMessage/delta":
            self.emit("text_delta", text=params.get("delta", ""))
        elif method == "item/completed":
            self._item(params.get("item") or {})
        elif method == "thread/tokenUsage/updated":
            last = (params.get("tokenUsage") or {}).get("last") or {}
            self.usage.input_tokens += int(last.get("inputTokens") or 0)
            self.usage.output_tokens += int(last.get("outputTokens") or 0)
        elif method == "error":
            err = params.get("error") or {}
            if not params.get("willRetry"):
                self.fail(f"codex error: {err.get('message', err)}")
        elif method == "turn/completed":
            self._completed(params.get("turn") or {})

    def _set_turn(self, turn_id: Any) -> None:
        if isinstance(turn_id, str) and turn_id:
            self.turn_id = turn_id
            self.turn_started.set()

    def _item(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "agentMessage":
            text = str(item.get("text") or "")
            self.text_parts.append(text)
            self.final_text = text
            self.emit("text", text=text)
        elif kind == "commandExecution":
            self.emit(
                "command",
                command=item.get("command"),
                status=item.get("status"),
                exit_code=item.get("exitCode"),
            )
        elif kind == "fileChange":
            self.emit(
                "file_change",
                status=item.get("status"),
                paths=[c.get("path") for c in item.get("changes") or [] if isinstance(c, dict)],
            )
        elif kind in ("mcpToolCall", "dynamicToolCall", "webSearch"):
            self.emit("tool_use", name=kind, status=item.get("status"))

    def _completed(self, turn: dict[str, Any]) -> None:
        self.done = True
        status = turn.get("status")
        if isinstance(turn.get("durationMs"), int):
            self.usage.duration_ms = turn["durationMs"]
        if status == "interrupted":
            self.interrupted = True
        elif status != "completed":
            err = turn.get("error") or {}
            self.fail(f"codex turn {status}: {err.get('message', 'no reason given')}")
        self.emit("result", status=status, usage=self.usage.to_dict())


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def approval_decision(method: str, params: dict[str, Any], policy: ToolPolicy) -> tuple[bool, str]:
    """Whether the role may do what an approval request asks (and why not)."""
    if policy.allow_all:
        return True, ""
    if method in ("item/fileChange/requestApproval", "applyPatchApproval"):
        return (True, "") if policy.edit else (False, "this role may not edit files")
    if method in ("item/commandExecution/requestApproval", "execCommandApproval"):
        command = params.get("command")
        if isinstance(command, list):
            command = " ".join(str(c) for c in command)
        return command_allowed(unwrap_shell(str(command or "")), policy.commands)
    return False, f"{method} is not allowed for this role"


def git_dirs(cwd: str) -> list[str]:
    """The repository's git directory and, in a lane (a linked worktree), the lane's own.

    Codex's sandbox keeps the git directory a worktree's ``.git`` file points to read-only
    even under a writable repository git directory, so it is named as a root of its own:
    without it ``git add`` in the lane, and so a delivery's commit, fails.
    """
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir", "--git-dir"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return list(dict.fromkeys(line.strip() for line in out.stdout.splitlines() if line.strip()))


class CodexSession:
    def __init__(
        self,
        adapter: CodexAdapter,
        cwd: str,
        session_id: str | None,
        role: Role,
        env: Mapping[str, str],
        sandbox: Sandbox | None = None,
        mcp: Sequence[McpServer] = (),
    ) -> None:
        from laneboard.agents.roles import render_role

        self.adapter = adapter
        self.cwd = cwd
        self.mcp_tools = {(m.name, t) for m in mcp for t in m.tools}
        self.mcp_status: dict[str, str] = {}  # server -> starting | ready | failed | ...
        self.mcp_errors: dict[str, str] = {}
        self.policy = policy_for(KIND, role, adapter.config)
        self.stderr_path = adapter.stderr_path(env, session_id)
        argv = [adapter.binary(), "app-server"]
        argv += [str(a) for a in adapter.config.get("args") or ()]
        try:
            self.proc = LineProcess(
                argv, cwd=cwd, env=env, stderr_path=self.stderr_path, sandbox=sandbox
            )
        except OSError as exc:
            raise AdapterError(f"codex could not start: {exc}") from None
        self._write_lock = threading.Lock()
        self._turn_lock = threading.Lock()
        self._next_id = 0
        self._parser: CodexParser | None = None
        self._driver: TurnDriver | None = None
        self._pending_interrupt = False
        self._steers: dict[int, list[Any]] = {}  # steer request id -> [answered, accepted]
        self._steer_answered = threading.Condition()
        roots = [
            r
            for r in [*git_dirs(cwd), *[str(p) for p in adapter.config.get("writable_roots") or ()]]
            if r
        ]
        # the session reaches the board only through LANEBOARD_URL (the supervisor's unix
        # socket): Codex's Linux sandbox refuses even an AF_UNIX connect without network
        network = bool(adapter.config.get("network_access")) or bool(env.get("LANEBOARD_URL"))
        if self.policy.allow_all:
            self.sandbox_mode, self.approval = "danger-full-access", "never"
            self.sandbox_policy: dict[str, Any] = {"type": "dangerFullAccess"}
        else:
            self.sandbox_mode, self.approval = "workspace-write", "untrusted"
            self.sandbox_policy = {
                "type": "workspaceWrite",
                "writableRoots": roots,
                "networkAccess": network,
            }
        try:
            self._call("initialize", {"clientInfo": {"name": "laneboard", "version": "1"}})
            self._notify("initialized")
            config: dict[str, Any] = {
                # a login shell would reset PATH from /etc/profile and lose `lb`
                "allow_login_shell": bool(adapter.config.get("login_shell", False)),
            }
            for server in mcp:  # laneboard's own MCP server (``mcp_config``)
                config.update(server.codex_override())
            params: dict[str, Any] = {
                "cwd": cwd,
                "sandbox": self.sandbox_mode,
                "approvalPolicy": self.approval,
                "config": config,
            }
            instructions = render_role(role)
            if instructions:
                params["developerInstructions"] = instructions
            if adapter.config.get("model"):
                params["model"] = str(adapter.config["model"])
            if session_id:
                result = self._call("thread/resume", {"threadId": session_id, **params})
            else:
                result = self._call("thread/start", params)
        except AdapterError:
            self.proc.kill()
            self.proc.close()
            raise
        thread = result.get("thread") or {}
        self.session_id: str | None = thread.get("id") or session_id
        if not self.session_id:
            self.close()
            raise AdapterError("codex did not return a thread id")
        # a turn does not wait for MCP servers still starting: its tool search would find
        # none of their tools, so the first turn waits for them here
        self._await_mcp([m.name for m in mcp], MCP_STARTUP_S)

    # -- JSON-RPC plumbing ---------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.alive()

    def _write(self, obj: dict[str, Any]) -> None:
        with self._write_lock:
            self.proc.write_json(obj)

    def _notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self._write(msg)

    def _request(self, method: str, params: dict[str, Any]) -> int:
        with self._write_lock:  # ``steer`` comes from another thread than the turn's
            self._next_id += 1
            rid = self._next_id
            self.proc.write_json({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request outside a turn: wait for its answer, handling what arrives meanwhile."""
        rid = self._request(method, params)
        deadline = time.monotonic() + RPC_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AdapterError(f"codex did not answer {method} within {RPC_TIMEOUT_S:.0f} s")
            try:
                raw = self.proc.lines.get(timeout=left)
            except queue.Empty:
                continue
            if raw is None:
                self.proc.lines.put(None)
                raise AdapterError(
                    f"codex exited during {method} (exit code "
                    f"{self.proc.proc.poll()}); stderr: {tail(self.stderr_path)}"
                )
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(obj, dict) or self._on_message(obj):
                continue
            if obj.get("id") == rid and "method" not in obj:
                if "error" in obj:
                    err = obj.get("error") or {}
                    raise AdapterError(f"codex refused {method}: {err.get('message', err)}")
                result = obj.get("result")
                return result if isinstance(result, dict) else {}

    def _await_mcp(self, names: list[str], timeout: float) -> None:
        """Until each named MCP server has started (or failed), or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while any(self.mcp_status.get(n, "starting") == "starting" for n in names):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                raw = self.proc.lines.get(timeout=left)
            except queue.Empty:
                continue
            if raw is None:
                self.proc.lines.put(None)
                return
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                self._on_message(obj)

    def _on_message(self, obj: dict[str, Any]) -> bool:
        """Answers server requests (approvals); True when the message was consumed."""
        if "method" not in obj and "id" in obj:
            with self._steer_answered:  # held by ``steer`` until it waits: no lost answer
                if obj["id"] in self._steers:
                    self._steers[obj["id"]] = [True, "error" not in obj]
                    self._steer_answered.notify_all()
                    return True
        if "method" in obj and "id" in obj:
            method = str(obj["method"])
            params = _dict(obj.get("params"))
            if method.endswith("requestApproval") or method in (
                "applyPatchApproval",
                "execCommandApproval",
            ):
                ok, why = approval_decision(method, params, self.policy)
                legacy = method in ("applyPatchApproval", "execCommandApproval")
                decision = (
                    ("approved" if ok else "denied") if legacy else ("accept" if ok else "decline")
                )
                if not ok:  # before the decline, so the reason is in the model's next request
                    self._tell_refusal(method, params, why)
                if method == "item/permissions/requestApproval":
                    self._write(
                        {
                            "jsonrpc": "2.0",
                            "id": obj["id"],
                            "error": {
                                "code": -32000,
                                "message": "laneboard does not grant extra permissions",
                            },
                        }
                    )
                else:
                    self._write(
                        {"jsonrpc": "2.0", "id": obj["id"], "result": {"decision": decision}}
                    )
                if self._parser is not None:
                    self._parser.emit(
                        "approval",
                        method=method,
                        allowed=ok,
                        reason=why,
                        command=params.get("command"),
                    )

            else:
                self._write(
                    {
                        "jsonrpc": "2.0",
                        "id": obj["id"],
                        "error": {"code": -32601, "message": f"laneboard does not handle {method}"},
                    }
                )
            return True
        if obj.get("method") == "mcpServer/startupStatus/updated":
            self._mcp_status(_dict(obj.get("params")))
            return True
        if obj.get("method") == "turn/started" and self._pending_interrupt:
            parser = self._parser
            if parser is not None:
                parser.feed(obj)
            self._pending_interrupt = False
            self._send_interrupt()
            return True
        return False

    def _mcp_status(self, params: dict[str, Any]) -> None:
        """An MCP server's startup status: a failure is kept (``mcp_errors``), written to
        the session's stderr log and, during a turn, recorded as an event of it."""
        name, status = str(params.get("name") or ""), str(params.get("status") or "")
        self.mcp_status[name] = status
        if status != "failed":
            return
        error = str(params.get("error") or "no reason given")
        self.mcp_errors[name] = error
        # the stderr file is a courtesy copy: the error itself is kept in mcp_errors
        with contextlib.suppress(OSError), open(self.stderr_path, "a", encoding="utf-8") as fh:
            fh.write(f"laneboard: MCP server {name} failed to start: {error}\n")
        if self._parser is not None:
            self._parser.emit("mcp_failed", server=name, error=error)

    # -- turns ---------------------------------------------------------------------------------

    def _send_interrupt(self) -> None:
        parser = self._parser
        if parser is None:
            return
        if parser.turn_id is None:
            self._pending_interrupt = True
            return
        self._request("turn/interrupt", {"threadId": self.session_id, "turnId": parser.turn_id})

    def _tell_refusal(self, method: str, params: dict[str, Any], why: str) -> None:
        """A declined approval reaches the model only as "rejected": the reason goes to
        it too, as a steer of the running turn (``turn/steer``)."""
        what = params.get("command")
        if isinstance(what, list):
            what = " ".join(str(c) for c in what)
        subject = f"the command `{what}`" if what else "a file change"
        if method == "item/permissions/requestApproval":
            subject, why = "extra permissions", "laneboard does not grant extra permissions"
        self._send_steer(f"laneboard refused {subject}: {why or 'not allowed for this role'}.")

    def _send_steer(self, text: str) -> int | None:
        """Send ``turn/steer`` into the running turn; its request id, or ``None`` when no
        turn is running (or its id is not known yet)."""
        parser = self._parser
        if parser is None or parser.turn_id is None or parser.done:
            return None
        return self._request(
            "turn/steer",
            {
                "threadId": self.session_id,
                "expectedTurnId": parser.turn_id,
                "input": [{"type": "text", "text": text}],
            },
        )

    def steer(self, text: str, timeout: float = 10.0) -> bool:
        """Add ``text`` to the running turn (the model reads it in its next request); True
        only when Codex accepted it — False when no turn is running, it refused (the turn
        ended meanwhile) or did not answer in time, so the caller can queue it instead."""
        with self._steer_answered:
            try:
                rid = self._send_steer(text)
            except (OSError, ValueError):
                return False
            if rid is None:
                return False
            self._steers[rid] = [False, False]
            answered = self._steer_answered.wait_for(lambda: self._steers[rid][0], timeout)
            accepted = bool(answered and self._steers[rid][1])
            del self._steers[rid]
        return accepted

    def send(self, prompt: str, *, timeout: float, on_event: EventSink | None = None) -> TurnResult:
        with self._turn_lock:
            if not self.proc.alive():
                parser = CodexParser(on_event)
                parser.end_of_stream(self.proc.proc.poll(), tail(self.stderr_path))
                return parser.result(exit_code=self.proc.proc.poll())
            with self._write_lock:
                self._next_id += 1
                rid = self._next_id
            parser = CodexParser(on_event, request_id=rid)
            parser.session_id = self.session_id
            self._parser = parser
            self._pending_interrupt = False
            try:
                self._write(
                    {
                        "jsonrpc": "2.0",
                        "id": rid,
                        "method": "turn/start",
                        "params": {
                            "threadId": self.session_id,
                            "input": [{"type": "text", "text": prompt}],
                            "cwd": self.cwd,
                            "approvalPolicy": self.approval,
                            "sandboxPolicy": self.sandbox_policy,
                        },
                    }
                )
            except (OSError, ValueError) as exc:
                parser.fail(f"codex stopped reading its input: {exc}")
                parser.done = True
                self._parser = None
                return parser.result(exit_code=self.proc.proc.poll())
            self._driver = TurnDriver(
                self.proc,
                parser,
                stderr_path=self.stderr_path,
                send_interrupt=self._send_interrupt,
                on_message=self._on_message,
            )
            try:
                return self._driver.run(timeout)
            finally:
                self._driver = None
                self._parser = None

    def interrupt(self) -> None:
        driver = self._driver
        if driver is not None:
            driver.interrupt_requested.set()

    def close(self) -> None:
        self.proc.close()


class CodexAdapter:
    kind = KIND
    mcp = True  # sessions take MCP servers (``open_session(..., mcp=...)``)

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
        mcp: Sequence[McpServer] = (),
    ) -> CodexSession:
        return CodexSession(self, cwd, session_id, role, env, sandbox, mcp)

    def probe(self, handshake: bool = False) -> ProbeResult:
        from laneboard.agents.discovery import probe

        return probe(KIND, self.config, handshake=handshake)
