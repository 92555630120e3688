"""The supervisor's board socket: how the agent sessions it runs reach the board.

The pool hands each session ``LANEBOARD_URL=unix:<state>/run/board.sock`` and its card
token, never a database URL or path: the session's ``lb`` runs in remote mode and sends
every call here. The socket serves ``POST /api/v1/ops/<operation>`` (``ops.endpoint``)
with the standard library's threaded HTTP server; a call needs a bearer token (the
socket is the user's own, so a caller without one is refused rather than trusted). The
socket file is owner-only (0600) inside an owner-only directory (0700).

An agent is untrusted, so the socket bounds what one caller can hold: every process of
one sandbox (one PID namespace) is one caller, and a process outside any sandbox is one
by itself (``SO_PEERCRED``). A caller is served up to ``PER_CALLER`` connections at once,
the socket up to ``MAX_CONNECTIONS``; a connection beyond them is answered at once with a
503 that says nothing was written (its ``lb`` calls again) and closed, so a flood holds
neither threads nor files of the supervisor. A call must arrive whole (request line,
headers and body) within ``REQUEST_S`` seconds of its connection, however slowly it
trickles in.

A session cannot write its own token file (its directory is read-only in the sandbox),
so when a worker's re-claim renews its credential the socket keeps the new token in that
file itself and answers without it: the session's next ``lb`` reads it from the file.

One socket serves one board per process: it starts with the first session's environment
and stops with the pool.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Any

from laneboard.board.service import Board
from laneboard.errors import LaneboardError
from laneboard.ops import unix
from laneboard.ops.endpoint import PREFIX, answer, closing_answer, store_error
from laneboard.ops.validate import MAX_BODY

READ_TIMEOUT_S = 30.0  # for one read or one answer's send
REQUEST_S = 30.0  # for a whole call to arrive, from its connection on
PER_CALLER = 16  # connections one caller (a sandbox, or a process outside any) is served at once
MAX_CONNECTIONS = 512  # connections the socket serves at once, all callers together
REFUSALS_SAID_S = 60.0  # a caller's refusals are logged at most once in this long
_now = time.monotonic  # the socket's clock (a test moves it)
# what writing to a caller that closed its end raises
CALLER_GONE = (BrokenPipeError, ConnectionResetError)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 128  # a burst of agents' calls waits to be accepted, not refused
    board: Board
    state_dir: str  # the supervisor's, holding the sessions' token files

    def server_bind(self) -> None:
        unix.bind(self.socket, str(self.server_address))

    def server_activate(self) -> None:
        super().server_activate()
        self.callers: Counter[str] = Counter()
        self.serving = 0
        self.count_lock = threading.Lock()
        self.log: Any = None  # the supervisor's log (``LogFile``), for the refusals
        self.refusals: dict[str, tuple[float, int]] = {}  # caller -> (said at, refused since)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A call that failed past its own error handling: one line in the supervisor's
        log instead of a traceback on its standard error; a caller that left is no
        failure at all."""
        exc = sys.exc_info()[1]
        if isinstance(exc, CALLER_GONE):
            return
        if self.log is not None:
            self.log.error("board-socket", f"a call failed: {type(exc).__name__}: {exc}")
        else:
            super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own, if its caller's share and the
        socket's have room; else refuse it at once (``_turn_away``)."""
        caller, until = _caller(request), _now() + REQUEST_S
        with self.count_lock:
            full = self.serving >= MAX_CONNECTIONS
            room = not full and self.callers[caller] < PER_CALLER
            if room:
                self.serving += 1
                self.callers[caller] += 1
        if not room:
            self._say_refused(caller, full)
            _turn_away(request, full)
            self.shutdown_request(request)
            return
        worker = threading.Thread(
            target=self._serve, args=(request, client_address, caller, until), daemon=True
        )
        try:
            worker.start()
        except RuntimeError:  # no thread to be had: refused like a full socket
            self._release(caller)
            _turn_away(request, True)
            self.shutdown_request(request)

    def _say_refused(self, caller: str, full: bool) -> None:
        """Log a caller's refusals: its first at once, then at most one line each
        ``REFUSALS_SAID_S`` with how many there were since."""
        now = _now()
        with self.count_lock:
            said, since = self.refusals.pop(caller, (None, 0))
            since += 1
            if said is not None and now - said < REFUSALS_SAID_S:
                self.refusals[caller] = (said, since)
                return
            self.refusals[caller] = (now, 0)
            while len(self.refusals) > REFUSALS_KEPT:
                del self.refusals[next(iter(self.refusals))]
        if self.log is not None:
            why = (
                f"all the {MAX_CONNECTIONS} calls it serves at once are in use"
                if full
                else f"the caller's {PER_CALLER} calls at once are in use"
            )
            self.log.warn("board-socket", f"refused {since} connection(s): {why}", caller=caller)

    def _serve(self, request: Any, client_address: Any, caller: str, until: float) -> None:
        _call.until = until  # read by the handler's ``setup``
        try:
            self.process_request_thread(request, client_address)
        finally:
            self._release(caller)

    def _release(self, caller: str) -> None:
        with self.count_lock:
            self.serving -= 1
            self.callers[caller] -= 1
            if self.callers[caller] <= 0:
                del self.callers[caller]


