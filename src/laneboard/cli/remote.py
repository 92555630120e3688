"""Remote mode: with ``LANEBOARD_URL`` set, ``lb`` sends each operation to that board
instead of opening a database, and prints exactly what local mode prints.

``LANEBOARD_URL`` is ``http://HOST:PORT`` (``lb serve``) or ``unix:/PATH`` (the socket of a
supervisor, ``lb start``, given to the agent sessions it runs). The call is
``POST /api/v1/ops/<operation>`` with ``{"params": {...}}`` and the caller's token as a
bearer credential; the answer is ``{"result": ..., "notes": ..., "token": ...}`` or
``{"error": {code, message, fix}}``, which becomes the same ``LaneboardError`` local mode
raises. This module imports no database driver and nothing of the store (a plain HTTP/1.1
request over a socket; ``https://`` uses the standard library's client).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from typing import Any

from laneboard.cli.identity import keep_token, token_from_env
from laneboard.errors import CODES, LaneboardError
from laneboard.ops import unix
from laneboard.ops.spec import Op, Params

TIMEOUT_S = 900.0  # longer than the longest call (lb card wait holds up to 540 s)
FIX = "start it (lb serve, or lb start for the supervisor's socket) or fix LANEBOARD_URL"
RETRY_S = 30.0  # how long a call refused because the board is out of reach is made again
RETRY_ENV = "LANEBOARD_RETRY_S"
RETRY_MAX_S = 3600.0
FIRST_PAUSE_S, LONGEST_PAUSE_S = 0.25, 4.0


class Unreached(OSError):
    """The call never reached the board whole (no connection could be made, or the board
    closed it before taking all of it): it cannot have run."""


class Endpoint:
    """Where a board answers: a TCP host and port, or a unix socket path."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.unix: str | None = None
        self.host = "localhost"
        self.port = 0
        self.prefix = ""
        self.tls = False
        if url.startswith("unix:"):
            self.unix = url[len("unix:") :]
            if not self.unix.startswith("/"):
                raise _bad_url(url)
            return
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("http", "https") or not rest:
            raise _bad_url(url)
        self.tls = scheme == "https"
        netloc, _, path = rest.partition("/")
        self.prefix = "/" + path.rstrip("/") if path.strip("/") else ""
        if netloc.startswith("["):
            host, _, port = netloc[1:].partition("]")
            port = port.removeprefix(":")
        else:
            host, _, port = netloc.partition(":")
        if port and not port.isdigit():
            raise _bad_url(url)
        self.host = host or "localhost"
        self.port = int(port) if port else (443 if self.tls else 80)


def _bad_url(url: str) -> LaneboardError:
    return LaneboardError(
        "CONFIG_INVALID",
        f"LANEBOARD_URL={url[:120]!r} is not http://HOST:PORT or unix:/PATH",
        "set it to the address of lb serve, or unset it to use a local database",
    )


