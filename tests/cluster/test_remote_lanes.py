"""Lanes across machines: a project with a shared git remote.

Two simulated machines (``a`` and ``b``: each its own clones directory, as each has its own
state directory) share one board and one bare remote. Lanes are made in a machine's clone
from the remote's base; a verified delivery's lane branch is pushed; any machine lands it
onto the remote's base with a lease-checked push. Every git here is real, with real hooks
in the bare remote to make the races happen at a chosen point.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from tests.workspace.helpers import ME, commit_file, deliver, git

from laneboard.board.service import Board
from laneboard.domain.model import Card
from laneboard.errors import LaneboardError
from laneboard.store import Store
from laneboard.workspace import remote as rm
from laneboard.workspace.hooks import install
from laneboard.workspace.lane_admit import LaneAdmitter
from laneboard.workspace.lanes import lane_for
from laneboard.workspace.remote import CLONE_MARK


def bare_remote(tmp: Path) -> tuple[Path, Path]:
    """A bare remote with one commit on ``main``, and a working clone of it (``seed``)."""
    seed = tmp / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    git(seed, "config", "user.email", "test@example.com")
    git(seed, "config", "user.name", "Test")
    commit_file(seed, "README.md", "hello\n", "initial")
    bare = tmp / "remote.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(bare))
    git(seed, "remote", "add", "origin", str(bare))
    git(seed, "fetch", "-q", "origin")
    return bare, seed


def machine(store: Store, tmp: Path, name: str) -> tuple[Board, str]:
    """One machine's view of the board: its gates and admitter use its own clones."""
    clones = str(tmp / name / "clones")
    return install(Board(store), clones=clones), clones


def claimed_on(board: Board, clones: str, **card: Any) -> tuple[Card, str]:
    c = board.create_card(ME, "P", str(card.pop("title", "do the thing")), **card)
    lane = LaneAdmitter(board, clones=clones).admit(c, board.project("P"))
    return board.claim(ME, c.ref, holder="worker"), lane


def remote_log(bare: Path, branch: str = "main") -> list[str]:
    return git(bare, "log", "--first-parent", "--format=%s", branch).splitlines()


def landed_events(board: Board, card: Card) -> list[dict[str, object]]:
    return [e.payload for e in board.events(0, limit=10_000)
            if e.type == "lane.landed" and e.card_id == card.id]  # fmt: skip


def hook(bare: Path, name: str, body: str) -> None:
    path = bare / "hooks" / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_a_lane_made_on_one_machine_lands_on_the_remote_from_another(
    store: Store, tmp_path: Path
) -> None:
    bare, _ = bare_remote(tmp_path)
    a, a_clones = machine(store, tmp_path, "a")
    b, b_clones = machine(store, tmp_path, "b")
    a.add_project(ME, "P", remote=str(bare))
    card, lane = claimed_on(a, a_clones, acceptance_mode="off")
    clone_a = os.path.join(a_clones, "P")
    assert lane == os.path.join(clone_a, ".worktrees", "P-1")
    assert os.path.isfile(os.path.join(clone_a, ".git", CLONE_MARK))
    commit_file(lane, "feature.txt", "new\n", "the work")
    delivered = deliver(a, card)  # verified on a, its lane branch pushed to the remote
    head = git(lane, "rev-parse", "HEAD")
    assert git(bare, "rev-parse", "refs/heads/lane/P-1") == head
    assert not os.path.exists(os.path.join(b_clones, "P"))
    done = b.move(ME, delivered.ref, "done")  # landed by b, which never saw the lane
    merge = git(bare, "rev-parse", "main")
    assert done.meta["merge_commit"] == merge
    assert git(bare, "rev-list", "--parents", "-n", "1", "main").split()[2] == head
    assert remote_log(bare)[0] == "Land P-1: do the thing (lane/P-1)"
    assert git(bare, "show", "main:feature.txt") == "new"
    with store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and rec.state == "landed" and rec.target_branch == "main"
    assert rec.repo == os.path.realpath(clone_a)  # the lane stays the machine's that ran it
    # the next lane, made on a, starts from the remote's new base
    _, lane2 = claimed_on(a, a_clones, title="next")
    assert git(lane2, "rev-parse", "HEAD") == merge
    assert (Path(lane2) / "feature.txt").read_text() == "new\n"