_call = threading.local()  # the deadline of the call a serving thread reads


def _caller(sock: socket.socket) -> str:
    """Who is calling: the PID namespace of the peer's process (every process of one
    sandbox), or the process itself when it shares the supervisor's namespace; where the
    peer cannot be told (no ``SO_PEERCRED``), the connection alone."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", raw)[0]
    except (AttributeError, OSError, struct.error):
        return f"fd:{sock.fileno()}"
    try:
        space = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:  # gone already, or no /proc: the process alone
        return f"pid:{pid}"
    return f"pid:{pid}" if space == _own_space() else space


@functools.cache
def _own_space() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _turn_away(sock: socket.socket, full: bool) -> None:
    """Answer a connection beyond its caller's share (or the socket's, ``full``): a 503
    whose call was not run."""
    what = (
        f"all the {MAX_CONNECTIONS} calls it serves at once"
        if full
        else f"the {PER_CALLER} calls one caller may make at once"
    )
    err = LaneboardError(
        "STORE_UNAVAILABLE",
        f"the supervisor's socket is already serving {what}",
        "let one of them end; lb calls again by itself for up to LANEBOARD_RETRY_S seconds",
        nothing_written=True,
    )
    with contextlib.suppress(OSError):
        sock.setblocking(False)  # never wait on a caller that does not read
        sock.send(closing_answer("503 Service Unavailable", err))
        for _ in range(64):  # what the call sent so far is read and dropped: a socket
            if not sock.recv(65536):  # closed unread would reset the caller's read
                break


class _Deadline(io.RawIOBase):
    """A connection's reads, each bounded by what is left of the call's deadline."""

    def __init__(self, sock: socket.socket, until: float) -> None:
        self.sock, self.until = sock, until

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.until - _now()
        if left <= 0:
            raise TimeoutError("the call did not arrive whole in time")
        self.sock.settimeout(min(left, READ_TIMEOUT_S))
        return self.sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # read through the call's deadline instead
        self.rfile = io.BufferedReader(_Deadline(self.connection, _call.until))

    def address_string(self) -> str:
        return "unix"

    def log_message(self, format: str, *args: Any) -> None:  # the supervisor log is enough
        return

    def _send(
        self, status: int, doc: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        body = json.dumps(doc).encode()
        self.connection.settimeout(READ_TIMEOUT_S)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.close_connection = True
        # a caller that left before its answer (an agent killed mid-call) is told nothing
        with contextlib.suppress(*CALLER_GONE):
            self.end_headers()
            self.wfile.write(body)

    def _refuse(self, err: LaneboardError, headers: dict[str, str] | None = None) -> None:
        self._send(err.http_status, {"error": err.to_dict()}, headers)

    def _not_allowed(self, allow: str) -> None:
        doc = {"code": "METHOD_NOT_ALLOWED", "message": f"{self.command} is not allowed here"}
        self._send(405, {"error": doc}, {"Allow": allow})

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, {"status": "ok"})
        elif self.path.startswith(PREFIX):
            self._not_allowed("POST")
        else:
            self._refuse(_no_route())

    def do_POST(self) -> None:
        if not self.path.startswith(PREFIX):
            if self.path == "/healthz":
                self._not_allowed("GET")
            else:
                self._refuse(_no_route())
            return
        length = self.headers.get("Content-Length", "0")
        if not length.isdigit() or int(length) > MAX_BODY:
            self._refuse(LaneboardError("BAD_INPUT", "the call is too large", "send less"))
            return
        body = self.rfile.read(int(length))
        token = self._token()
        try:
            actor = self._actor(token)
        except LaneboardError as err:
            _note_refusal(token, err.code)  # the store's own refusal, when it was away
            challenge = err.code == "UNAUTHORIZED"  # a 503 asks for no credential
            self._refuse(
                err, {"WWW-Authenticate": 'Bearer realm="laneboard"'} if challenge else None
            )
            return
        except Exception as exc:  # the token's lookup found the database out of reach
            known = store_error(exc)
            if known is None:
                raise
            _note_refusal(token, known.code)
            self._refuse(known)
            return
        status, doc = answer(
            self.server.board, actor, self.path[len(PREFIX) :], body, dict(self.headers.items())
        )
        if status >= 500:
            _note_refusal(token, str(doc.get("error", {}).get("code", "")))
        if doc.get("token"):
            self._keep_token(actor, doc)
        self._send(status, doc)

    def _keep_token(self, actor: Any, doc: dict[str, Any]) -> None:
        """Write a renewed credential into the session's token file, not the answer.

        Only a re-claim of the credential's own card renews it; the answer is that card,
        whose ref names the session's token directory: no read of the store after the
        call, which a database gone out of reach right then would fail."""
        from laneboard.supervisor.sandboxing import token_path, write_token

        card = doc.get("result")
        if actor.card_id is None or not isinstance(card, dict) or card.get("id") != actor.card_id:
            return
        path = token_path(self.server.state_dir, str(card.get("ref")))
        if os.path.isfile(path):
            write_token(path, str(doc.pop("token")))

    def _token(self) -> str:
        """The call's bearer token ('' when it sent none)."""
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""

    def _actor(self, token: str) -> Any:
        from laneboard.board.tokens import Tokens

        if not token:
            raise LaneboardError(
                "UNAUTHORIZED",
                "the supervisor's socket needs a token",
                "run lb with LANEBOARD_TOKEN or LANEBOARD_TOKEN_FILE, or unset LANEBOARD_URL "
                "to use the database directly",
            )
        return Tokens(self.server.board.store).resolve(token)

    def _other(self) -> None:
        if self.path == "/healthz" or self.path.startswith(PREFIX):
            self._not_allowed("GET" if self.path == "/healthz" else "POST")
        else:
            self._refuse(_no_route())

    do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _other