def request(
    ep: Endpoint, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    """One HTTP/1.1 exchange (``Connection: close``); the status and the body."""
    if ep.tls:
        return _https(ep, method, path, body, headers)
    try:
        if ep.unix is not None:
            sock = unix.connect(ep.unix, TIMEOUT_S)
            host = "localhost"
        else:
            sock = socket.create_connection((ep.host, ep.port), timeout=TIMEOUT_S)
            host = f"{ep.host}:{ep.port}"
    except OSError as exc:
        raise Unreached(exc.errno, _reason(exc)) from exc
    lines = [f"{method} {ep.prefix}{path} HTTP/1.1", f"Host: {host}", "Connection: close",
             f"Content-Length: {len(body)}"]  # fmt: skip
    lines += [f"{k}: {v}" for k, v in headers.items()]
    with sock:
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        except OSError as exc:  # the board closed before taking the whole call: not run
            answer = _received(sock)  # though it may have said why before it closed
            if answer is None:
                raise Unreached(exc.errno, _reason(exc)) from exc
            return _parse(answer)
        chunks: list[bytes] = []
        while True:
            try:
                got = sock.recv(65536)
            except OSError:  # the board closed, unread data left: its answer may be whole
                if _whole(b"".join(chunks)):
                    break
                raise
            if not got:
                break
            chunks.append(got)
    return _parse(b"".join(chunks))


def _received(sock: socket.socket) -> bytes | None:
    """A whole answer already waiting on ``sock``, if there is one."""
    chunks: list[bytes] = []
    # read until nothing more waits (EAGAIN) or the board's reset: either way, what came
    # before it is all the board said, and it is judged whole or not below
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        while got := sock.recv(65536):
            chunks.append(got)
    raw = b"".join(chunks)
    return raw if _whole(raw) else None


def _whole(raw: bytes) -> bool:
    """Whether ``raw`` is an HTTP answer with all of its ``Content-Length`` body."""
    split = _split(raw)
    if split is None:
        return False
    _, fields, body = split
    length = fields.get("content-length", "")
    return length.isdigit() and len(body) >= int(length)


def _parse(raw: bytes) -> tuple[int, bytes]:
    split = _split(raw)
    if split is None:
        raise OSError("the answer is not HTTP")
    status, fields, body = split
    if fields.get("transfer-encoding", "").lower() == "chunked":
        body = _unchunk(body)
    return status, body


def _split(raw: bytes) -> tuple[int, dict[str, str], bytes] | None:
    """An HTTP answer's status, header fields (lower-cased names) and body; None: not one."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2) if lines and sep else []
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(parts[1]), fields, body


def _unchunk(body: bytes) -> bytes:
    out = []
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out.append(rest[:size])
        body = rest[size + 2 :]
    return b"".join(out)


def _https(
    ep: Endpoint, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=TIMEOUT_S)
    try:
        conn.request(method, ep.prefix + path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class RemoteRunner:
    def __init__(self, url: str) -> None:
        self.url = url
        self.endpoint = Endpoint(url)

    def call(self, op: Op, params: Params) -> tuple[Any, dict[str, Any]]:
        """The call's result and notes. A call refused because the board is out of reach
        (``STORE_UNAVAILABLE``: the database away, the server not answering) is made again,
        with growing pauses, for up to ``LANEBOARD_RETRY_S`` seconds (default 30; 0: never),
        when that cannot write anything twice: a read, or a call that never reached the
        database (no connection to the board, or the board says ``nothing_written``)."""
        window = retry_window()
        deadline = time.monotonic() + window
        pause, told = FIRST_PAUSE_S, False
        while True:
            try:
                return self._call_once(op, params)
            except _Refused as refused:
                err, again = refused.error, op.read_only or refused.unsent
                left = deadline - time.monotonic()
                if not again or left <= 0:
                    raise err from None
                if not told:
                    told = True
                    print(f"lb: {err.message}; trying again for up to {window:g}s",
                          file=sys.stderr, flush=True)  # fmt: skip
                time.sleep(min(pause, left))
                pause = min(pause * 2, LONGEST_PAUSE_S)

    def _call_once(self, op: Op, params: Params) -> tuple[Any, dict[str, Any]]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        token = token_from_env()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        token_file = os.environ.get("LANEBOARD_TOKEN_FILE") or None
        if token_file:
            headers["X-Laneboard-Renew"] = "1"
        now = os.environ.get("LANEBOARD_NOW")
        if now:
            from laneboard.ops.clock import HEADER, pinned_ms

            headers[HEADER] = str(pinned_ms(now))
        body = json.dumps({"params": params}).encode()
        try:
            status, raw = request(self.endpoint, "POST", f"/api/v1/ops/{op.name}", body, headers)
        except OSError as exc:
            err = LaneboardError(
                "STORE_UNAVAILABLE", f"no board answers at {self.url} ({_reason(exc)})", FIX
            )
            raise _Refused(err, isinstance(exc, (Unreached, ConnectionRefusedError))) from None
        doc = _document(raw, status, self.url)
        if "error" in doc:
            err = _error(doc["error"], status)
            if status == 503 and err.code == "STORE_UNAVAILABLE":
                raise _Refused(err, err.details.get("nothing_written") is True)
            raise err
        if doc.get("token") and token_file:
            keep_token(token_file, str(doc["token"]))
        notes = doc.get("notes") or {}
        return doc.get("result"), notes if isinstance(notes, dict) else {}


class _Refused(Exception):
    """A call the board refused because it is out of reach; ``unsent``: nothing of it
    reached the database."""

    def __init__(self, error: LaneboardError, unsent: bool) -> None:
        super().__init__(error.message)
        self.error, self.unsent = error, unsent


def retry_window() -> float:
    """``LANEBOARD_RETRY_S``: seconds a refused call is made again for (0: never)."""
    raw = os.environ.get(RETRY_ENV, "").strip()
    if not raw:
        return RETRY_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= RETRY_MAX_S:  # also refuses nan
        raise LaneboardError(
            "CONFIG_INVALID",
            f"{RETRY_ENV}={raw[:40]!r} is not a number of seconds from 0 to {RETRY_MAX_S:g}",
            f"set it to how long lb tries again while the board is out of reach, e.g. "
            f"{RETRY_ENV}=30 (0: never)",
        )
    return value


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _document(raw: bytes, status: int, url: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or ("result" not in doc and "error" not in doc):
        if isinstance(doc, dict) and "code" in doc and "message" in doc:
            return {"error": doc}  # a refusal before the operation ran (e.g. a bad token)
        raise LaneboardError(
            "STORE_UNAVAILABLE", f"the board at {url} answered HTTP {status}, not an lb call", FIX
        )
    return doc


def _error(err: Any, status: int) -> LaneboardError:
    if not isinstance(err, dict):
        err = {}
    code = str(err.get("code") or "")
    message = str(err.get("message") or f"HTTP {status}")
    if code not in CODES:
        return LaneboardError("STORE_UNAVAILABLE", f"{code or 'error'}: {message}", FIX)
    details = err.get("details") if isinstance(err.get("details"), dict) else {}
    return LaneboardError(code, message, str(err.get("fix") or ""), **details)
