"""The supervisor's board socket: what agent sessions get instead of a database.

* End to end, both backends: an agent session run by the real supervisor finds
  ``LANEBOARD_URL`` (the socket) and its token in its environment and no database URL or
  path anywhere in it, and still works its card through ``lb``.
* The socket is owner-only, needs a token, answers undeclared methods with 405 and an
  ``Allow`` header, and ``lb start`` serves it in its state directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.cli_kit import CONNECT
from tests.supervisor.helpers import RealNowClock, Running, config, settled, wait_for

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import human
from laneboard.errors import LaneboardError
from laneboard.ops import unix
from laneboard.store import open_store
from laneboard.supervisor import board_socket


def test_an_agent_session_gets_the_socket_and_no_database(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_RETRY_S", "12")  # the one setting passed on to a session
    monkeypatch.setenv("LANEBOARD_BUSY_TIMEOUT", "7")  # and one that is not
    proj = tmp_path / "proj"
    proj.mkdir()
    seen = proj / "agent-env.json"  # the session's own directory (its /tmp is private)
    dump = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))' > {seen}"
    store = open_store(store_url, RealNowClock())
    board = Board(store)
    me = human("alice")
    board.add_project(me, "W", path=str(proj))
    card = board.create_card(
        me, "W", "look around", acceptance_mode="off",
        meta={"script": [{"run": dump}, {"comment": "seen"}, {"deliver": "done"}]},
    )  # fmt: skip
    cfg = config(tmp_path)
    with Running(store_url, cfg, RealNowClock()) as run:
        # acceptance_mode off: the workflow may accept the delivery before a poll sees in_review
        delivered = ("in_review", "done")
        wait_for(lambda: board.get(card.ref).status.value in delivered, what="the delivery")
        wait_for(lambda: settled(run.store), what="the turn's outcome")
    env = json.loads(seen.read_text())
    assert env["LANEBOARD_URL"] == f"unix:{cfg.state_path('run', 'board.sock')}"
    assert env["LANEBOARD_CARD"] == card.ref and env["LANEBOARD_TOKEN"].startswith("lbt_")
    assert "LANEBOARD_DATABASE_URL" not in env
    assert env["LANEBOARD_RETRY_S"] == "12" and "LANEBOARD_BUSY_TIMEOUT" not in env
    needles = (store_url, store_url.removeprefix("sqlite:///"), "postgresql://", "sqlite:")
    for key, value in env.items():  # neither the URL nor the file is named anywhere
        assert not any(n in value for n in needles), key
    # the session's own lb calls went through the socket, as the agent
    comments = board.comments(card.ref)
    assert [(c.body, c.author_kind.value) for c in comments][-1:] == [("seen", "agent")]
    assert board.reports(card.ref)[-1].author_kind.value == "agent"
    store.close()


@pytest.fixture
def served(sqlite_store_url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    store = open_store(sqlite_store_url)
    board = Board(store)
    board.add_project(human("alice"), "WEB")
    board.create_card(human("alice"), "WEB", "a card")
    sock = board_socket.serve(board, str(tmp_path / "state"))
    try:
        yield store, sock
    finally:
        board_socket.stop(board)
        store.close()


def _ask(path: str, raw: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    with unix.connect(path, 10) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def _post(path: str, name: str, body: dict[str, object], token: str | None = None) -> bytes:
    raw = json.dumps(body).encode()
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST /api/v1/ops/{name} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(raw)}\r\n"
        f"Content-Type: application/json\r\n{auth}Connection: close\r\n\r\n"
    ).encode() + raw


def test_the_socket_is_the_owners_and_needs_a_token(served) -> None:  # type: ignore[no-untyped-def]
    store, sock = served
    assert stat.S_IMODE(os.stat(sock.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(sock.path)).st_mode) == 0o700
    status, headers, doc = _ask(
        sock.path, _post(sock.path, "card.get", {"params": {"ref": "WEB-1"}})
    )
    assert status == 401 and doc["error"]["code"] == "UNAUTHORIZED"  # type: ignore[index]
    assert headers["www-authenticate"].startswith("Bearer")
    token, _ = Tokens(store).create(human("alice"), "alice", "human")
    status, _, doc = _ask(
        sock.path, _post(sock.path, "card.get", {"params": {"ref": "WEB-1"}}, token)
    )
    assert status == 200 and doc["result"]["ref"] == "WEB-1"  # type: ignore[index]
    status, _, doc = _ask(sock.path, _post(sock.path, "card.nope", {"params": {}}, token))
    assert status == 404 and doc["error"]["code"] == "NOT_FOUND"  # type: ignore[index]
    status, _, doc = _ask(sock.path, _post(sock.path, "card.get", {"params": {"x": 1}}, token))
    assert status == 422 and doc["error"]["code"] == "BAD_INPUT"  # type: ignore[index]
    deep = b"[" * 100_000
    raw = (
        f"POST /api/v1/ops/card.get HTTP/1.1\r\nContent-Length: {len(deep)}\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    ).encode() + deep
    status, _, doc = _ask(sock.path, raw)
    assert status == 422 and doc["error"]["code"] == "BAD_INPUT"  # type: ignore[index]


def test_a_call_on_the_socket_resolves_its_token_without_a_transaction_and_sees_a_revoke(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Every agent call presents its token: one statement, no read transaction; and the
    lookup is not remembered, so a revoked token is refused on its very next call."""
    store, sock = served
    token, info = Tokens(store).create(human("alice"), "alice", "human")

    def no_transaction() -> None:
        raise AssertionError("a token lookup opened a read transaction")

    monkeypatch.setattr(store, "read", no_transaction)
    assert Tokens(store).resolve(token).name == "alice"
    monkeypatch.undo()
    call = _post(sock.path, "card.get", {"params": {"ref": "WEB-1"}}, token)
    assert _ask(sock.path, call)[0] == 200
    Tokens(store).revoke(human("alice"), info.id)
    status, _, doc = _ask(sock.path, call)
    assert status == 401 and doc["error"]["code"] == "UNAUTHORIZED"  # type: ignore[index]


