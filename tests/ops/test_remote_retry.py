"""Remote mode rides out a board out of reach: a call refused with ``STORE_UNAVAILABLE`` is
made again, with growing pauses, for up to ``LANEBOARD_RETRY_S`` seconds, when that cannot
write anything twice — a read, or a call that never reached the database (the board says
``nothing_written``, or no connection to the board could be made). A write that may have
reached the database is never made again.

The board here is a real supervisor socket over a real SQLite file, run in this process so
that the test can take the database away from it; ``lb`` runs as a subprocess, as an
agent's does."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli_kit import LB

from laneboard.board.service import Board
from laneboard.board.tokens import Tokens
from laneboard.domain.model import human
from laneboard.store import Store, open_store
from laneboard.supervisor import board_socket


class Outage:
    """The store's next ``fail`` connections cannot be made (the database is away);
    ``tries`` counts every connection it tried to make."""

    def __init__(self, store: Any) -> None:
        self.store, self.fail, self.tries = store, 0, 0
        self.real = store._connect

    def __call__(self) -> Any:
        self.tries += 1
        if self.fail > 0:
            self.fail -= 1
            raise sqlite3.OperationalError("unable to open database file")
        return self.real()

    def begin(self, fail: int) -> None:
        self.store._drop_idle()  # the connections it kept went with the database
        self.fail, self.tries = fail, 0


@pytest.fixture
def board(sqlite_store_url: str, tmp_path: Path) -> Iterator[tuple[Store, Outage, dict[str, str]]]:
    """(the store, its outage switch, the environment of an ``lb`` that calls the socket)."""
    store = open_store(sqlite_store_url)
    served = Board(store)
    served.add_project(human("alice"), "WEB")
    served.create_card(human("alice"), "WEB", "a card")
    token, _ = Tokens(store).create(human("alice"), "alice", "human")
    sock = board_socket.serve(served, str(tmp_path / "state"))
    outage = Outage(store)
    store._connect = outage  # type: ignore[method-assign]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(LANEBOARD_URL=sock.url, LANEBOARD_TOKEN=token, HOME=str(tmp_path))
    try:
        yield store, outage, env
    finally:
        board_socket.stop(served)
        store.close()


def lb(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LB, *args], env={**env, **extra}, capture_output=True, text=True, timeout=120
    )


def comments(store: Store) -> list[str]:
    with store.read() as tx:
        return [r["body"] for r in tx.all("SELECT body FROM comments ORDER BY id")]


def test_a_read_is_made_again_until_the_board_answers(board: Any) -> None:
    _, outage, env = board
    outage.begin(fail=3)
    out = lb(env, "card", "get", "WEB-1", "--json")
    assert out.returncode == 0, out.stderr
    assert '"ref": "WEB-1"' in out.stdout
    assert outage.tries == 4 and outage.fail == 0
    (notice,) = out.stderr.splitlines()  # said once, on stderr: stdout stays the answer
    assert notice.startswith("lb: the store did not answer") and "for up to 30s" in notice


def test_a_write_that_never_reached_the_database_is_made_again_once_through(board: Any) -> None:
    store, outage, env = board
    outage.begin(fail=2)
    out = lb(env, "card", "comment", "WEB-1", "written once")
    assert out.returncode == 0, out.stderr
    assert outage.tries == 3
    assert comments(store) == ["written once"]


def test_a_write_that_may_have_reached_the_database_is_not_made_again(
    board: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection broke while the write ran: it may have been committed, so ``lb``
    says so at once (one line, exit 1) and leaves the decision to its caller."""
    store, _, env = board
    calls: list[str] = []

    def broke(self: Board, *_a: object, **_k: object) -> object:
        calls.append("comment")
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Board, "comment", broke)
    out = lb(env, "card", "comment", "WEB-1", "maybe written")
    assert out.returncode == 1
    assert calls == ["comment"]
    assert out.stderr.splitlines() == [
        "error STORE_UNAVAILABLE: the store did not answer: OperationalError"
        " — check the database and retry"
    ]
    assert comments(store) == []


