"""The supervisor log (logfmt, redaction, size rotation) and queue-row coalescing."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store
from laneboard.supervisor import records
from laneboard.supervisor.logs import LogFile

LINE = re.compile(r'^time=\S+Z level=(\w+) component=(\w+) msg=("(?:[^"\\]|\\.)*"|\S+)( \w+=\S+)*$')


def test_log_lines_are_logfmt_and_redacted(tmp_path: Path) -> None:
    log = LogFile(str(tmp_path / "state" / "supervisor.log"))
    log.info("pool", "turn ok", card="W-1", actor_kind="agent")
    log.warn("store", "retry postgresql://bob:hunter2@db/x with lbt_abcdefghijkl and token=s3cret")
    first, second = (tmp_path / "state" / "supervisor.log").read_text().splitlines()
    assert LINE.match(first) and LINE.match(second)
    assert first.endswith('msg="turn ok" card=W-1 actor_kind=agent')
    assert "hunter2" not in second and "lbt_abcdefghijkl" not in second
    assert "s3cret" not in second and "actor_kind=system" in second


def test_log_rotates_by_size_and_keeps_five(tmp_path: Path) -> None:
    path = tmp_path / "supervisor.log"
    log = LogFile(str(path), max_bytes=400, keep=5)
    for i in range(200):
        log.info("tick", f"line {i:03d}")
    files = [path] + [Path(f"{path}.{n}") for n in range(1, 6)]
    assert all(f.exists() for f in files)
    assert not Path(f"{path}.6").exists()
    assert all(f.stat().st_size <= 400 for f in files)
    numbers = [
        [int(m) for m in re.findall(r'msg="line (\d+)"', f.read_text())] for f in reversed(files)
    ]
    flat = [n for chunk in numbers for n in chunk]
    assert flat == sorted(flat) and flat[-1] == 199  # oldest in .5, newest in the live file
    assert flat == list(range(flat[0], 200))  # nothing lost inside the kept window


def test_writers_follow_a_rotation_made_by_another_writer(tmp_path: Path) -> None:
    """Each writer keeps the log open: one that another process rotated (or removed)
    is noticed and opened again, so no line goes into a rotated file."""
    path = tmp_path / "supervisor.log"
    mine, other = LogFile(str(path), max_bytes=300), LogFile(str(path), max_bytes=300)
    mine.info("tick", "first")
    for i in range(4):  # the other writer fills the file and rotates it
        other.info("tick", f"other {i}")
    assert Path(f"{path}.1").exists()
    mine.info("tick", "after the rotation")
    assert "after the rotation" in path.read_text()
    assert "after the rotation" not in Path(f"{path}.1").read_text()
    path.unlink()  # removed by hand: the next line makes it again
    mine.info("tick", "after the removal")
    assert "after the removal" in path.read_text()
    lines = [ln for f in (path, Path(f"{path}.1")) for ln in f.read_text().splitlines()]
    assert all(LINE.match(ln) for ln in lines)


def test_writers_lock_the_lock_file_at_its_path_even_after_it_was_removed(
    tmp_path: Path,
) -> None:
    """The lock file stays open too; removed by hand while a writer runs, a writer started
    afterwards makes a new one, and the older writer must lock that same file again (not
    the removed one), or the two would no longer write and rotate one at a time."""
    path = tmp_path / "supervisor.log"
    lock = Path(f"{path}.lock")
    older = LogFile(str(path))
    older.info("tick", "first")
    lock.unlink()
    newer = LogFile(str(path))
    newer.info("tick", "second")
    older.info("tick", "third")
    for writer in (older, newer):
        held = os.fstat(writer._fds[0])
        assert (held.st_ino, held.st_dev) == (lock.stat().st_ino, lock.stat().st_dev)
    assert [m for m in re.findall(r"msg=(\S+)", path.read_text())] == ["first", "second", "third"]


def test_a_line_that_fails_under_the_lock_lets_the_lock_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer whose check of the lock file fails (the state directory unreadable) raises,
    and the lock it took is free again: other writers are not held by a line never written."""
    import fcntl

    path = tmp_path / "supervisor.log"
    log = LogFile(str(path))
    log.info("tick", "first")
    real = os.stat

    def denied(name: object, *args: object, **kwargs: object) -> os.stat_result:
        if str(name).endswith(".lock"):
            raise PermissionError(13, "denied", str(name))
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", denied)
    with pytest.raises(PermissionError):
        log.info("tick", "never written")
    monkeypatch.setattr(os, "stat", real)
    other = os.open(f"{path}.lock", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the lock were kept
    finally:
        os.close(other)
    log.info("tick", "second")
    assert "never written" not in path.read_text() and "msg=second" in path.read_text()


def test_a_log_truncated_in_place_is_written_from_its_new_end(tmp_path: Path) -> None:
    """logrotate's ``copytruncate``: the open file is emptied; the next line starts it."""
    path = tmp_path / "supervisor.log"
    log = LogFile(str(path))
    log.info("tick", "before")
    os.truncate(path, 0)
    log.info("tick", "after")
    text = path.read_text()
    assert text.startswith("time=") and "msg=after" in text and "before" not in text


def test_a_forked_child_writes_with_its_own_files(tmp_path: Path) -> None:
    path = tmp_path / "supervisor.log"
    log = LogFile(str(path))
    log.info("tick", "parent before")
    pid = os.fork()
    if pid == 0:  # the child: its lock is its own, not the parent's open file
        try:
            log.info("tick", "child")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    log.info("tick", "parent after")
    text = path.read_text()
    assert [m for m in re.findall(r"msg=(\"[^\"]*\"|\S+)", text)] == [
        '"parent before"',
        "child",
        '"parent after"',
    ]


def test_queue_rows_coalesce_per_card_role_and_kind(store: Store) -> None:
    board = Board(store)
    board.add_project(human(), "Q")
    card = board.create_card(human(), "Q", "one")

    def put(role: str = "worker", kind: str = "handoff") -> records.QueueRow | None:
        with store.write() as tx:
            return records.enqueue(
                tx, kind, card.id, role, card.project_id, "box", "/tmp", 1, 1, {}
            )

    first = put()
    assert first is not None
    assert put() is None  # pending: coalesced
    with store.write() as tx:
        assert records.take_row(tx, first.id, "box:1")
    assert put() is None  # processing: still coalesced
    other_role = put(role="reviewer")
    other_kind = put(kind="question")
    assert other_role is not None and other_kind is not None
    with store.write() as tx:
        records.set_row(tx, first.id, state="done")
    again = put()
    assert again is not None and again.id != first.id  # a finished row does not coalesce
    with store.read() as tx:
        live = records.queue_rows(tx, states=("pending", "processing"))
    assert sorted((r.role, r.kind) for r in live) == [
        ("reviewer", "handoff"),
        ("worker", "handoff"),
        ("worker", "question"),
    ]