def test_a_push_refused_because_the_base_moved_is_retried_from_the_new_base(
    store: Store, tmp_path: Path
) -> None:
    bare, seed = bare_remote(tmp_path)
    other = commit_file(seed, "other.txt", "theirs\n", "someone else's change")
    git(seed, "push", "-q", "origin", "HEAD:refs/test/next")
    git(seed, "reset", "-q", "--hard", "HEAD~1")
    mark = tmp_path / "moved"
    # the first push to main finds main moved by someone else just before it
    hook(bare, "pre-receive", f"""
while read old new ref; do
  if [ "$ref" = refs/heads/main ] && [ ! -e {mark} ]; then
    touch {mark}
    env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES \\
      git update-ref refs/heads/main {other}
  fi
done
""")  # fmt: skip
    a, a_clones = machine(store, tmp_path, "a")
    a.add_project(ME, "P", remote=str(bare))
    card, lane = claimed_on(a, a_clones, acceptance_mode="off")
    commit_file(lane, "feature.txt", "new\n", "the work")
    head = git(lane, "rev-parse", "HEAD")
    done = a.move(ME, deliver(a, card).ref, "done")
    assert mark.exists(), "the base moved under the first push"
    merge = git(bare, "rev-parse", "main")
    assert done.meta["merge_commit"] == merge
    parents = git(bare, "rev-list", "--parents", "-n", "1", "main").split()[1:]
    assert parents == [other, head]  # merged again onto the new base, nothing lost
    assert git(bare, "show", "main:other.txt") == "theirs"
    assert git(bare, "show", "main:feature.txt") == "new"
    assert [p.get("push_retries") for p in landed_events(a, card)] == [1]


def test_a_conflict_with_the_remote_base_is_refused_with_what_conflicts(
    store: Store, tmp_path: Path
) -> None:
    bare, seed = bare_remote(tmp_path)
    a, a_clones = machine(store, tmp_path, "a")
    a.add_project(ME, "P", remote=str(bare))
    card, lane = claimed_on(a, a_clones, acceptance_mode="off")
    commit_file(lane, "README.md", "mine\n", "the work")
    delivered = deliver(a, card)
    theirs = commit_file(seed, "README.md", "theirs\n", "someone else's change")
    git(seed, "push", "-q", "origin", "HEAD:main")
    with pytest.raises(LaneboardError) as err:
        a.move(ME, delivered.ref, "done")
    assert err.value.code == "LANDING_BLOCKED"
    assert git(bare, "rev-parse", "main") == theirs  # nothing pushed
    assert a.get(card.ref).status.value == "in_review"
    blocked = [e.payload for e in a.events(0, limit=10_000) if e.type == "lane.land_blocked"]
    conflict = blocked[-1]["conflict"]
    assert conflict["files"] == ["README.md"] and conflict["onto"] == "main"
    assert conflict["onto_commit"] == theirs
    assert conflict["lane_commit"] == git(lane, "rev-parse", "HEAD")


