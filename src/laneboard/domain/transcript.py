"""A turn's transcript: every agent kind's stream events in one shape.

The adapters read their agent's own protocol (Claude Code stream-json, Codex app-server
notifications, Pi rpc events, the scripted agent's lines, a command's output) into
``AgentEvent``s whose kinds and fields differ per agent. ``normalize`` maps each of them
to one ``Entry``: what a person reads in the live agent view, ``lb card transcript`` and
``GET /api/v1/cards/{ref}/transcript``.

Every entry has the same fields:

* ``type`` — ``prompt`` (what laneboard sent), ``message`` (the agent's words),
  ``tool_call`` (a tool with its arguments), ``tool_result`` (its bounded result),
  ``command`` (a shell command), ``lb`` (a call of ``lb``), ``file_edit`` (paths written),
  ``check`` (a check the runtime ran, with its log), ``error``, ``interrupt``, ``result``
  (the turn's end and usage), ``info`` (session start and other notices);
* ``text`` — the one line or paragraph shown (bounded);
* ``tool``, ``call_id``, ``args`` (JSON text, bounded), ``output`` (bounded),
  ``exit_code``, ``is_error``, ``paths``.

Streaming text deltas are not entries: the complete message follows them.
"""

from __future__ import annotations

import json
import re
from typing import Any

TYPES = (
    "prompt",
    "message",
    "tool_call",
    "tool_result",
    "command",
    "lb",
    "file_edit",
    "check",
    "error",
    "interrupt",
    "result",
    "info",
)
TEXT_LIMIT = 4000
ARGS_LIMIT = 2000
OUTPUT_LIMIT = 2000
PROMPT_LIMIT = 8000

Entry = dict[str, Any]

_LB_CALL = re.compile(r"(?:^|[\s;&|('\"/])lb\s+\S")
_EDIT_TOOLS = {"edit", "write", "multiedit", "notebookedit", "apply_patch", "str_replace"}
_SHELL_TOOLS = {"bash", "shell", "exec", "run_shell_command"}


def clip(text: Any, limit: int) -> str:
    s = text if isinstance(text, str) else "" if text is None else str(text)
    return s if len(s) <= limit else s[:limit] + f"… ({len(s) - limit} more characters)"


def entry(type_: str, text: Any = "", **fields: Any) -> Entry:
    """One entry, every field present (``None`` or empty when the event has none)."""
    if type_ not in TYPES:
        raise ValueError(f"unknown transcript entry type {type_!r}")
    args = fields.get("args")
    if args is not None and not isinstance(args, str):
        args = json.dumps(args, sort_keys=True, default=str)
    exit_code = fields.get("exit_code")
    return {
        "type": type_,
        "text": clip(text, PROMPT_LIMIT if type_ == "prompt" else TEXT_LIMIT),
        "tool": _str_or_none(fields.get("tool")),
        "call_id": _str_or_none(fields.get("call_id")),
        "args": clip(args, ARGS_LIMIT) if args is not None else None,
        "output": clip(fields["output"], OUTPUT_LIMIT) if fields.get("output") else None,
        "exit_code": exit_code if isinstance(exit_code, int) else None,
        "is_error": bool(fields.get("is_error")),
        "paths": [str(x) for x in fields.get("paths") or [] if x],
    }


def is_lb_call(command: str) -> bool:
    return bool(_LB_CALL.search(command))


