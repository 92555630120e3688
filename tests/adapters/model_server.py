"""A scripted model server for driving the real agent CLIs in tests.

It speaks three streaming wire formats on 127.0.0.1:

- Anthropic Messages (``POST /v1/messages``, used by Claude Code),
- OpenAI Responses (``POST /v1/responses``, used by Codex),
- OpenAI chat completions (``POST /v1/chat/completions``, used by Pi).

Each test gives it a script: a list of ``Reply`` objects, served in order, one per model
request. A reply is some text and/or tool calls; ``expect`` names strings that must appear
in the request (so a test can prove the model saw the earlier conversation); ``hang`` makes
the reply start streaming and then stall until the server is released (for interrupts);
``malformed`` sends a broken stream instead of the reply (``"truncated"``: the first events,
then the connection closes before the stream's end event; ``"garbage"``: an event whose
data is not JSON, then the connection closes).

Conversations that run at the same time (a worker and a reviewer) get their own scripts:
``add(..., route=MARKER)`` queues replies for the requests whose body contains ``MARKER``;
a request that contains no route's marker takes the next reply of the default script.

The server fails loudly: a request it has no reply for, an unknown path, or a request that
lacks an expected string is logged in ``errors`` and answered with HTTP 400 and a clear
message — a 400 is not retried by the CLIs, so a broken script does not look like a hang.
Tests assert ``server.errors == []``.

Claude Code also sends side requests that are not turns of the conversation (a session
title, a quota probe, ...); those are recognised by ``side_request`` and answered with a
short text without consuming the script.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ToolCall:
    name: str
    input: dict[str, Any] | str
    """A JSON object for function tools; a plain string for a freeform (custom) tool."""
    custom: bool = False
    """Responses API only: emit a ``custom_tool_call`` instead of a ``function_call``."""
    search: bool = False
    """Responses API only: a ``tool_search_call`` (Codex loads deferred tools, e.g. MCP)."""
    namespace: str = ""
    """Responses API only: the namespace of a deferred tool's ``function_call``."""


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    expect: tuple[str, ...] = ()
    hang: bool = False
    hold: bool = False
    """Wait for ``release()`` before answering; the reply then arrives whole (a slow model)."""
    malformed: str = ""
    """``"truncated"`` or ``"garbage"``: send a broken stream instead of this reply."""
    overloaded: bool = False
    """Answer HTTP 503 ``overloaded_error`` (a transient error a CLI may retry itself)."""
    input_tokens: int = 11
    output_tokens: int = 7


@dataclass
class Logged:
    path: str
    body: dict[str, Any]
    reply: int | None  # index into the script, None for side requests and errors
    side: bool = False
    route: str = ""

    @property
    def text(self) -> str:
        return json.dumps(self.body)

    def tool_outputs(self) -> list[str]:
        """What the CLI sent back as the results of tool calls (Anthropic ``tool_result``
        blocks, Responses ``function_call_output`` items, chat ``tool`` messages) — not its
        own instructions, which may describe approvals in general."""
        found: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                kind = node.get("type")
                if kind in TOOL_OUTPUT_TYPES or node.get("role") == "tool":
                    found.append(json.dumps(node.get("output", node.get("content"))))
                    return
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for item in node:
                    walk(item)

        walk(self.body)
        return found


TOOL_OUTPUT_TYPES = ("tool_result", "function_call_output", "custom_tool_call_output")


def side_request(path: str, body: dict[str, Any]) -> bool:
    """True for Claude Code requests that are not a conversation turn."""
    if not path.startswith("/v1/messages"):
        return False
    if path.startswith("/v1/messages/count_tokens"):
        return True
    return not body.get("tools")  # title / summary / quota probes carry no tools


