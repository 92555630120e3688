"""The SQLite board's write gate, with real processes: laneboard's writers wait in the
kernel's queue on ``<board>-lock`` (not in SQLite's sleeping busy handler), a wait past
the busy timeout is ``LOCK_HELD`` and writes nothing, and a holder that dies lets the
next writer in."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.errors import LaneboardError
from laneboard.store import open_store
from laneboard.store.sqlite import SQLiteStore

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs /proc/locks")

ME = human("alice")
SAFETY_S = 60.0  # only ever reached when the property under test is broken

# holds a write transaction (one project written) until a line arrives on stdin
HOLDER = """
import sys
from laneboard.store import open_store
store = open_store(sys.argv[1])
with store.write() as tx:
    tx.insert_project(sys.argv[2], sys.argv[2], None, None)
    print("holding", flush=True)
    sys.stdin.readline()
store.close()
"""

# writes a project, counting how often its BEGIN IMMEDIATE found SQLite's lock taken
# (each such time SQLite's busy handler would have slept); says "busy" when it does
WAITER = """
import sqlite3, sys
from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.store import sqlite as lb_sqlite
store = open_store(sys.argv[1])
busy = 0
plain = lb_sqlite._SqliteConn.execute
def counted(self, sql, params=()):
    global busy
    if sql == "BEGIN IMMEDIATE":
        self.raw.execute("PRAGMA busy_timeout = 0")
        try:
            self.raw.execute(sql)
            return []
        except sqlite3.OperationalError:
            busy += 1
            print("busy", flush=True)
        finally:
            self.raw.execute(f"PRAGMA busy_timeout = {self.timeout_ms}")
    return plain(self, sql, params)
lb_sqlite._SqliteConn.execute = counted
Board(store).add_project(human("bob"), sys.argv[2])
gate = getattr(store, "gate", None)
print("done", busy, -1 if gate is None else gate.waits, flush=True)
store.close()
"""


@pytest.fixture
def board_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "board.db"
    store = open_store(f"sqlite:///{path}")
    Board(store).add_project(ME, "A")
    store.close()
    yield path


def _start(script: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, **env},
    )


def _holder(path: Path, key: str) -> subprocess.Popen[bytes]:
    proc = _start(HOLDER, f"sqlite:///{path}", key)
    assert proc.stdout is not None and proc.stdout.readline() == b"holding\n"
    return proc


def _let_go(proc: subprocess.Popen[bytes]) -> None:
    proc.communicate(b"\n", timeout=SAFETY_S)
    assert proc.returncode == 0


def _queued(pid: int, sidecar: Path) -> bool:
    """Whether ``pid`` waits in the kernel's queue for the flock on ``sidecar``."""
    try:
        inode = os.stat(sidecar).st_ino
        text = Path("/proc/locks").read_text()
    except FileNotFoundError:
        return False
    for line in text.splitlines():
        f = line.split()
        blocked = len(f) > 6 and f[1] == "->" and f[2] == "FLOCK" and f[5] == str(pid)
        if blocked and int(f[6].rsplit(":", 1)[1]) == inode:
            return True
    return False


def _until(done: Callable[[], bool]) -> None:
    """Wait for a state another process reaches (the bound only catches a broken test)."""
    end = time.monotonic() + SAFETY_S
    while not done():
        assert time.monotonic() < end, "the state never came"
        time.sleep(0.005)


def _keys(path: Path) -> list[str]:
    store = open_store(f"sqlite:///{path}")
    try:
        return sorted(p.key for p in Board(store).projects())
    finally:
        store.close()


def test_a_waiting_writer_queues_in_the_kernel_and_never_meets_sqlites_lock(
    board_path: Path,
) -> None:
    holder = _holder(board_path, "H")
    waiter = _start(WAITER, f"sqlite:///{board_path}", "W", LANEBOARD_BUSY_TIMEOUT="120")
    assert waiter.stdout is not None
    where: list[str] = []

    def waiting() -> bool:
        if _queued(waiter.pid, Path(f"{board_path}-lock")):
            where.append("kernel queue")
        elif select.select([waiter.stdout], [], [], 0)[0]:
            where.append(waiter.stdout.readline().decode().strip())  # "busy": in SQLite
        assert waiter.poll() is None
        return bool(where)

    _until(waiting)
    _let_go(holder)
    out, _ = waiter.communicate(timeout=SAFETY_S)
    assert waiter.returncode == 0
    # it waited behind the holder in the kernel, and its BEGIN IMMEDIATE, run once the
    # holder let go, found SQLite's lock free: no busy-handler sleep
    assert where == ["kernel queue"]
    assert out.decode().split() == ["done", "0", "1"]
    assert _keys(board_path) == ["A", "H", "W"]


def _gate_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "laneboard-write-gate"]


def test_a_write_past_the_timeout_is_lock_held_writes_nothing_and_leaves_nothing(
    board_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_BUSY_TIMEOUT", "0.2")
    store = open_store(f"sqlite:///{board_path}")
    assert isinstance(store, SQLiteStore)
    board = Board(store)
    holder = _holder(board_path, "H")
    try:
        for key in ("B", "C"):  # the second joins the wait the first left behind
            with pytest.raises(LaneboardError) as err:
                board.add_project(ME, key)
            assert err.value.code == "LOCK_HELD" and "0.2 s" in err.value.message
        assert store.gate.waits == 1 and len(_gate_threads()) == 1
        assert [p.key for p in board.projects()] == ["A"]  # reads go on meanwhile
    finally:
        _let_go(holder)
    for t in _gate_threads():  # the helper hands the lock back and ends
        t.join(timeout=SAFETY_S)
    assert not _gate_threads() and not store.gate.helper_running()
    other = os.open(f"{board_path}-lock", os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it any more
    finally:
        os.close(other)
    assert _keys(board_path) == ["A", "H"]
    board.add_project(ME, "D")
    assert _keys(board_path) == ["A", "D", "H"]
    store.close()


def test_a_thread_behind_another_threads_write_times_out_as_lock_held(
    board_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEBOARD_BUSY_TIMEOUT", "0.2")
    store = open_store(f"sqlite:///{board_path}")
    got: list[str] = []

    def other_thread() -> None:
        try:
            Board(store).add_project(ME, "T")
        except LaneboardError as err:
            got.append(err.code)

    with store.write() as tx:
        tx.insert_project("H", "H", None, None)
        t = threading.Thread(target=other_thread)
        t.start()
        t.join(timeout=SAFETY_S)
    assert got == ["LOCK_HELD"] and not _gate_threads()
    assert _keys(board_path) == ["A", "H"]
    store.close()


def test_a_holder_killed_mid_write_lets_the_waiting_writer_in(board_path: Path) -> None:
    store = open_store(f"sqlite:///{board_path}")
    assert isinstance(store, SQLiteStore)
    board = Board(store)
    holder = _holder(board_path, "H")
    assert [p.key for p in board.projects()] == ["A"]  # a reader takes no gate
    assert store.gate.waits == 0
    errors: list[BaseException] = []

    def write() -> None:
        try:
            board.add_project(ME, "N")
        except BaseException as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=write)
    t.start()
    _until(lambda: _queued(os.getpid(), Path(f"{board_path}-lock")))
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=SAFETY_S)
    t.join(timeout=SAFETY_S)
    assert not t.is_alive() and errors == []
    assert store.gate.waits == 1
    assert _keys(board_path) == ["A", "N"]  # the killed write left nothing
    store.close()
