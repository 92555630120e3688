"""``lb serve``'s bounds on connections (``server.guard``): a flood of connections that
never finish a request neither exhausts the server's open files nor keeps a caller
waiting; a connection beyond the bound is answered 503 at once (nothing written) and a
remote ``lb`` calls again; a request must arrive whole within its time, an answer being
sent is never cut."""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from tests.server.conftest import Live, start_server, stop_server

from laneboard.cli.serve_cmds import listen
from laneboard.server import guard
from laneboard.store import open_store

PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: board\r\n"  # its head never ends


def _held(port: int, n: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """``n`` connections from ``source``, each with a request it never finishes."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
        s.sendall(PARTIAL)
        out.append(s)
    return out


def _answer(port: int, request: bytes, source: str = "127.0.0.1") -> tuple[int, bytes]:
    """Status and body of one request on a connection of its own, from ``source``."""
    with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0)) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _answered(port: int) -> tuple[int, bytes] | None:
    """``_answer`` to ``/healthz``, or None when the connection was reset."""
    try:
        return _answer(port, HEALTH)
    except ConnectionResetError:
        return None


def _until(what: Any, timeout: float = 60.0) -> Any:
    """A wait, not a delay: it ends as soon as ``what`` answers something true."""
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, "waited in vain"
        time.sleep(0.02)
    return got


HEALTH = b"GET /healthz HTTP/1.1\r\nHost: board\r\nConnection: close\r\n\r\n"


def _create(title: str) -> bytes:
    body = json.dumps({"project": "P", "title": title}).encode()
    return (
        b"POST /api/v1/cards HTTP/1.1\r\nHost: board\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


@pytest.fixture
def bounded(tmp_path: Path) -> Iterator[Live]:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    open_store(db).close()
    srv = start_server(db, tmp_path, "--max-connections", "4")
    assert srv.lb("project", "add", "P").returncode == 0
    try:
        yield srv
    finally:
        stop_server(srv)


def _full(live: Live) -> bool:
    return _answer(live.port, HEALTH)[0] == 503


def test_a_connection_beyond_the_bound_is_answered_at_once_and_writes_nothing(
    bounded: Live, tmp_path: Path
) -> None:
    held = _held(bounded.port, 4)
    try:
        _until(lambda: _full(bounded))  # the four are counted
        status, body = _answer(bounded.port, _create("never"))
        assert status == 503
        err = json.loads(body)["error"]
        assert err["code"] == "STORE_UNAVAILABLE"
        assert err["details"]["nothing_written"] is True
        assert "--max-connections" not in err["message"] and "4 connections" in err["message"]
    finally:
        for s in held:
            s.close()
    assert _until(lambda: _answer(bounded.port, HEALTH)[0] == 200)
    listed = bounded.lb("card", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    logs = "".join(p.read_text() for p in tmp_path.glob("serve-*.log"))
    assert (
        "refused 1 connection(s) (the last from 127.0.0.1): all the 4 connections it serves "
        "at once are in use (--max-connections)" in logs
    )
    assert "Too many open files" not in logs


def test_a_remote_lb_calls_again_until_a_connection_is_free(bounded: Live) -> None:
    held = _held(bounded.port, 4)
    env = {**bounded.env, "LANEBOARD_URL": bounded.url, "LANEBOARD_RETRY_S": "120"}
    env.pop("LANEBOARD_DATABASE_URL", None)
    try:
        _until(lambda: _full(bounded))
        call = subprocess.Popen(
            [sys.executable, "-m", "laneboard.cli.main", "card", "add", "P", "once"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert call.stderr is not None
        said = call.stderr.readline()  # its first refusal, said as it is
        assert "trying again for up to 120s" in said and "4 connections" in said, said
    finally:
        for s in held:
            s.close()
    _out, err = call.communicate(timeout=120)
    assert call.returncode == 0, err
    listed = json.loads(bounded.lb("card", "list", "--json").stdout)
    assert [c["title"] for c in listed] == ["once"]


def test_a_flood_beyond_the_open_file_limit_leaves_the_server_answering(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    open_store(db).close()
    limits = (1024, 1024)  # the usual soft limit, here the hard one too
    srv = start_server(db, tmp_path, nofile=limits)
    try:
        held = _held(srv.port, 1100)  # more than the process may open
        try:
            # while the flood's surplus is still being turned away, a refusal may be closed
            # before its request is read (a reset): a client calls again
            status, body = _until(lambda: _answered(srv.port))
            assert status == 503 and b"STORE_UNAVAILABLE" in body
        finally:
            for s in held:
                s.close()
        assert _until(lambda: _answer(srv.port, HEALTH)[0] == 200)
    finally:
        stop_server(srv)
    log = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert "Too many open files" not in log and "out of system resource" not in log


def test_the_soft_open_file_limit_is_raised_for_the_bound(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    open_store(db).close()
    srv = start_server(db, tmp_path, nofile=(256, 4096))
    try:
        limits = Path(f"/proc/{srv.proc.pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        need = guard.MAX_CONNECTIONS + guard.BACKLOG + guard.REFUSED_KEPT + guard.HEADROOM
        assert line.split()[3:5] == [str(need), "4096"]
    finally:
        stop_server(srv)


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--max-connections", "0"], "BAD_INPUT", "out of range"),
        (["--max-connections", "5000"], "CONFIG_INVALID", "ulimit -n"),
    ],
)
def test_a_bound_it_cannot_keep_is_refused_before_it_serves(
    tmp_path: Path, args: list[str], code: str, words: str
) -> None:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    open_store(db).close()

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    got = subprocess.run(
        [sys.executable, "-m", "laneboard.cli.main", "--db", db, "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limited,
    )
    assert got.returncode == 2
    assert got.stderr.startswith(f"error {code}:") and words in got.stderr
    assert "laneboard serving" not in got.stderr and got.stderr.count("\n") == 1


# -- the request's time, on a clock the test moves ---------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def _app(scope: Any, receive: Any, send: Any) -> None:
    """``/stream`` sends a line each 20 ms until the client goes; anything else: ok."""
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"text/plain")]
    if scope["path"] != "/stream":
        headers.append((b"content-length", b"2"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    import anyio

    for i in range(500):
        await send({"type": "http.response.body", "body": f"{i}\n".encode(), "more_body": True})
        await anyio.sleep(0.02)
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def timed() -> Iterator[tuple[int, Clock, uvicorn.Server]]:
    clock = Clock()
    cls = guard.protocol(8, request_s=30.0, now=clock, check_s=0.02)
    sock = listen("127.0.0.1", 0)
    config = uvicorn.Config(_app, http=cls, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    _until(lambda: server.started)
    try:
        yield sock.getsockname()[1], clock, server
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def _closed_with(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_a_request_not_whole_in_time_is_answered_408_and_closed(
    timed: tuple[int, Clock, uvicorn.Server],
) -> None:
    port, clock, server = timed
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(PARTIAL)
        _until(lambda: server.server_state.connections)  # its time runs from now
        clock.t += 29.0
        s.sendall(b"X-Slow: 1\r\n")  # a trickle does not make more time
        clock.t += 2.0
        data = _closed_with(s)
    assert data.startswith(b"HTTP/1.1 408 ")
    err = json.loads(data.partition(b"\r\n\r\n")[2])["error"]
    assert err["code"] == "BAD_INPUT" and "within 30 seconds" in err["message"]


def test_each_request_of_a_kept_connection_has_its_own_time(
    timed: tuple[int, Clock, uvicorn.Server],
) -> None:
    port, clock, _ = timed
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
        assert c.get("/a").text == "ok"
        clock.t += 25.0
        assert c.get("/b").text == "ok"  # the same connection, 25 s after it opened
        clock.t += 25.0
        assert c.get("/c").text == "ok"


def test_an_answer_being_sent_is_never_cut(timed: tuple[int, Clock, uvicorn.Server]) -> None:
    port, clock, _ = timed
    with (
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c,
        c.stream("GET", "/stream") as r,
    ):
        lines = r.iter_lines()
        assert next(lines) == "0"
        clock.t += 1000.0
        seen = [next(lines) for _ in range(20)]  # the check ran many times meanwhile
    assert seen == [str(i) for i in range(1, 21)]


def test_the_next_request_on_a_kept_connection_is_timed_from_the_answer_before(
    timed: tuple[int, Clock, uvicorn.Server],
) -> None:
    port, clock, server = timed
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /a HTTP/1.1\r\nHost: board\r\n\r\n")
        got = b""
        while not got.endswith(b"ok") and (chunk := s.recv(65536)):
            got += chunk
        assert got.startswith(b"HTTP/1.1 200 ")
        (conn,) = server.server_state.connections
        _until(lambda: conn.until is not None)  # the next request's time runs from now
        clock.t += 25.0
        s.sendall(PARTIAL)  # the next request's head, never ended
        clock.t += 31.0
        data = _closed_with(s)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert not server.server_state.connections or _until(
        lambda: not server.server_state.connections
    )


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(
    timed: tuple[int, Clock, uvicorn.Server],
) -> None:
    port, clock, server = timed
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        _until(lambda: server.server_state.connections)
        clock.t += 31.0
        assert _closed_with(s) == b""


def test_one_address_is_served_a_quarter_of_the_connections(tmp_path: Path) -> None:
    """One remote client cannot take every connection; the trusted loopback address (the
    local person, their dashboards) and other addresses are still served."""
    db = f"sqlite:///{tmp_path / 'board.db'}"
    open_store(db).close()
    srv = start_server(db, tmp_path, "--max-connections", "8")
    try:
        held = _held(srv.port, 2, source="127.0.0.2")  # its share: 8 // 4
        try:
            _until(lambda: _answer(srv.port, HEALTH, source="127.0.0.2")[0] == 503)
            status, body = _answer(srv.port, HEALTH, source="127.0.0.2")
            err = json.loads(body)["error"]
            assert status == 503 and err["code"] == "STORE_UNAVAILABLE"
            assert "the 2 connections one address is served at once" in err["message"]
            assert err["details"]["nothing_written"] is True
            assert _answer(srv.port, HEALTH, source="127.0.0.3")[0] == 200
            assert _answer(srv.port, HEALTH)[0] == 200
            more = _held(srv.port, 4)  # the trusted address has no share of its own
            try:
                assert _answer(srv.port, HEALTH)[0] == 200
            finally:
                for s in more:
                    s.close()
        finally:
            for s in held:
                s.close()
        assert _until(lambda: _answer(srv.port, HEALTH, source="127.0.0.2")[0] == 200)
    finally:
        stop_server(srv)
