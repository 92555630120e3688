"""Delivery verification by the runtime: scope, checks with logs and timeouts, evidence."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest
from tests.workspace.helpers import ME, claimed, deliver, gated, git, project

from laneboard.board.service import Board
from laneboard.domain.model import agent
from laneboard.errors import LaneboardError
from laneboard.store import Store
from laneboard.workspace.verify import verify_delivery


def refused(board: Board, ref: str) -> LaneboardError:
    c = board.get(ref)
    worker = agent("worker", c.id, c.claim_epoch)
    board.report(worker, ref, "delivered")
    with pytest.raises(LaneboardError) as err:
        board.move(worker, ref, "in_review")
    assert err.value.code == "VERIFICATION_FAILED" and err.value.http_status == 409
    after = board.get(ref)
    assert after.status.value == "in_progress" and after.version == c.version
    return err.value


def test_changes_outside_the_allowed_paths_are_refused_with_the_paths(
    store: Store, repo: Path
) -> None:
    board = gated(store)
    project(board, repo)
    card, lane = claimed(board, allowed_paths=["src/auth"])
    Path(lane, "src/auth").mkdir(parents=True)
    Path(lane, "src/auth/login.py").write_text("ok\n")
    Path(lane, "docs").mkdir()
    Path(lane, "docs/notes.md").write_text("outside\n")  # untracked
    Path(lane, "README.md").write_text("changed\n")  # tracked, uncommitted
    Path(lane, "src/authz.py").write_text("a prefix is not a directory\n")
    git(lane, "add", "src/authz.py")
    git(lane, "commit", "-q", "-m", "committed outside")
    err = refused(board, card.ref)
    assert err.details["paths"] == ["README.md", "docs/notes.md", "src/authz.py"]
    assert "docs/notes.md" in err.message and "src/auth" in err.message
    assert "src/auth/login.py" not in err.message
    # the delivery report carries no runtime evidence from a refused verification
    assert board.reports(card.ref)[0].evidence == ()


def test_a_symlink_escaping_the_repository_is_refused(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    card, lane = claimed(board)
    os.symlink("/etc/passwd", os.path.join(lane, "passwd"))
    os.symlink("README.md", os.path.join(lane, "readme-link"))  # inside: fine
    err = refused(board, card.ref)
    assert err.details["paths"] == ["passwd (symlink escapes the repository)"]


def test_a_failing_check_is_refused_with_its_log(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo, review_gate="echo gate-ran")
    card, lane = claimed(board, checks=["echo first-ok", "echo boom >&2; exit 3", "echo never"])
    err = refused(board, card.ref)
    log = Path(err.details["log_path"])
    assert err.details["command"] == "echo boom >&2; exit 3" and err.details["exit_code"] == 3
    kept = Path(repo, ".laneboard", "lanes", os.path.basename(lane), "P-1", "checks")
    assert log.is_file() and log.parent == kept
    assert "boom" in log.read_text()
    assert str(log) in err.message and "exited 3" in err.message
    assert sorted(p.name for p in log.parent.iterdir()) == [
        "r1-01-echo-first-ok.log",
        "r1-02-echo-boom-2-exit-3.log",
    ]


def test_a_reports_check_log_outlives_the_lanes_tree(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    card, lane = claimed(board, checks=["echo kept-output"])
    deliver(board, card)
    [ev] = [e for e in board.reports(card.ref)[0].evidence if e.log_path]
    assert ev.log_path is not None and not ev.log_path.startswith(lane + os.sep)
    shutil.rmtree(lane)  # cleanup removes the lane's tree
    assert not os.path.exists(lane)
    assert "kept-output" in Path(ev.log_path).read_text()


def test_a_check_that_runs_too_long_is_killed_and_refused(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo, check_timeout=0.5)
    card, _ = claimed(board, checks=["echo started; sleep 30; echo fin${x}ished"])
    t0 = time.monotonic()
    err = refused(board, card.ref)
    assert time.monotonic() - t0 < 15
    assert err.details["exit_code"] == 124 and "timed out" in err.message
    text = Path(err.details["log_path"]).read_text()
    assert "started" in text and "finished" not in text and "timed out after 0.5 s" in text


def test_a_verified_delivery_appends_evidence_and_commits_the_lane(
    store: Store, repo: Path
) -> None:
    board = gated(store)
    project(board, repo, review_gate=["test -f src/app.py"])
    card, lane = claimed(board, checks=["grep -q hello src/app.py"], allowed_paths=["src"])
    Path(lane, "src").mkdir()
    Path(lane, "src/app.py").write_text("hello\n")  # left uncommitted by the agent
    moved = deliver(board, card)
    assert moved.status.value == "in_review"
    ev = board.reports(card.ref)[0].evidence
    assert [e.command for e in ev] == [
        "grep -q hello src/app.py",
        "test -f src/app.py",
        "git rev-parse HEAD",
    ]
    assert all(e.exit_code == 0 for e in ev)
    for e in ev[:2]:
        assert e.digest.startswith("sha256:") and len(e.digest) == 7 + 64
        assert e.log_path is not None and Path(e.log_path).is_file()
    head = git(lane, "rev-parse", "HEAD")
    assert ev[2].digest == f"git:{head}" and "committed 1 uncommitted change" in ev[2].summary
    assert git(lane, "status", "--porcelain") == ""
    assert git(lane, "show", "--name-only", "--format=", "HEAD") == "src/app.py"
    moved_event = [e for e in board.events(0, limit=1000) if e.type == "card.moved"][-1]
    assert moved_event.payload["verified"] == 3


def test_no_lane_means_no_runtime_verification(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    c = board.create_card(ME, "P", "unadmitted", checks=["false"])
    c = board.claim(ME, c.ref, holder="worker")
    v = verify_delivery(store, c)
    assert v.ok and v.evidence == [] and v.lane is None
    assert deliver(board, c).status.value == "in_review"


def test_a_refused_move_runs_no_checks(store: Store, repo: Path) -> None:
    board = gated(store)
    project(board, repo)
    card, lane = claimed(board, checks=["touch ran.txt"])
    worker = agent("worker", card.id, card.claim_epoch)
    with pytest.raises(LaneboardError) as err:  # no delivery report yet
        board.move(worker, card.ref, "in_review")
    assert err.value.code == "REPORT_REQUIRED"
    assert not Path(lane, "ran.txt").exists()


def test_a_check_that_prints_hundreds_of_megabytes_is_read_in_pieces(tmp_path: Path) -> None:
    """The evidence of a check is its log's digest and tail: a check that prints without
    end (an agent may have changed what it runs) costs the runtime no more memory."""
    import hashlib
    import tracemalloc

    from laneboard.workspace.verify import run_check

    log = tmp_path / "logs" / "01-flood.log"
    cmd = "head -c 209715200 /dev/zero | tr '\\0' x; echo; echo the last line"
    tracemalloc.start()
    try:
        evidence = run_check(cmd, str(tmp_path), str(log), 120)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"held {peak >> 20} MB"
    digest = hashlib.sha256()
    with open(log, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    assert evidence.exit_code == 0 and evidence.digest == "sha256:" + digest.hexdigest()
    assert evidence.summary.endswith("x\nthe last line")


def test_a_check_that_prints_without_end_keeps_a_log_of_bounded_size(tmp_path: Path) -> None:
    """An agent's code under a check may print without end: the log keeps the first and
    the last bytes, says how many were cut between them, and the check runs to its end."""
    import hashlib

    from laneboard.workspace.check_log import LOG_HEAD, LOG_TAIL
    from laneboard.workspace.verify import run_check

    log = tmp_path / "logs" / "01-flood.log"
    size = 50 << 20
    cmd = f"echo first; head -c {size} /dev/zero | tr '\\0' x; echo; echo the last line"
    evidence = run_check(cmd, str(tmp_path), str(log), 120)
    data = log.read_bytes()
    assert evidence.exit_code == 0
    assert evidence.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert evidence.summary.endswith("x\nthe last line")
    head, _, tail = data.partition(b"\n[laneboard] ")
    assert head == f"$ {cmd}\n".encode() + b"first\n" + b"x" * (LOG_HEAD - len("first\n"))
    said, _sep, kept = tail.partition(b"\n")
    assert len(kept) == LOG_TAIL and kept.endswith(b"x\nthe last line\n")
    printed = len("first\n") + size + len("\nthe last line\n")
    cut = printed - LOG_HEAD - LOG_TAIL
    assert said.startswith(f"{cut} bytes of output cut here".encode())
    assert len(data) < LOG_HEAD + LOG_TAIL + 4096


def test_a_check_ends_when_its_command_does_though_it_left_a_process_on_its_output(
    tmp_path: Path,
) -> None:
    """A background process keeps the check's output open; the check is over when its
    command is, as when the output went straight to the file."""
    import signal

    from laneboard.workspace.verify import run_check

    pid_file = tmp_path / "sleeper.pid"
    cmd = f"sleep 600 & echo $! > {pid_file}; echo done"
    try:
        evidence = run_check(cmd, str(tmp_path), str(tmp_path / "logs" / "01.log"), 60)
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert evidence.exit_code == 0 and evidence.summary.endswith("\ndone")


def test_a_check_that_prints_without_pause_still_times_out(tmp_path: Path) -> None:
    """The reader of a check that never stops printing still looks at the clock."""
    from laneboard.workspace.check_log import LOG_HEAD, LOG_TAIL
    from laneboard.workspace.verify import TIMEOUT_EXIT, run_check

    log = tmp_path / "logs" / "01-yes.log"
    evidence = run_check("yes", str(tmp_path), str(log), 0.5)
    assert evidence.exit_code == TIMEOUT_EXIT
    assert evidence.summary.startswith("timed out after 0.5 s\n")
    assert log.stat().st_size < LOG_HEAD + LOG_TAIL + 4096
