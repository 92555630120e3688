"""Three supervisor processes — three simulated hosts — drain one PostgreSQL board.

Each runs ``lb start`` with its own ``LANEBOARD_MACHINE`` and state directory against one
database and one bare git remote (the project's ``--remote``: each host works in its own
clone). They drain 60 cards with the scripted agent: each writes its own file, which its
check tests; a fifth are reviewed (some rejected once and reworked); a third wait for
another card and check that its work is in their lane. One host is SIGKILLed mid-run and
its cards are fenced and finished elsewhere; every LISTEN connection is dropped mid-run
and comes back. Asserted from the board's own records and the remote's git log: no card
claimed twice under one epoch, no (card, round, epoch) turn started twice, every card
done and landed exactly once on the remote's base branch, each once-per-cluster pass on
one supervisor at a time.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.conftest import PG_BASE

from laneboard.board.service import Board
from laneboard.domain.model import human
from laneboard.store import Store, open_store
from laneboard.supervisor import records
from laneboard.workspace.git import git

CARDS = 60
HEARTBEAT_S = 1  # the supervisors beat every second
# failover after 6 s of silence: a healthy host whose beat thread a loaded 2-core machine
# stalls for a few seconds is not fenced (fencing one would be safe, but is not asserted)
FAILOVER_BEATS = 6
BOUND_S = FAILOVER_BEATS * HEARTBEAT_S


def _until(cond: Callable[[], bool], what: str, timeout: float = 480.0) -> None:
    """Wait for the processes to reach a state (never to let board time pass)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Host:
    def __init__(self, name: str, url: str, tmp: Path) -> None:
        cfg = tmp / name / "cfg" / "laneboard"
        cfg.mkdir(parents=True)
        (cfg / "config.toml").write_text(
            '[supervisor]\nsandbox = "off"\n'
            'sandbox_reason = "three simulated hosts on one test machine"\n'
            f"failover_beats = {FAILOVER_BEATS}\n"
            "[supervisor.time]\n"
            f"pool_heartbeat = {HEARTBEAT_S}\npool_stale = 5\nping_interval = 2\n"
        )
        self.name = name
        self.env = {
            **os.environ,
            "LANEBOARD_DATABASE_URL": url,
            "LANEBOARD_MACHINE": name,
            "XDG_STATE_HOME": str(tmp / name / "state"),
            "XDG_CONFIG_HOME": str(tmp / name / "cfg"),
        }
        for key in ("LANEBOARD_TOKEN", "LANEBOARD_TOKEN_FILE", "LANEBOARD_URL"):
            self.env.pop(key, None)
        self.log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "laneboard.cli.main", "start", "--agent", "scripted"],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def _listeners(schema: str) -> list[int]:
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        got = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()",
            (f"LISTEN %{schema}%",),
        ).fetchall()
    return sorted(int(r[0]) for r in got)


def _done(store: Store, refs: list[str]) -> int:
    with store.read() as tx:
        done = {r["ref"] for r in tx.all("SELECT ref FROM cards WHERE status = 'done'")}
    return len(done & set(refs))


def _remote(tmp: Path) -> Path:
    seed = tmp / "seed"
    seed.mkdir()
    git(str(seed), "init", "-q", "-b", "main")
    (seed / "README.md").write_text("cluster\n")
    git(str(seed), "add", "-A")
    git(str(seed), "commit", "-q", "-m", "initial", identity=True)
    bare = tmp / "remote.git"
    git(str(tmp), "clone", "-q", "--bare", str(seed), str(bare))
    return bare


APPROVE = {"verdict": "APPROVE", "body": "read it\n$ test -s", "evidence": ["0:test -s"]}
REJECT = {"verdict": "REJECT", "body": "not yet\n1. Say more"}


def _card_meta(i: int) -> tuple[str, dict[str, Any]]:
    """Card i's acceptance mode and script: its own file, checked by its check."""
    pause = {"sleep": 0.5 if i < 30 else 0.1}
    work = [pause, {"write": f"f{i}.txt", "content": f"card {i}\n"}, {"deliver": "ok"}]
    if i % 5:
        return "off", {"script": work}
    if i % 15:  # reviewed and approved
        return "auto", {"script": work, "review_script": [APPROVE]}
    redo = [{"write": f"f{i}.txt", "content": f"card {i}, said more\n"}, {"deliver": "more"}]
    return "auto", {"script": {"r1": work, "r2": redo},
                    "review_script": {"r1": [REJECT], "r2": [APPROVE]}}  # fmt: skip