def _renewal(
    url: str, tmp_path: Path, before_call: Any = None
) -> tuple[Board, Any, str, Path, dict[str, Any]]:
    """A card the worker agent held and released, its old credential in the session's
    token file; the agent claims it again through the socket, asking for a renewal
    (``before_call`` runs once the socket is up). Returns the board, the card, the old
    credential, the token file and the answer's document (status 200 checked)."""
    store = open_store(url)
    board = Board(store)
    me = human("alice")
    board.add_project(me, "WEB")
    card = board.create_card(me, "WEB", "a card", assignee="worker")
    claimed = board.claim(me, card.ref, holder="worker")
    old, _ = Tokens(store).create(me, "worker", card_id=card.id, epoch=claimed.claim_epoch)
    board.release(me, card.ref)
    state = tmp_path / "state"
    path = state / "tokens" / card.ref / "token"
    path.parent.mkdir(parents=True)
    path.write_text(old)
    sock = board_socket.serve(board, str(state))
    try:
        if before_call is not None:
            before_call(store)
        raw = _post(sock.path, "card.claim", {"params": {"ref": card.ref}}, old)
        renew = raw.replace(b"Connection: close", b"X-Laneboard-Renew: 1\r\nConnection: close")
        status, _, doc = _ask(sock.path, renew)
    finally:
        board_socket.stop(board)
    assert status == 200, doc
    return board, card, old, path, doc