def _no_route() -> LaneboardError:
    return LaneboardError("NOT_FOUND", "no such route", f"call {PREFIX}<operation>")


class BoardSocket:
    """A running socket server over one board."""

    def __init__(self, board: Board, path: str, state_dir: str, log: Any = None) -> None:
        self.board = board
        self.path = path
        directory = os.path.dirname(path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.server = _Server(path, _Handler)
        os.chmod(path, 0o600)
        self.server.board = board
        self.server.state_dir = state_dir
        self.server.log = log
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="board-socket", daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"unix:{self.path}"

    def serving(self) -> int:
        """Connections being served now (not counting those refused at once)."""
        with self.server.count_lock:
            return self.server.serving

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


_LIVE: dict[str, BoardSocket] = {}
_LOCK = threading.Lock()
# calls refused because the database was out of reach, by their token's digest: the pool
# asks at the end of each turn (``refused_calls``), so that a turn whose agent found the
# board away is not counted as the agent's failure; a token never asked about is dropped
# once ``REFUSALS_KEPT`` newer ones were noted
_REFUSED: dict[str, int] = {}
REFUSALS_KEPT = 4096


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _note_refusal(token: str, code: str) -> None:
    """Count a call made with ``token`` that was refused because the store was away."""
    if not token or code != "STORE_UNAVAILABLE":
        return
    key = _digest(token)
    with _LOCK:
        _REFUSED[key] = _REFUSED.pop(key, 0) + 1
        while len(_REFUSED) > REFUSALS_KEPT:
            del _REFUSED[next(iter(_REFUSED))]


def refused_calls(token: str) -> int:
    """How many calls made with ``token`` any board socket of this process refused because
    the database was out of reach (``STORE_UNAVAILABLE``); forgotten once read."""
    with _LOCK:
        return _REFUSED.pop(_digest(token), 0)


def _answers(path: str) -> bool:
    """Whether another process already serves ``path``."""
    try:
        unix.connect(path, 1.0).close()
    except OSError:
        return False
    return True


def serve(board: Board, state_dir: str, log: Any = None) -> BoardSocket:
    """The socket serving ``board`` under ``state_dir``, started on first use; ``log``
    (the supervisor's ``LogFile``) is told of the connections it refuses."""
    path = os.path.join(state_dir, "run", "board.sock")
    with _LOCK:
        live = _LIVE.get(path)
        if live is not None and live.board is board:
            return live
        if live is not None:  # a pool of this process that was never shut down
            live.close()
            del _LIVE[path]
        elif os.path.exists(path) and _answers(path):
            path = os.path.join(state_dir, "run", f"board-{os.getpid()}.sock")
        _LIVE[path] = live = BoardSocket(board, path, state_dir, log)
        return live


def stop(board: Board) -> None:
    """Stop the socket serving ``board``, if one runs (the pool is shutting down)."""
    with _LOCK:
        for path, live in list(_LIVE.items()):
            if live.board is board:
                del _LIVE[path]
                live.close()