def normalize(kind: str, event_kind: str, data: dict[str, Any]) -> Entry | None:
    """The entry for one adapter event, or ``None`` for what a transcript leaves out."""
    if event_kind in ("text_delta", "heartbeat"):
        return None
    if event_kind == "text":
        return entry("message", data.get("text", ""))
    if event_kind == "tool_use":
        return _tool_use(data)
    if event_kind == "tool_result":
        return entry(
            "tool_result",
            clip(data.get("content"), 200),
            tool=data.get("name"),
            call_id=data.get("id"),
            output=data.get("content"),
            is_error=data.get("is_error"),
        )
    if event_kind == "command":  # codex: a command execution item
        return _shell(str(data.get("command") or ""), data.get("exit_code"), data.get("output"))
    if event_kind == "file_change":
        paths = [p for p in data.get("paths") or [] if p]
        return entry("file_edit", ", ".join(map(str, paths)), paths=paths)
    if event_kind == "lb":  # scripted: one lb call
        args = [str(a) for a in data.get("args") or []]
        code = data.get("exit")
        return entry(
            "lb",
            "lb " + " ".join(args),
            exit_code=code,
            output=data.get("stderr") or None,
            is_error=isinstance(code, int) and code != 0,
        )
    if event_kind == "step":
        return _step(data)
    if event_kind == "answer":  # scripted: the answer its wait received
        return entry("info", f"question {data.get('outcome', '?')}: {data.get('answer') or ''}")
    if event_kind == "check":
        code = data.get("exit_code")
        return entry(
            "check",
            data.get("command", ""),
            exit_code=code,
            output=data.get("log"),
            is_error=isinstance(code, int) and code != 0,
        )
    if event_kind in ("error", "malformed"):
        return entry("error", data.get("message") or data.get("line") or "", is_error=True)
    if event_kind == "interrupt":
        return entry("interrupt", data.get("by") or "the turn was interrupted")
    if event_kind == "result":
        return _result(data)
    if event_kind == "init":
        model = data.get("model")
        return entry("info", f"{kind} session started" + (f" ({model})" if model else ""))
    return entry("info", f"{event_kind}: {clip(json.dumps(data, default=str), 300)}")


def _tool_use(data: dict[str, Any]) -> Entry:
    name = str(data.get("name") or "tool")
    raw = data.get("input")
    args: dict[str, Any] = raw if isinstance(raw, dict) else {}
    low = name.lower()
    if low in _SHELL_TOOLS and isinstance(args.get("command"), str):
        e = _shell(args["command"], None, None)
        return {**e, "tool": name, "call_id": _str_or_none(data.get("id")), "args": _json(raw)}
    if low in _EDIT_TOOLS:
        paths = [args.get(k) for k in ("file_path", "path", "notebook_path") if args.get(k)]
        return entry("file_edit", ", ".join(map(str, paths)) or name, tool=name,
                     call_id=data.get("id"), args=raw, paths=paths)  # fmt: skip
    status = data.get("status")
    return entry(
        "tool_call",
        name + (f" ({status})" if status else ""),
        tool=name,
        call_id=data.get("id"),
        args=raw,
    )


def _shell(command: str, exit_code: Any, output: Any) -> Entry:
    return entry(
        "lb" if is_lb_call(command) else "command",
        command,
        exit_code=exit_code,
        output=output,
        is_error=isinstance(exit_code, int) and exit_code != 0,
    )


def _step(data: dict[str, Any]) -> Entry | None:
    if "say" in data:
        return None  # the scripted agent reports what it says as a text event
    if "run" in data:
        return None  # the scripted agent reports the command it ran, with its exit code
    if "write" in data or "append" in data:
        path = data.get("write") or data.get("append")
        return entry("file_edit", str(path), paths=[path])
    if any(
        k in data for k in ("lb", "comment", "heartbeat", "report", "verdict", "deliver", "ask")
    ):
        return None  # each becomes an lb call, reported on its own
    what = ", ".join(f"{k}={v}" for k, v in sorted(data.items()))
    return entry("info", what)


def _result(data: dict[str, Any]) -> Entry:
    raw = data.get("usage")
    usage: dict[str, Any] = raw if isinstance(raw, dict) else {}
    parts = [f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens"]
    if isinstance(usage.get("cost_usd"), int | float):
        parts.append(f"${usage['cost_usd']:.4f}")
    status = data.get("subtype") or data.get("status") or data.get("outcome")
    text = f"turn ended{f' ({status})' if status else ''}: " + ", ".join(parts)
    return entry("result", text, args=usage or None, exit_code=data.get("exit_code"))


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _str_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)