class ModelServer:
    def __init__(self, script: Iterable[Reply] = ()) -> None:
        self.scripts: dict[str, list[Reply]] = {"": list(script)}
        self.cursors: dict[str, int] = {"": 0}
        self.log: list[Logged] = []
        self.errors: list[str] = []
        self.served = 0
        self.stalls = 0  # hang replies that have started stalling
        self.hanging = threading.Event()  # set while a hang reply is stalled
        self._release = threading.Event()
        self._lock = threading.Lock()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)

    @property
    def script(self) -> list[Reply]:
        return self.scripts[""]

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, *replies: Reply, route: str = "") -> None:
        """Queue replies on the default script, or on the script of requests naming ``route``."""
        with self._lock:
            self.scripts.setdefault(route, []).extend(replies)
            self.cursors.setdefault(route, 0)

    def release(self) -> None:
        """Let a stalled (hang) reply finish."""
        self._release.set()

    def turns(self, route: str | None = None) -> list[Logged]:
        """Requests answered from a script (all of them, or one route's)."""
        return [e for e in self.log if e.reply is not None and (route is None or e.route == route)]

    def pending(self, route: str = "") -> int:
        """Replies of a script not yet served."""
        with self._lock:
            return len(self.scripts.get(route, [])) - self.cursors.get(route, 0)

    def wait_hanging(self, timeout: float = 60.0, count: int = 1) -> bool:
        """Wait until ``count`` hang replies (in all) have started stalling."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.stalls >= count:
                    return True
            time.sleep(0.05)
        return False

    # -- request handling -------------------------------------------------------------------

    def take(self, path: str, body: dict[str, Any]) -> tuple[Reply | None, str | None]:
        with self._lock:
            if side_request(path, body):
                self.log.append(Logged(path, body, None, side=True))
                return Reply(text="Side reply"), None
            text = json.dumps(body)
            route = next((r for r in self.scripts if r and r in text), "")
            script, served = self.scripts[route], self.cursors[route]
            name = f"route {route!r}" if route else "the default script"
            if served >= len(script):
                msg = (
                    f"model server: unexpected request #{self.served + 1} to {path} "
                    f"({name}): the script has only {len(script)} replies"
                )
                self.errors.append(msg)
                self.log.append(Logged(path, body, None, route=route))
                return None, msg
            reply = script[served]
            missing = [s for s in reply.expect if s not in text]
            if missing:
                msg = (
                    f"model server: request #{self.served + 1} to {path} ({name}, reply "
                    f"{served + 1}) lacks expected text {missing!r}"
                )
                self.errors.append(msg)
                self.log.append(Logged(path, body, None, route=route))
                return None, msg
            self.log.append(Logged(path, body, served, route=route))
            self.cursors[route] = served + 1
            self.served += 1
            return reply, None

    def stall(self) -> None:
        with self._lock:
            self.stalls += 1
        self.hanging.set()
        self._release.wait(120)


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            msg = f"model server: unexpected GET {self.path}"
            server.errors.append(msg)
            self._error(404, msg)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                msg = f"model server: request to {self.path} is not JSON"
                server.errors.append(msg)
                self._error(400, msg)
                return
            path = self.path
            if path.startswith("/v1/messages"):
                wire = "anthropic"
            elif path.startswith("/v1/responses"):
                wire = "responses"
            elif path.startswith("/v1/chat/completions"):
                wire = "chat"
            else:
                msg = f"model server: unexpected POST {path}"
                server.errors.append(msg)
                self._error(404, msg)
                return
            if path.startswith("/v1/messages/count_tokens"):
                server.log.append(Logged(path, body, None, side=True))
                self._json({"input_tokens": 10})
                return
            reply, err = server.take(path, body)
            if reply is None:
                self._error(400, err or "no reply")
                return
            if reply.overloaded:
                self._error(503, "Overloaded", kind="overloaded_error")
                return
            if reply.hold:
                server.stall()
            model = str(body.get("model") or "test-model")
            if wire == "anthropic" and not body.get("stream"):
                if reply.malformed:
                    self._broken_json(anthropic_message(reply, model), reply.malformed)
                    return
                self._json(anthropic_message(reply, model))
                return
            events = {
                "anthropic": anthropic_events,
                "responses": responses_events,
                "chat": chat_events,
            }[wire](reply, model)
            if reply.malformed:
                self._broken(events, reply.malformed)
                return
            self._stream(events, reply.hang)

        def _json(self, data: dict[str, Any]) -> None:
            payload = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
            payload = json.dumps(
                {"type": "error", "error": {"type": kind, "message": message, "code": kind}}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("x-should-retry", "false")
            self.end_headers()
            self.wfile.write(payload)

        def _broken_json(self, data: dict[str, Any], how: str) -> None:
            """A JSON body that breaks off (truncated) or is not JSON (garbage)."""
            payload = json.dumps(data).encode()
            broken = payload[: len(payload) // 2]
            if how == "garbage":
                broken = b"<html>502 Bad Gateway" + broken
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(broken)))
            self.end_headers()
            self.wfile.write(broken)

        def _broken(self, events: Iterator[tuple[str | None, str]], how: str) -> None:
            """A stream that breaks off: some events, then (garbage) a non-JSON event, then
            the connection closes without the stream's end event."""
            if how not in ("truncated", "garbage"):
                msg = f"model server: unknown malformed mode {how!r}"
                server.errors.append(msg)
                self._error(500, msg)
                return
            every = list(events)
            head = every[: max(1, min(2, len(every) - 2))]  # never the stream's end event
            if how == "garbage":
                head.append((head[-1][0], '{"type": "content_block_delta", "delta": {"te'))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for name, data in head:
                    chunk = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
                    self.wfile.write(chunk.encode())
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return

        def _stream(self, events: Iterator[tuple[str | None, str]], hang: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for i, (name, data) in enumerate(events):
                    chunk = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
                    self.wfile.write(chunk.encode())
                    self.wfile.flush()
                    if hang and i == 0:
                        server.stall()
                        return
            except (BrokenPipeError, ConnectionResetError):
                return

    return Handler


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:20]


