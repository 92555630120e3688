"""SIGKILL the supervisor mid-turn: nothing is lost, no card gets a second worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store, open_store
from laneboard.supervisor import records

from .helpers import wait_for


def _done(store: Store) -> int:
    with store.read() as tx:
        return len(records.queue_rows(tx, states=("done",)))


def _start(env: dict[str, str]) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "start", "--agent", "scripted"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stderr is not None
    assert "supervisor running" in p.stderr.readline()
    return p


def test_sigkill_then_restart_resumes_the_same_sessions(store_url: str, tmp_path: Path) -> None:
    cfg_dir = tmp_path / "cfg" / "laneboard"
    cfg_dir.mkdir(parents=True)
    # the ping clock (which recovers rows whose agent died) runs every second here
    (cfg_dir / "config.toml").write_text(
        "[supervisor]\nevent_poll_ms = 50\n"
        # these agents report their process ids to the test, which a PID namespace hides
        'sandbox = "off"\nsandbox_reason = "the test reads agent pids from the host"\n'
        "[supervisor.time]\nping_interval = 1\n"
    )
    env = {
        **os.environ,
        "LANEBOARD_DATABASE_URL": store_url,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        "LANEBOARD_MACHINE": "crashbox",
    }
    proj = tmp_path / "proj"
    proj.mkdir()
    trace = proj / "trace.log"
    store = open_store(store_url)
    board = Board(store)
    board.add_project(human(), "K", path=str(proj))
    # a worker that finds an earlier worker of its card still running says so
    start = (
        f'for p in $(awk \'$1 == "start" && $2 == "{{card}}" {{print $3}}\' '
        f"{trace} 2>/dev/null); do s=$(awk '{{print $3}}' /proc/$p/stat 2>/dev/null); "
        f'[ -n "$s" ] && [ "$s" != Z ] && echo overlap {{card}} $p >> {trace}; done; '
        f"echo start {{card}} $PPID $(date +%s.%N) >> {trace}"
    )
    script = [
        # the first worker sleeps inside the same step, so it outlives the lost pipe by 2 s
        # whenever the supervisor is killed: an agent writes to the pipe only between steps
        {"run": f"{start}; sleep 2", "attempt": 1},
        {"run": start, "attempt": 2},
        {"run": f"echo end {{card}} $$ >> {trace}"},
        {"deliver": "done"},
    ]
    refs = [
        board.create_card(human(), "K", f"k{i}", acceptance_mode="off", meta={"script": script}).ref
        for i in range(3)
    ]
    sup = _start(env)
    try:
        wait_for(
            lambda: trace.exists() and trace.read_text().count("start") == 3,
            what="three turns running",
        )
        sup.send_signal(signal.SIGKILL)
        sup.wait(10)
    finally:
        if sup.stderr:
            sup.stderr.close()
    with store.read() as tx:
        rows = records.queue_rows(tx, states=("processing",))
        first_sessions = {r.card_id: r for r in records.sessions(tx, ("running",))}
    assert len(rows) == 3  # nothing was lost: the rows are still there, mid-turn
    sup = _start(env)
    try:
        wait_for(
            lambda: all(board.get(r).status.value in ("in_review", "done") for r in refs),
            timeout=60,
            what="recovered cards delivered",
        )
        wait_for(lambda: _done(store) == 3, what="rows done")
    finally:
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
        if sup.stderr:
            sup.stderr.close()
    with store.read() as tx:
        done = records.queue_rows(tx, states=("done",))
        turns = tx.all(
            "SELECT card_id, native_id, outcome, started_at, finished_at FROM turns ORDER BY id"
        )
        rows_now = records.queue_rows(
            tx, states=("pending", "processing", "done", "failed", "interrupted")
        )
    assert len(done) == 3 and len(rows_now) == 3  # same three rows, all finished
    assert all(r.recoveries == 1 for r in done)
    by_card: dict[int, list[dict[str, object]]] = {}
    for t in turns:
        by_card.setdefault(int(str(t["card_id"])), []).append(t)
    for card_id, ts in by_card.items():
        assert [t["outcome"] for t in ts] == ["lost", "ok"]
        # the interrupted turn resumed the same native session (or was replayed)
        assert ts[1]["native_id"] == ts[0]["native_id"] == first_sessions[card_id].native_id
    # never two workers on one card: the first agent (killed by the lost pipe only after
    # its 2 s sleep, at its next write) was still alive at restart, so the second may
    # start only after that
    lines = [ln.split() for ln in trace.read_text().splitlines()]
    assert [ln for ln in lines if ln[0] == "overlap"] == []
    for ref in refs:
        starts = [float(ln[3]) for ln in lines if ln[0] == "start" and ln[1] == ref]
        assert len(starts) == 2 and starts[1] - starts[0] >= 2.0
        assert sum(1 for ln in lines if ln[0] == "end" and ln[1] == ref) == 1
    store.close()


def test_sigterm_interrupts_running_turns_and_a_restart_resumes_them(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    """A clean shutdown mid-turn: the turns are recorded ``interrupted`` (never lost), the
    agents are stopped, and the next supervisor resumes the same native sessions."""
    store_url = sqlite_store_url
    env = {
        **os.environ,
        "LANEBOARD_DATABASE_URL": store_url,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
        "LANEBOARD_MACHINE": "termbox",
    }
    proj = tmp_path / "proj"
    proj.mkdir()
    trace = proj / "trace.log"
    store = open_store(store_url)
    board = Board(store)
    board.add_project(human(), "T", path=str(proj))
    script = [
        {"run": f"echo start {{card}} $$ >> {trace}"},
        {"hang": True, "attempt": 1},
        {"deliver": "done"},
    ]
    refs = [
        board.create_card(human(), "T", f"t{i}", acceptance_mode="off", meta={"script": script}).ref
        for i in range(2)
    ]
    sup = _start(env)
    try:
        wait_for(
            lambda: trace.exists() and trace.read_text().count("start") == 2,
            what="two turns running",
        )
        with store.read() as tx:
            pids = [r.pid for r in records.queue_rows(tx, states=("processing",))]
        assert len(pids) == 2 and all(pids)
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
    finally:
        if sup.poll() is None:
            sup.kill()
        if sup.stderr:
            sup.stderr.close()
    with store.read() as tx:
        rows = records.queue_rows(tx, states=("interrupted",))
        turns = tx.all("SELECT card_id, native_id, outcome FROM turns ORDER BY id")
    assert len(rows) == 2  # both rows kept, marked interrupted
    assert [t["outcome"] for t in turns] == ["interrupted", "interrupted"]
    for pid in pids:
        assert pid is not None
        wait_for(lambda pid=pid: not _alive(pid), what=f"agent {pid} stopped")
    assert all(board.get(r).status.value == "in_progress" for r in refs)  # claims kept
    sup = _start(env)
    try:
        wait_for(
            lambda: all(board.get(r).status.value in ("in_review", "done") for r in refs),
            timeout=60,
            what="interrupted cards resumed and delivered",
        )
        wait_for(lambda: _done(store) == 2, what="rows done")
    finally:
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
        if sup.stderr:
            sup.stderr.close()
    with store.read() as tx:
        turns = tx.all("SELECT card_id, native_id, outcome FROM turns ORDER BY id")
        done = records.queue_rows(tx, states=("done",))
    assert len(done) == 2 and {r.id for r in done} == {r.id for r in rows}  # the same rows
    by_card: dict[int, list[dict[str, object]]] = {}
    for t in turns:
        by_card.setdefault(int(str(t["card_id"])), []).append(t)
    for ts in by_card.values():
        assert [t["outcome"] for t in ts] == ["interrupted", "ok"]
        assert ts[0]["native_id"] == ts[1]["native_id"]  # the same session, resumed
    store.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