def test_a_landing_that_pushed_and_died_before_recording_lands_once(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    bare, _ = bare_remote(tmp_path)
    pushed, go = tmp_path / "pushed", tmp_path / "go"
    # after the remote accepted the merge, hold the pushing process until it is killed
    hook(bare, "post-receive", f"""
touch {pushed}
while [ ! -e {go} ]; do sleep 0.05; done
""")  # fmt: skip
    a, a_clones = machine(store, tmp_path, "a")
    a.add_project(ME, "P", remote=str(bare))
    card, lane = claimed_on(a, a_clones, acceptance_mode="off")
    commit_file(lane, "feature.txt", "new\n", "the work")
    (tmp_path / "go").touch()  # the delivery's own push of the lane branch passes
    delivered = deliver(a, card)
    go.unlink()
    pushed.unlink()
    env = {**os.environ, "LANEBOARD_DATABASE_URL": store_url,
           "XDG_STATE_HOME": str(tmp_path / "b" / "state")}  # fmt: skip
    for k in ("LANEBOARD_TOKEN", "LANEBOARD_TOKEN_FILE", "LANEBOARD_URL"):
        env.pop(k, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "laneboard.cli.main", "land", delivered.ref],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait(lambda: pushed.exists() or proc.poll() is not None, "the landing's push")
        assert proc.poll() is None, "the landing finished before its push was held"
        proc.send_signal(signal.SIGKILL)  # dies after the push, before anything is recorded
        proc.wait(30)
    finally:
        go.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    merge = git(bare, "rev-parse", "main")
    assert remote_log(bare)[0].startswith("Land P-1:")
    assert a.get(card.ref).status.value == "in_review"  # nothing recorded
    with store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and rec.state == "active"
    done = a.move(ME, delivered.ref, "done")  # the landing again: already on the remote
    assert done.meta["merge_commit"] == merge
    assert git(bare, "rev-parse", "main") == merge, "landed a second time"
    assert sum(s.startswith("Land P-1:") for s in remote_log(bare)) == 1
    assert [p["already_merged"] for p in landed_events(a, card)] == [True]


def test_a_project_without_a_remote_keeps_its_checkout(
    store: Store, repo: Path, tmp_path: Path
) -> None:
    a, a_clones = machine(store, tmp_path, "a")
    p = a.add_project(ME, "P", path=str(repo))
    assert p.remote is None and a.project("P").to_dict()["remote"] is None
    card, lane = claimed_on(a, a_clones, acceptance_mode="off")
    assert lane == os.path.join(os.path.realpath(repo), ".worktrees", "P-1")
    commit_file(lane, "feature.txt", "new\n", "the work")
    done = a.move(ME, deliver(a, card).ref, "done")
    assert done.meta["merge_commit"] == git(repo, "rev-parse", "HEAD")
    assert (repo / "feature.txt").read_text() == "new\n"
    assert not os.path.exists(a_clones), "no clone for a project without a remote"


def test_lb_project_add_remote_is_shown_by_get(store_url: str, tmp_path: Path) -> None:
    bare, _ = bare_remote(tmp_path)
    env = {**os.environ, "LANEBOARD_DATABASE_URL": store_url}
    for k in ("LANEBOARD_TOKEN", "LANEBOARD_TOKEN_FILE", "LANEBOARD_URL"):
        env.pop(k, None)

    def lb(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "laneboard.cli.main", *args], env=env,
                              check=True, capture_output=True, text=True, cwd=tmp_path).stdout  # fmt: skip

    assert "remote " + str(bare) in lb("project", "add", "P", "--remote", "remote.git")
    got = json.loads(lb("project", "get", "P", "--json"))
    assert got["remote"] == str(bare) and got["path"] is None
    assert str(bare) in lb("project", "list")