def _args(call: ToolCall) -> str:
    return call.input if isinstance(call.input, str) else json.dumps(call.input)


# -- Anthropic Messages -----------------------------------------------------------------------


def anthropic_message(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        content.append(
            {"type": "tool_use", "id": _id("toolu_"), "name": call.name, "input": call.input}
        )
    return {
        "id": _id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


def anthropic_events(reply: Reply, model: str) -> Iterator[tuple[str | None, str]]:
    def ev(data: dict[str, Any]) -> tuple[str, str]:
        return str(data["type"]), json.dumps(data)

    yield ev(
        {
            "type": "message_start",
            "message": {
                "id": _id("msg_"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": reply.input_tokens,
                    "output_tokens": 1,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            },
        }
    )
    index = 0
    if reply.text:
        yield ev(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
        )
        yield ev(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": reply.text},
            }
        )
        yield ev({"type": "content_block_stop", "index": index})
        index += 1
    for call in reply.tool_calls:
        yield ev(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {
                    "type": "tool_use",
                    "id": _id("toolu_"),
                    "name": call.name,
                    "input": {},
                },
            }
        )
        yield ev(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": _args(call)},
            }
        )
        yield ev({"type": "content_block_stop", "index": index})
        index += 1
    yield ev(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
                "stop_sequence": None,
            },
            "usage": {"output_tokens": reply.output_tokens},
        }
    )
    yield ev({"type": "message_stop"})


# -- OpenAI Responses ---------------------------------------------------------------------------


def responses_events(reply: Reply, model: str) -> Iterator[tuple[str | None, str]]:
    rid = _id("resp_")
    created = int(time.time())
    seq = iter(range(1_000_000))

    def ev(data: dict[str, Any]) -> tuple[str, str]:
        data["sequence_number"] = next(seq)
        return str(data["type"]), json.dumps(data)

    base = {
        "id": rid,
        "object": "response",
        "created_at": created,
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    yield ev({"type": "response.created", "response": base})
    output: list[dict[str, Any]] = []
    if reply.text:
        mid = _id("msg_")
        idx = len(output)
        yield ev(
            {
                "type": "response.output_item.added",
                "output_index": idx,
                "item": {
                    "type": "message",
                    "id": mid,
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                },
            }
        )
        yield ev(
            {
                "type": "response.content_part.added",
                "item_id": mid,
                "output_index": idx,
                "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []},
            }
        )
        yield ev(
            {
                "type": "response.output_text.delta",
                "item_id": mid,
                "output_index": idx,
                "content_index": 0,
                "delta": reply.text,
            }
        )
        yield ev(
            {
                "type": "response.output_text.done",
                "item_id": mid,
                "output_index": idx,
                "content_index": 0,
                "text": reply.text,
            }
        )
        item = {
            "type": "message",
            "id": mid,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
        yield ev({"type": "response.output_item.done", "output_index": idx, "item": item})
        output.append(item)
    for call in reply.tool_calls:
        idx = len(output)
        call_id = _id("call_")
        if call.search:
            assert isinstance(call.input, dict)
            item = {
                "type": "tool_search_call",
                "id": _id("tsc_"),
                "call_id": call_id,
                "execution": "client",
                "arguments": call.input,
                "status": "completed",
            }
        elif call.custom:
            item = {
                "type": "custom_tool_call",
                "id": _id("ctc_"),
                "call_id": call_id,
                "name": call.name,
                "input": _args(call),
                "status": "completed",
            }
        else:
            item = {
                "type": "function_call",
                "id": _id("fc_"),
                "call_id": call_id,
                "name": call.name,
                "arguments": _args(call),
                "status": "completed",
            }
            if call.namespace:
                item["namespace"] = call.namespace
        yield ev({"type": "response.output_item.added", "output_index": idx, "item": item})
        yield ev({"type": "response.output_item.done", "output_index": idx, "item": item})
        output.append(item)
    usage = {
        "input_tokens": reply.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }
    yield ev(
        {
            "type": "response.completed",
            "response": {**base, "status": "completed", "output": output, "usage": usage},
        }
    )


# -- OpenAI chat completions --------------------------------------------------------------------


def chat_events(reply: Reply, model: str) -> Iterator[tuple[str | None, str]]:
    cid = _id("chatcmpl-")
    created = int(time.time())

    def chunk(
        delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None
    ) -> tuple[None, str]:
        data: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage is not None:
            data["usage"] = usage
        return None, json.dumps(data)

    yield chunk({"role": "assistant", "content": ""})
    if reply.text:
        yield chunk({"content": reply.text})
    for i, call in enumerate(reply.tool_calls):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": _id("call_"),
                        "type": "function",
                        "function": {"name": call.name, "arguments": _args(call)},
                    }
                ]
            }
        )
    usage = {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }
    yield chunk({}, "tool_calls" if reply.tool_calls else "stop", usage)
    yield None, "[DONE]"