def test_the_window_is_set_by_laneboard_retry_s(board: Any) -> None:
    """0: never again; past the window: the refusal, once; a bad value: one line naming the
    setting and nothing sent."""
    _, outage, env = board
    outage.begin(fail=1)
    out = lb(env, "card", "get", "WEB-1", LANEBOARD_RETRY_S="0")
    assert out.returncode == 1 and outage.tries == 1
    assert "trying again" not in out.stderr
    outage.begin(fail=10**6)
    out = lb(env, "card", "get", "WEB-1", LANEBOARD_RETRY_S="0.6")
    assert out.returncode == 1 and outage.tries >= 2
    lines = out.stderr.splitlines()
    assert len(lines) == 2 and "for up to 0.6s" in lines[0]
    assert lines[1].startswith("error STORE_UNAVAILABLE: the store did not answer")
    outage.begin(fail=0)
    for bad in ("soon", "-1", "nan", "1e9"):
        out = lb(env, "card", "get", "WEB-1", LANEBOARD_RETRY_S=bad)
        assert out.returncode == 2 and outage.tries == 0, (bad, out.stderr)
        assert out.stderr.splitlines() == [
            f"error CONFIG_INVALID: LANEBOARD_RETRY_S={bad!r} is not a number of seconds "
            "from 0 to 3600 — set it to how long lb tries again while the board is out of "
            "reach, e.g. LANEBOARD_RETRY_S=30 (0: never)"
        ]


def test_a_write_is_made_again_while_no_board_answers_at_all(board: Any, tmp_path: Path) -> None:
    """No connection to the board could be made (its socket is gone, as while a supervisor
    restarts): nothing was sent, so a write too is made again for the window."""
    _, _, env = board
    gone = f"unix:{tmp_path / 'nobody' / 'board.sock'}"
    out = lb(env, "card", "comment", "WEB-1", "x", LANEBOARD_URL=gone, LANEBOARD_RETRY_S="0.3")
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("lb: no board answers at")
    assert "trying again for up to 0.3s" in lines[0]
    assert lines[1].startswith("error STORE_UNAVAILABLE: no board answers at")


def test_a_write_refused_for_a_full_share_is_made_again_once_a_call_ends(
    board: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket serves one caller so many calls at once (``PER_CALLER``); a call beyond
    them is refused with ``nothing_written``, so even a write is made again, and it is
    written once when one of the caller's calls has ended."""
    from tests.supervisor.helpers import wait_for

    from laneboard.ops import unix

    store, _, env = board
    monkeypatch.setattr(board_socket, "_caller", lambda _sock: "one sandbox")
    sock = board_socket._LIVE[env["LANEBOARD_URL"].removeprefix("unix:")]  # the fixture's
    held = [unix.connect(sock.path, 10) for _ in range(board_socket.PER_CALLER)]
    try:
        wait_for(lambda: sock.serving() == board_socket.PER_CALLER, what="the share in use")
        with subprocess.Popen(
            [*LB, "card", "comment", "WEB-1", "once"], env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        ) as call:  # fmt: skip
            assert call.stderr is not None
            told = call.stderr.readline()
            assert "serving the 16 calls one caller may make at once" in told, told
            assert "trying again" in told
            held.pop().close()  # one call ends
            _, err = call.communicate(timeout=60)
        assert call.returncode == 0, err
    finally:
        for s in held:
            s.close()
    assert comments(store) == ["once"]


def test_a_call_whose_sending_failed_never_reached_the_board(tmp_path: Path) -> None:
    """A board that closes the connection before reading the call (as the socket does for
    a caller past its share) leaves the client's send unfinished: that call cannot have
    run, so it counts as unreached, which even a write may be made again after."""
    import socket
    import threading

    from laneboard.cli.remote import Endpoint, Unreached, request

    path = str(tmp_path / "closing.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def close_at_once() -> None:
        conn, _ = server.accept()
        conn.close()

    closer = threading.Thread(target=close_at_once)
    closer.start()
    try:
        with pytest.raises(Unreached):
            request(Endpoint(f"unix:{path}"), "POST", "/api/v1/ops/card.comment",
                    b"x" * (8 << 20), {})  # fmt: skip
    finally:
        closer.join(10)
        server.close()