def _wait(cond: object, what: str, timeout: float = 120.0) -> None:
    """Wait for a real process to reach a state (never to let board time pass)."""
    import time

    assert callable(cond)
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_conflict_on_the_remote_goes_back_to_its_worker_and_lands(
    sqlite_store_url: str, tmp_path: Path
) -> None:
    from tests.supervisor.helpers import RealNowClock, Running, config, settled, wait_for
    from tests.supervisor.test_conflicts import _two_sides

    from laneboard.store import open_store

    bare, _ = bare_remote(tmp_path)
    clock = RealNowClock()
    store = open_store(sqlite_store_url, clock)
    board = Board(store)
    board.add_project(ME, "C", remote=str(bare))
    resolve = [
        {"run": "grep -q '<<<<<<<' shared.txt"},  # the lane holds both sides, in conflict
        {"run": "printf 'a\\nb\\n' > shared.txt"},
        {"deliver": "both sides kept"},
    ]
    first, second = _two_sides(board, resolve)
    with Running(sqlite_store_url, config(tmp_path, max_concurrency=2), clock) as running:
        wait_for(
            lambda: all(board.get(r).status.value == "done" for r in (first, second)),
            timeout=300, what="both sides landed",
        )  # fmt: skip
        wait_for(lambda: settled(store), what="turns recorded")
        clones = running.rt.clones
    card = board.get(second)
    assert card.delivery_round == 2 and card.meta["conflict_attempts"] == 1
    assert card.meta["landing_conflict"]["files"] == ["shared.txt"]
    assert card.meta["landing_conflict"]["onto"] == "main"
    assert git(bare, "show", "main:shared.txt") == "a\nb"  # the worker's resolution
    subjects = remote_log(bare)
    assert sum(s.startswith(f"Land {first}:") for s in subjects) == 1
    assert sum(s.startswith(f"Land {second}:") for s in subjects) == 1
    assert card.meta["merge_commit"] == git(bare, "rev-parse", "main") or first in subjects[0]
    assert os.path.isdir(os.path.join(clones, "C"))
    store.close()