def test_a_renewed_credential_is_kept_in_the_session_token_file(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    """The session may only read its token file: the socket writes the renewal there."""
    board, card, old, path, doc = _renewal(sqlite_store_url, tmp_path)
    assert "token" not in doc, doc
    kept = path.read_text()
    assert kept.startswith("lbt_") and kept != old
    actor = Tokens(board.store).resolve(kept)
    assert (actor.card_id, actor.epoch) == (card.id, board.get(card.ref).claim_epoch)
    assert sorted(os.listdir(path.parent)) == ["token"]
    board.store.close()


def test_a_renewed_credential_is_kept_when_the_database_goes_away_after_the_call(
    sqlite_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim and its new credential are written; the socket keeps the credential from
    the answer itself, so a database out of reach right after cannot lose it (nor log a
    traceback instead of answering)."""

    def gone() -> None:
        raise AssertionError("the socket read the store after the call")

    def reads_fail(store: Any) -> None:  # every write of the call is done by then
        monkeypatch.setattr(store, "read", gone)

    board, card, old, path, doc = _renewal(sqlite_store_url, tmp_path, reads_fail)
    monkeypatch.undo()
    assert "token" not in doc, doc
    kept = path.read_text()
    assert kept != old and Tokens(board.store).resolve(kept).card_id == card.id
    board.store.close()


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [("GET", "/api/v1/ops/card.get", "POST"), ("PUT", "/api/v1/ops/card.get", "POST"),
     ("DELETE", "/healthz", "GET")],
)  # fmt: skip
def test_undeclared_methods_on_the_socket_are_405(
    served, method: str, path: str, allow: str
) -> None:  # type: ignore[no-untyped-def]
    _store, sock = served
    status, headers, doc = _ask(sock.path, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert (status, headers["allow"]) == (405, allow)
    assert doc["error"]["code"] == "METHOD_NOT_ALLOWED"  # type: ignore[index]


def test_a_long_state_path_still_serves(sqlite_store_url: str, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    store = open_store(sqlite_store_url)
    board = Board(store)
    try:
        sock = board_socket.serve(board, str(deep))
        assert len(sock.path) > 107
        status, _, _ = _ask(sock.path, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200
    finally:
        board_socket.stop(board)
        store.close()
    assert not os.path.exists(sock.path)


def test_lb_start_serves_the_board_socket(sqlite_store_url: str, tmp_path: Path) -> None:
    store = open_store(sqlite_store_url)
    board = Board(store)
    board.add_project(human("alice"), "WEB")
    board.create_card(human("alice"), "WEB", "a card", status="backlog")
    token, _ = Tokens(store).create(human("alice"), "alice", "human")
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(LANEBOARD_DATABASE_URL=sqlite_store_url, XDG_STATE_HOME=str(tmp_path / "xdg"))
    state = tmp_path / "state"
    lb = [sys.executable, "-m", "laneboard.cli.main"]
    proc = subprocess.Popen(
        [*lb, "start", "--state-dir", str(state), "--agent", "scripted", "--for-seconds", "30"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = f"unix:{state / 'run' / 'board.sock'}"
        assert line.rstrip().endswith(f"board socket: {url}"), line
        remote = {k: v for k, v in env.items() if k != "LANEBOARD_DATABASE_URL"}
        remote.update(LANEBOARD_URL=url, LANEBOARD_TOKEN=token)
        got = subprocess.run(
            [*lb, "card", "get", "WEB-1", "--json"], env=remote, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["title"] == "a card"
    finally:
        proc.terminate()
        proc.communicate(timeout=60)  # reads and closes stderr
    assert not (state / "run" / "board.sock").exists()  # it goes with the supervisor


def test_a_call_while_the_database_is_away_is_refused_as_unavailable(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The token's lookup, not only the call, can find the database gone: the agent's
    ``lb`` gets ``503 STORE_UNAVAILABLE`` (and tries again), not a dropped connection."""
    import sqlite3

    store, sock = served
    token, _ = Tokens(store).create(human("alice"), "alice", "human")

    def away(*_a: object, **_k: object) -> object:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Tokens, "resolve", away)
    status, _, doc = _ask(
        sock.path, _post(sock.path, "card.get", {"params": {"ref": "WEB-1"}}, token)
    )
    assert status == 503 and doc["error"]["code"] == "STORE_UNAVAILABLE"  # type: ignore[index]


def test_calls_refused_while_the_database_is_away_are_counted_for_their_token(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The pool asks, at a turn's end, how many of its agent's calls found the board out of
    reach (``refused_calls``): only those are counted, each token's apart, read once; the
    count of a token never asked about is dropped once enough newer ones were noted."""
    import sqlite3

    store, sock = served
    tokens = [Tokens(store).create(human("alice"), f"t{i}", "human")[0] for i in range(3)]
    get = {"params": {"ref": "WEB-1"}}
    status, _, _ = _ask(sock.path, _post(sock.path, "card.get", get, tokens[0]))
    assert status == 200 and board_socket.refused_calls(tokens[0]) == 0
    status, _, _ = _ask(sock.path, _post(sock.path, "card.get", {"params": {"x": 1}}, tokens[0]))
    assert status == 422 and board_socket.refused_calls(tokens[0]) == 0  # not the board's

    def away(*_a: object, **_k: object) -> object:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Tokens, "resolve", away)
    for token in (tokens[0], tokens[0], tokens[1]):
        status, headers, _ = _ask(sock.path, _post(sock.path, "card.get", get, token))
        assert status == 503 and "www-authenticate" not in headers
    assert board_socket.refused_calls(tokens[0]) == 2
    assert board_socket.refused_calls(tokens[0]) == 0  # read once

    def budget_spent(*_a: object, **_k: object) -> object:  # the store's own refusal
        raise LaneboardError("STORE_UNAVAILABLE", "all 8 connections stayed in use", "wait")

    monkeypatch.setattr(Tokens, "resolve", budget_spent)
    status, headers, _ = _ask(sock.path, _post(sock.path, "card.get", get, tokens[0]))
    assert status == 503 and "www-authenticate" not in headers  # no credential asked for
    assert board_socket.refused_calls(tokens[0]) == 1
    monkeypatch.setattr(Tokens, "resolve", away)
    monkeypatch.setattr(board_socket, "REFUSALS_KEPT", 1)
    _ask(sock.path, _post(sock.path, "card.get", get, tokens[2]))
    assert board_socket.refused_calls(tokens[1]) == 0  # dropped: a newer one was noted
    assert board_socket.refused_calls(tokens[2]) == 1


# a caller that opens connections and sends nothing on them: when told "poll" on its
# stdin it answers how many of them the socket has already answered with a refusal
FLOOD = (
    r"""
import select, sys
path, n = sys.argv[1], int(sys.argv[2])
"""
    + CONNECT
    + r"""

socks = [connect() for _ in range(n)]
refused = set()
print("opened", flush=True)
for line in sys.stdin:
    ready, _, _ = select.select([s for s in socks if s not in refused], [], [], 0)
    for s in ready:
        if s.recv(65536).startswith(b"HTTP/1.1 503"):
            refused.add(s)
    print(len(refused), flush=True)
"""
)


def test_one_caller_cannot_hold_every_connection_of_the_socket(served) -> None:  # type: ignore[no-untyped-def]
    """A caller (a process, or every process of one sandbox) that opens connections and
    sends nothing is served up to its share; the rest are refused at once with a 503 a
    client may retry (nothing was written), so the supervisor holds no thread or file for
    them; another caller is served meanwhile."""
    store, sock = served
    token, _ = Tokens(store).create(human("alice"), "alice", "human")
    share = board_socket.PER_CALLER
    with subprocess.Popen(
        [sys.executable, "-c", FLOOD, sock.path, str(share + 40)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as flood:  # fmt: skip
        assert flood.stdin is not None and flood.stdout is not None
        assert flood.stdout.readline() == "opened\n"

        def refused() -> int:
            flood.stdin.write("poll\n")  # type: ignore[union-attr]
            flood.stdin.flush()  # type: ignore[union-attr]
            return int(flood.stdout.readline())  # type: ignore[union-attr]

        wait_for(lambda: refused() == 40, timeout=20, what="the flood's excess refused")
        assert sock.serving() == share
        status, _, doc = _ask(
            sock.path, _post(sock.path, "card.get", {"params": {"ref": "WEB-1"}}, token)
        )
        assert status == 200 and doc["result"]["ref"] == "WEB-1"  # type: ignore[index]
        flood.kill()
    wait_for(lambda: sock.serving() == 0, timeout=20, what="the flood's connections closed")


def _refused(path: str, token: str) -> tuple[int, dict[str, Any]]:
    """A call the socket may refuse before reading it: sent as ``lb`` sends, which reads
    the refusal even when its sending was cut short."""
    from laneboard.cli.remote import Endpoint, request

    body = json.dumps({"params": {"ref": "WEB-1"}}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    status, raw = request(Endpoint(f"unix:{path}"), "POST", "/api/v1/ops/card.get", body, headers)
    return status, json.loads(raw)


def test_a_refusal_for_a_full_share_says_nothing_was_written(served) -> None:  # type: ignore[no-untyped-def]
    store, sock = served
    held = [unix.connect(sock.path, 10) for _ in range(board_socket.PER_CALLER)]
    try:
        wait_for(lambda: sock.serving() == board_socket.PER_CALLER, what="the share in use")
        token, _ = Tokens(store).create(human("alice"), "alice", "human")
        status, doc = _refused(sock.path, token)
    finally:
        for s in held:
            s.close()
    err = doc["error"]
    assert status == 503 and err["code"] == "STORE_UNAVAILABLE"  # type: ignore[index]
    assert err["details"] == {"nothing_written": True}  # type: ignore[index]
    assert str(board_socket.PER_CALLER) in err["message"]  # type: ignore[index]


def test_a_call_must_arrive_whole_before_its_deadline(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """A caller that sends a call a byte at a time is cut off once the call's deadline
    has passed, however often it sends (the deadline is for the whole call, not each read);
    time is the socket's clock, moved by the test."""
    _, sock = served
    now = [1000.0]
    monkeypatch.setattr(board_socket, "_now", lambda: now[0])
    with unix.connect(sock.path, 10) as s:
        wait_for(lambda: sock.serving() == 1, what="the connection taken")  # its clock starts
        s.sendall(b"POST /api/v1/ops/card.get HTTP/1.1\r\n")
        for _ in range(3):  # each read in time, the call not yet whole
            now[0] += board_socket.REQUEST_S / 4
            s.sendall(b"X-Slow: 1\r\n")
        now[0] += board_socket.REQUEST_S / 2  # past the call's deadline
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(b"X-Slow: 1\r\n")  # it may have been cut off already
        s.settimeout(10)
        try:
            got = s.recv(65536)
        except ConnectionResetError:  # closed with the last line unread
            got = b""
        assert got == b""  # closed, no answer: the call never arrived whole
    wait_for(lambda: sock.serving() == 0, timeout=20, what="the slow connection closed")


def test_the_socket_serves_a_bounded_number_of_calls_in_all(
    served, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    store, sock = served
    monkeypatch.setattr(board_socket, "MAX_CONNECTIONS", 2)
    held = [unix.connect(sock.path, 10) for _ in range(2)]
    try:
        wait_for(lambda: sock.serving() == 2, what="the socket's calls in use")
        token, _ = Tokens(store).create(human("alice"), "alice", "human")
        status, doc = _refused(sock.path, token)
        assert status == 503 and "all the 2 calls it serves" in doc["error"]["message"]  # type: ignore[index]
    finally:
        for s in held:
            s.close()
    wait_for(lambda: sock.serving() == 0, what="the held connections closed")
    assert _refused(sock.path, token)[0] == 200


class _Said:
    """A log that keeps its warnings."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def warn(self, component: str, message: str, **fields: Any) -> None:
        self.lines.append((component, message, fields))


def test_the_supervisors_log_says_whose_connections_were_refused(
    sqlite_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller's first refusal is logged at once with who it is; the rest are counted and
    said at most once a minute (the socket's clock, moved by the test)."""
    now = [1000.0]
    monkeypatch.setattr(board_socket, "_now", lambda: now[0])
    store = open_store(sqlite_store_url)
    board = Board(store)
    said = _Said()
    sock = board_socket.serve(board, str(tmp_path / "state"), said)
    held = [unix.connect(sock.path, 10) for _ in range(board_socket.PER_CALLER)]
    try:
        wait_for(lambda: sock.serving() == board_socket.PER_CALLER, what="the share in use")

        def refuse(n: int) -> None:
            for _ in range(n):
                with unix.connect(sock.path, 10) as s:
                    s.settimeout(10)
                    assert s.recv(65536).startswith(b"HTTP/1.1 503")

        refuse(3)
        caller = f"pid:{os.getpid()}"
        share = f"the caller's {board_socket.PER_CALLER} calls at once are in use"
        assert said.lines == [("board-socket", f"refused 1 connection(s): {share}",
                               {"caller": caller})]  # fmt: skip
        now[0] += board_socket.REFUSALS_SAID_S
        refuse(1)
        assert said.lines[1:] == [("board-socket", f"refused 3 connection(s): {share}",
                                   {"caller": caller})]  # fmt: skip
    finally:
        for s in held:
            s.close()
        board_socket.stop(board)
        store.close()


def test_a_caller_that_leaves_before_its_answer_costs_no_traceback(
    served,
    capfd: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    """An agent killed mid-call (its turn ended, its sandbox torn down) leaves the socket
    with an answer nobody reads: the socket says nothing of it on the supervisor's
    standard error, and serves the next call."""
    store, sock = served
    token, _ = Tokens(store).create(human("alice"), "alice", "human")
    for _ in range(5):
        with unix.connect(sock.path, 10) as s:
            s.sendall(_post(sock.path, "card.get", {"params": {"ref": "WEB-1"}}, token))
        # closed before the answer: the answer's write finds nobody
    status, _, doc = _ask(
        sock.path, _post(sock.path, "card.get", {"params": {"ref": "WEB-1"}}, token)
    )
    assert status == 200 and doc["result"]["ref"] == "WEB-1"  # type: ignore[index]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err


class _ErrorsSaid:
    """A stand-in for the supervisor's log: what the socket told it."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []

    def error(self, component: str, message: str, **fields: Any) -> None:
        self.lines.append(("error", component, message))

    def warn(self, component: str, message: str, **fields: Any) -> None:
        self.lines.append(("warn", component, message))


def test_a_call_that_fails_unexpectedly_is_one_line_in_the_log(
    sqlite_store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    store = open_store(sqlite_store_url)
    board = Board(store)
    said = _ErrorsSaid()
    sock = board_socket.serve(board, str(tmp_path / "state"), log=said)
    token, _ = Tokens(store).create(human("alice"), "alice", "human")

    def broken(*args: object) -> None:
        raise RuntimeError("the answer broke")

    monkeypatch.setattr(board_socket, "answer", broken)
    try:
        with unix.connect(sock.path, 10) as s:
            s.sendall(_post(sock.path, "card.get", {"params": {"ref": "WEB-1"}}, token))
            assert s.recv(65536) == b""  # closed without an answer
        wait_for(lambda: bool(said.lines), what="the log line")
    finally:
        board_socket.stop(board)
        store.close()
    assert said.lines == [
        ("error", "board-socket", "a call failed: RuntimeError: the answer broke")
    ]
    assert "Traceback" not in capfd.readouterr().err