@pytest.mark.timeout(600)  # 60 cards through git, checks and reviews on three hosts
def test_three_hosts_drain_the_board_through_a_kill_and_a_lost_listener(
    pg_url: str, tmp_path: Path
) -> None:
    try:
        _drain_three_hosts(pg_url, tmp_path)
    except BaseException:
        _show_the_logs(tmp_path)  # printed with the failure: its temporary files go soon
        raise


def _show_the_logs(tmp: Path) -> None:
    """Each host's warnings and errors, and the end of its output."""
    for n in (1, 2, 3):
        log = tmp / f"host{n}" / "state" / "laneboard" / "supervisor.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        said = [line for line in lines if "level=warn" in line or "level=error" in line]
        print(f"== host{n}: {len(said)} warnings and errors of {len(lines)} log lines")
        print("\n".join(said[-60:]))
        out = tmp / f"host{n}.log"
        if out.exists():
            print(f"== host{n}: the end of its output")
            print("\n".join(out.read_text(errors="replace").splitlines()[-20:]))


def _drain_three_hosts(pg_url: str, tmp_path: Path) -> None:
    schema = pg_url.rsplit("%3D", 1)[1]
    store = open_store(pg_url)
    board = Board(store)
    me = human("alice")
    bare = _remote(tmp_path)
    board.add_project(me, "C", remote=str(bare))
    refs: list[str] = []
    for i in range(CARDS):
        deps = [refs[i - CARDS // 3]] if i >= 2 * CARDS // 3 else []
        checks = [f"test -s f{i}.txt"]
        if deps:  # its lane holds its dependency's landed work, whichever host landed it
            checks.append(f"test -s f{i - CARDS // 3}.txt")
        mode, meta = _card_meta(i)
        card = board.create_card(
            me, "C", f"card {i}", acceptance_mode=mode, depends_on=deps,
            checks=checks, allowed_paths=[f"f{i}.txt"], meta=meta,
        )  # fmt: skip
        refs.append(card.ref)
    hosts = [Host(f"host{n}", pg_url, tmp_path) for n in (1, 2, 3)]
    try:
        _until(lambda: len(_listeners(schema)) >= 3, "three listeners")
        _until(lambda: _claimed_by(store, "host2") >= 1, "host2 running a card")
        _until(lambda: bool(_running_turns(store, "host2")), "host2 mid-turn")
        hosts[1].proc.send_signal(signal.SIGKILL)  # host2 dies mid-turn
        hosts[1].proc.wait(30)
        cut_short = _running_turns(store, "host2")
        before = _listeners(schema)
        with psycopg.connect(PG_BASE, autocommit=True) as conn:  # drop every LISTEN
            for pid in before:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        _until(lambda: len(set(_listeners(schema)) - set(before)) >= 2, "the listeners reconnected")
        _until(lambda: _done(store, refs) == CARDS, f"all {CARDS} cards done")
        live = [h for h in hosts if h.name != "host2"]
        _until(lambda: not any(_lanes_left(h) for h in live), "the live hosts' lanes cleaned")
    finally:
        for h in hosts:
            h.stop()
    _assert_landed_once(board, bare, refs)
    _assert_the_records(store, refs)
    with store.read() as tx:  # the dead host's turns end interrupted; none is left running
        if cut_short:
            marks = ",".join("?" * len(cut_short))
            got = tx.all(f"SELECT outcome FROM turns WHERE id IN ({marks})", cut_short)
            assert {r["outcome"] for r in got} == {"interrupted"}
        assert tx.scalar("SELECT count(*) FROM turns WHERE outcome = 'running'") == 0
    store.close()


def _lanes_left(host: Host) -> list[str]:
    """The lane checkouts in a host's clone: none once its cards are done and cleaned, and
    none of a card another host won (its lane, made before a claim it lost, is removed)."""
    root = Path(host.env["XDG_STATE_HOME"], "laneboard", "clones", "C", ".worktrees")
    return sorted(os.listdir(root)) if root.is_dir() else []


def _running_turns(store: Store, machine: str) -> list[int]:
    with store.read() as tx:
        return [
            int(r["id"])
            for r in tx.all(
                "SELECT t.id FROM turns t JOIN queue q ON q.id = t.queue_id "
                "WHERE q.machine = ? AND t.outcome = 'running'",
                (machine,),
            )
        ]


def _assert_landed_once(board: Board, bare: Path, refs: list[str]) -> None:
    """The remote's base holds every card's work, each brought in by one landing merge."""
    log = git(str(bare), "log", "--first-parent", "--format=%H %s", "main").out.splitlines()
    subjects = {h: subject for h, _, subject in (line.partition(" ") for line in log)}
    landed = Counter(s.split(":")[0].removeprefix("Land ") for s in subjects.values()
                     if s.startswith("Land "))  # fmt: skip
    assert landed == Counter(refs), "a card did not land exactly once on the remote's main"
    tree = set(git(str(bare), "ls-tree", "--name-only", "main").out.split())
    assert tree == {"README.md", *(f"f{i}.txt" for i in range(CARDS))}
    for i, ref in enumerate(refs):
        card = board.get(ref)
        merge = card.meta["merge_commit"]
        assert subjects[merge].startswith(f"Land {ref}:"), ref
        said = git(str(bare), "show", f"main:f{i}.txt").out
        assert said == (f"card {i}, said more\n" if i % 15 == 0 else f"card {i}\n")
        if i % 15 == 0:
            assert card.delivery_round == 2, ref  # rejected once, reworked, then landed


def _claimed_by(store: Store, machine: str) -> int:
    with store.read() as tx:
        got = tx.scalar(
            "SELECT count(*) FROM queue WHERE machine = ? AND state = 'processing'", (machine,)
        )
        return int(got or 0)


def _assert_the_records(store: Store, refs: list[str]) -> None:
    board = Board(store)
    events = board.events(0, limit=100_000)
    claims = Counter((e.card_id, e.payload["epoch"]) for e in events if e.type == "card.claimed")
    assert [k for k, n in claims.items() if n > 1] == [], "a card was claimed twice"
    with store.read() as tx:
        twice = tx.all(
            "SELECT q.card_id, q.round, q.epoch, count(*) AS n FROM turns t JOIN queue q "
            "ON t.queue_id = q.id GROUP BY q.card_id, q.round, q.epoch HAVING count(*) > 1"
        )
        assert twice == [], "a (card, round, epoch) turn started twice"
        statuses = {r["status"] for r in tx.all("SELECT status FROM cards")}
        runs = tx.pass_runs(limit=100_000)
        beats = {
            r["id"]: int(r["heartbeat_at"])
            for r in tx.all("SELECT id, heartbeat_at FROM supervisors")
        }
    assert statuses == {"done"}
    fenced = [e for e in events if e.type == "supervisor.fenced"]
    assert [e.payload["machine"] for e in fenced] == ["host2"]
    fence = fenced[0]
    delay_s = (fence.at - beats[fence.payload["instance"]]) / 1000
    # fenced at another supervisor's beat after the bound: a few beats late at most (beats
    # run on threads, which a machine loaded with other work delays)
    assert BOUND_S <= delay_s <= BOUND_S + 20, f"fenced {delay_s:.1f}s after its last beat"
    taken = set(fence.payload["cards"])
    assert taken, "host2 was running cards"
    with store.read() as tx:  # each card host2 held was finished by another host
        for ref in taken:
            card = board.get(ref)
            rows = records.queue_rows(tx, card_id=card.id, states=("done",), limit=100)
            assert {r.machine for r in rows if r.epoch == card.claim_epoch} <= {"host1", "host3"}
    by_pass: dict[str, list[tuple[int, int | None, str]]] = {}
    for r in runs:
        by_pass.setdefault(r["name"], []).append((r["started_at"], r["finished_at"], r["holder"]))
    # the landing pass runs only when its probe finds a done card whose lane is not landed
    # (``_lanes_idle``): in a run where no probe found one, it took no lease and ran nowhere
    assert {"workflow", "patrol"} <= set(by_pass) <= {"workflow", "patrol", "lanes"}
    for name, spans in by_pass.items():
        spans.sort()
        for (_start, end, holder), (nxt, _, _) in itertools.pairwise(spans):
            if end is None:  # the killed host's pass: its lease went with the fence
                assert holder.startswith("host2:") and nxt >= fence.at - 1, name
            else:
                assert end <= nxt, f"two {name} passes overlapped"