def test_a_machines_lane_is_cleaned_by_it_after_another_machine_landed_it(
    store: Store, tmp_path: Path
) -> None:
    """Machines keep their clones at the same path (the same state directory layout on each
    host): the lane record's machine, not its path, tells whose lane it is."""
    from laneboard.workspace.land import cleanup_terminal

    bare, _ = bare_remote(tmp_path)
    root = tmp_path / "state" / "clones"  # the one path every machine uses
    a = install(Board(store), clones=str(root))
    a.add_project(ME, "P", remote=str(bare))
    c = a.create_card(ME, "P", "do the thing", acceptance_mode="off")
    lane = LaneAdmitter(a, clones=str(root), machine="a").admit(c, a.project("P"))
    card = a.claim(ME, c.ref, holder="worker")
    commit_file(lane, "feature.txt", "new\n", "the work")
    delivered = deliver(a, card)
    with store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and rec.machine == "a"
    (root / "P").rename(tmp_path / "a-clone")  # machine a's disk, out of b's sight
    b = install(Board(store), clones=str(root))
    assert b.move(ME, delivered.ref, "done").meta["merge_commit"] == git(bare, "rev-parse", "main")
    assert os.path.isdir(root / "P" / ".git"), "b landed from its own clone at the same path"
    assert cleanup_terminal(store, clones=str(root), machine="b") == []  # not b's lane
    with store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and rec.state == "landed"
    assert git(bare, "rev-parse", "--verify", "-q", "refs/heads/lane/P-1")
    # back on machine a
    shutil.rmtree(root / "P")
    (tmp_path / "a-clone").rename(root / "P")
    assert os.path.isdir(lane)
    got = cleanup_terminal(store, clones=str(root), machine="a")
    assert [x["action"] for x in got] == ["cleaned"], got
    assert not os.path.exists(lane)
    with store.read() as tx:
        rec = lane_for(tx, card.id, 1)
    assert rec is not None and rec.state == "cleaned"
    refs = subprocess.run(["git", "-C", str(bare), "for-each-ref", "refs/heads/lane/"],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert refs == "", "the lane branch is deleted from the remote too"


def test_a_machines_lane_record_is_not_swept_by_another_machine(
    store: Store, tmp_path: Path
) -> None:
    """Every machine sweeps lane records whose tree and branch are gone. Another machine's
    clone at the same path has neither of a's lane, so only a may judge a's record."""
    from laneboard.workspace.land import sweep_lanes

    bare, _ = bare_remote(tmp_path)
    root = tmp_path / "state" / "clones"  # the one path every machine uses
    board = install(Board(store), clones=str(root))
    board.add_project(ME, "P", remote=str(bare))
    mine = board.create_card(ME, "P", "a's card", acceptance_mode="off")
    LaneAdmitter(board, clones=str(root), machine="a").admit(mine, board.project("P"))
    (root / "P").rename(tmp_path / "a-clone")  # machine a's disk, out of b's sight
    other = board.create_card(ME, "P", "b's card", acceptance_mode="off")
    LaneAdmitter(board, clones=str(root), machine="b").admit(other, board.project("P"))
    assert sweep_lanes(store, clones=str(root), machine="b") == []
    with store.read() as tx:
        assert lane_for(tx, mine.id, 1) is not None, "b dropped a's lane record"
    # on machine a, once its lane's tree and branch are gone, the record goes
    shutil.rmtree(root / "P")
    (tmp_path / "a-clone").rename(root / "P")
    with store.read() as tx:
        rec = lane_for(tx, mine.id, 1)
    assert rec is not None
    shutil.rmtree(rec.path)
    git(root / "P", "worktree", "prune")
    subprocess.run(["git", "-C", str(root / "P"), "branch", "-D", rec.branch],
                   capture_output=True, check=False)  # fmt: skip
    assert not git(root / "P", "branch", "--list", rec.branch)
    assert len(sweep_lanes(store, clones=str(root), machine="a")) == 1
    with store.read() as tx:
        assert lane_for(tx, mine.id, 1) is None


def test_a_review_lane_is_cleaned_when_the_review_ends_before_the_work_lands(
    store: Store, tmp_path: Path
) -> None:
    """A review run on another machine than the reviewed round has a lane of its own, at the
    round's commit: nothing of its own to land. A rejected review ends before that round is
    on the remote's base (a later round lands it, or none does); its lane is cleaned at once,
    not kept as unmerged work — the work is the reviewed card's, on its own lane branch."""
    from laneboard.workspace.land import cleanup_terminal

    bare, _ = bare_remote(tmp_path)
    a, a_clones = machine(store, tmp_path, "a")
    b, b_clones = machine(store, tmp_path, "b")
    a.add_project(ME, "P", remote=str(bare))
    card, lane = claimed_on(b, b_clones, acceptance_mode="off")
    commit_file(lane, "feature.txt", "new\n", "the work")
    deliver(b, card)  # verified on b: lane/P-1 pushed
    head = git(bare, "rev-parse", "refs/heads/lane/P-1")
    review = a.create_card(
        ME, "P", "review P-1", acceptance_mode="off", meta={"review_of": card.id, "review_round": 1}
    )
    with store.read() as tx:
        worked = lane_for(tx, card.id, 1)
    assert worked is not None
    admitter = LaneAdmitter(a, clones=a_clones)
    review_lane = admitter.admit_review(review, a.project("P"), worked)
    a.claim(ME, review.ref, holder="reviewer")
    a.move(ME, review.ref, "canceled")  # the review ended; P-1 goes on to another round

    got = cleanup_terminal(store, clones=a_clones)

    assert [x["action"] for x in got] == ["cleaned"], got
    assert not os.path.exists(review_lane)
    assert git(bare, "rev-parse", "refs/heads/lane/P-1") == head, "the work's branch stays"
    assert os.path.isdir(lane), "b's lane of the work is b's"


class Fetched(NamedTuple):
    """Machines ``a`` and ``b`` on project P with a remote (``bare``, its working clone
    ``seed``); ``a``'s admitter has fetched its clone once, in a poll pass a moment ago."""

    bare: Path
    seed: Path
    a: Board
    b: Board
    b_clones: str
    reusing: LaneAdmitter


def fetched_before(store: Store, tmp_path: Path) -> Fetched:
    bare, seed = bare_remote(tmp_path)
    a, a_clones = machine(store, tmp_path, "a")
    b, b_clones = machine(store, tmp_path, "b")
    a.add_project(ME, "P", remote=str(bare))
    reusing = LaneAdmitter(a, clones=a_clones)
    in_a_pass(reusing, a.create_card(ME, "P", "first"))
    return Fetched(bare, seed, a, b, b_clones, reusing)


def in_a_pass(admitter: LaneAdmitter, *cards: Card) -> list[str]:
    """Admit ``cards`` as one poll pass does, having read them just now."""
    project = admitter.board.project("P")
    with admitter.within_pass({}, time.monotonic()):
        return [admitter.admit(card, project) for card in cards]


def counting_fetches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The clones fetched from now on, one entry per fetch."""
    seen: list[str] = []
    real = rm.fetch

    def fetch(clone: str) -> None:
        seen.append(clone)
        real(clone)

    monkeypatch.setattr(rm, "fetch", fetch)
    return seen


def test_a_pass_fetches_a_remote_once_for_the_cards_it_admits(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One poll pass admitting several cards of a project fetches its remote once; the
    next pass fetches again."""
    _, _, a, _, _, reusing = fetched_before(store, tmp_path)
    fetches = counting_fetches(monkeypatch)
    cards = [a.create_card(ME, "P", f"card {i}") for i in range(3)]
    in_a_pass(reusing, *cards)
    assert len(fetches) == 1
    in_a_pass(reusing, a.create_card(ME, "P", "one more"))
    assert len(fetches) == 2


def test_a_card_made_after_a_push_to_the_base_starts_from_it(store: Store, tmp_path: Path) -> None:
    """A person pushes to the remote's base, then makes a card: the card's lane holds the
    push, on a machine that fetched a moment before (it fetches again: its fetch began
    before the pass read the card)."""
    _, seed, a, _, _, reusing = fetched_before(store, tmp_path)
    commit_file(seed, "config.txt", "pushed first\n", "what the card needs")
    git(seed, "push", "-q", "origin", "HEAD:main")
    (lane,) = in_a_pass(reusing, a.create_card(ME, "P", "uses config.txt"))
    assert (Path(lane) / "config.txt").read_text() == "pushed first\n"


def test_a_fetch_that_began_before_the_cards_were_read_is_not_reused(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch counts from when it began, not when it ended: one still running while a
    push landed and the pass then read its cards may not hold the push, so the pass's
    admission fetches again."""
    bare, seed = bare_remote(tmp_path)
    a, a_clones = machine(store, tmp_path, "a")
    a.add_project(ME, "P", remote=str(bare))
    project = a.project("P")
    rm.ensure_clone(a_clones, project)
    real, read_at = rm.g.git, []

    def git_pushed_during_a_fetch(cwd: str, *args: str, **kw: Any) -> Any:
        got = real(cwd, *args, **kw)
        if args[:1] == ("fetch",) and not read_at:  # the fetch has read the remote's refs
            commit_file(seed, "late.txt", "pushed during the fetch\n", "late")
            git(seed, "push", "-q", "origin", "HEAD:main")
            read_at.append(time.monotonic())  # then the pass reads its cards
        return got

    monkeypatch.setattr(rm.g, "git", git_pushed_during_a_fetch)
    rm.fetch(rm.clone_dir(a_clones, project))
    assert read_at, "the fetch ran"
    clone = rm.ensure_clone(a_clones, project, fetched_since=read_at[0])
    assert git(clone, "show", "origin/main:late.txt") == "pushed during the fetch"


def test_a_card_whose_dependency_just_landed_elsewhere_starts_from_it(
    store: Store, tmp_path: Path
) -> None:
    """A machine that fetched its clone a moment ago (admissions then reuse that fetch) and
    then admits a card whose dependency landed meanwhile from another machine fetches
    again: the dependent card's lane holds its dependency's work."""
    bare, _, a, b, b_clones, reusing = fetched_before(store, tmp_path)
    dep = a.create_card(ME, "P", "the dependency", acceptance_mode="off")
    later = a.create_card(ME, "P", "needs the dependency", depends_on=[dep.ref])
    dep_lane = LaneAdmitter(b, clones=b_clones).admit(dep, b.project("P"))
    claimed = b.claim(ME, dep.ref, holder="worker")
    commit_file(dep_lane, "base.txt", "from the dependency\n", "the dependency's work")
    b.move(ME, deliver(b, claimed).ref, "done")  # landed on the remote by machine b
    assert git(bare, "show", "main:base.txt") == "from the dependency"
    (ready,) = [c.card for c in a.candidates(include_unassigned=True) if c.card.id == later.id]
    (lane,) = in_a_pass(reusing, ready)  # the card as the supervisor's poll reads it
    assert (Path(lane) / "base.txt").read_text() == "from the dependency\n"


def test_a_conflict_round_on_a_machine_that_fetched_a_moment_ago_holds_both_sides(
    store: Store, tmp_path: Path
) -> None:
    """The round that resolves a landing conflict is made on a machine whose clone was
    fetched before the conflict (and before the conflicting lane was pushed): it fetches
    again, so its lane starts from the base it must land on with the round merged in."""
    from dataclasses import replace

    _, seed, a, b, b_clones, reusing = fetched_before(store, tmp_path)
    card, lane = claimed_on(b, b_clones, acceptance_mode="off")
    mine = commit_file(lane, "README.md", "mine\n", "the work")
    delivered = deliver(b, card)
    theirs = commit_file(seed, "README.md", "theirs\n", "someone else's change")
    git(seed, "push", "-q", "origin", "HEAD:main")
    with pytest.raises(LaneboardError):
        b.move(ME, delivered.ref, "done")  # the landing conflicts
    blocked = [e.payload for e in b.events(0, limit=10_000) if e.type == "lane.land_blocked"]
    conflict = dict(blocked[-1]["conflict"])  # type: ignore[arg-type]
    assert conflict["lane_commit"] == mine and conflict["onto_commit"] == theirs
    again = a.get(card.ref)  # the round the workflow opens for its worker
    again = replace(again, delivery_round=2, meta={
        **again.meta, "conflict_resolve": {**conflict, "round": 2, "from_round": 1}})  # fmt: skip
    (lane2,) = in_a_pass(reusing, again)
    assert git(lane2, "rev-parse", "HEAD") == theirs
    text = (Path(lane2) / "README.md").read_text()
    assert "<<<<<<<" in text and "mine" in text and "theirs" in text


def test_a_conflict_round_whose_conflicting_round_is_missing_is_refused(
    store: Store, tmp_path: Path
) -> None:
    """A conflict round never starts without the round it resolves (its lane branch gone
    from the remote): the admission is refused, naming that round, and makes no lane."""
    from dataclasses import replace

    from laneboard.workspace.admit import AdmissionError

    bare, _ = bare_remote(tmp_path)
    a, a_clones = machine(store, tmp_path, "a")
    a.add_project(ME, "P", remote=str(bare))
    card = a.create_card(ME, "P", "resolve it")
    gone = "0123456789abcdef0123456789abcdef01234567"
    info = {"round": 2, "from_round": 1, "onto": "main", "lane_commit": gone, "files": ["x"]}
    again = replace(card, delivery_round=2, meta={"conflict_resolve": info})
    with pytest.raises(AdmissionError) as err:
        LaneAdmitter(a, clones=a_clones).admit(again, a.project("P"))
    assert err.value.code == "WORKSPACE_ERROR"
    assert f"round 1 of {card.ref} (0123456789ab)" in str(err.value)
    lanes = os.path.join(a_clones, "P", ".worktrees")
    assert not os.path.isdir(lanes) or not os.listdir(lanes)


def test_a_rework_round_on_a_machine_that_fetched_a_moment_ago_starts_from_its_last_round(
    store: Store, tmp_path: Path
) -> None:
    """A round sent back for rework and made on a machine whose clone was fetched before
    the earlier round was pushed (from another machine) fetches again: it starts from that
    round's work, not from the bare base."""
    from dataclasses import replace

    _, _, a, b, b_clones, reusing = fetched_before(store, tmp_path)
    card, lane = claimed_on(b, b_clones, acceptance_mode="auto")
    round1 = commit_file(lane, "work.txt", "round one\n", "the work")
    deliver(b, card)  # verified on b, its lane branch pushed
    again = replace(a.get(card.ref), delivery_round=2)  # a reviewer asked for more
    (lane2,) = in_a_pass(reusing, again)
    assert git(lane2, "rev-parse", "HEAD") == round1
