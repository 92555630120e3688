"""The seed's deterministic experiment end to end: the real ``lb orchestrate`` with the
scripted coordinator and specialists as real processes on a real git repository."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import git
from tests.orchestrate.scripts import SEED, SHARED_CHECK, control
from tests.supervisor.helpers import wait_for

from laneboard.board.orchestrate import Orchestrations
from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.service import Board
from laneboard.store import open_store

GOAL = "Implement and verify the producer/consumer contract"


def env_of(tmp: Path, db: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEBOARD_")}
    env.update(LANEBOARD_DATABASE_URL=db, XDG_STATE_HOME=str(tmp / "xdg"), LANEBOARD_USER="alice")
    return env


def orchestrate(tmp: Path, db: str, repo: Path, *extra: str, script: Any = SEED,
                timeout: float = 240) -> subprocess.CompletedProcess[str]:  # fmt: skip
    path = tmp / "script.json"
    path.write_text(json.dumps(script))
    argv = [sys.executable, "-m", "laneboard.cli.main", "orchestrate", "--repo", str(repo),
            "--goal", GOAL, "--allow-path", "src/producer", "--allow-path", "src/consumer",
            "--check", SHARED_CHECK, "--coordinator", "scripted", "--script", str(path),
            "--state-dir", str(tmp / "state"), "--json", *extra]  # fmt: skip
    return subprocess.run(argv, env=env_of(tmp, db), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'board.db'}"


def board_of(db: str) -> Board:
    return Board(open_store(db))


def test_the_seed_experiment_publishes_the_verified_patch(
    tmp_path: Path, db: str, repo: Path
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    out = orchestrate(tmp_path, db, repo)
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads(out.stdout)
    assert doc["phase"] == "completed" and doc["result"]["applied"], doc
    # published into the checkout, uncommitted, HEAD unchanged
    assert git(repo, "rev-parse", "HEAD") == head
    assert (repo / "src/producer/api.txt").read_text() == "id key\n"
    assert (repo / "src/consumer/use.txt").read_text() == "reads key\n"
    assert not (repo / "src/consumer/draft.txt").exists()  # revision one's effects stay out
    assert [e["command"] for e in doc["result"]["evidence"]] == [SHARED_CHECK]
    board = board_of(db)
    run = doc["run"]
    plan = Orchestrations(board).plan(run)
    assert (plan["producer"].revision, plan["consumer"].revision) == (1, 2)
    assert plan["producer"].verified == 1 and plan["consumer"].verified == 2
    rt = Runtime(board)
    work = [(t["assignment"], t["revision"]) for t in rt.turns(run) if t["purpose"] == "work"]
    assert sorted(work) == [("consumer", 1), ("consumer", 2), ("producer", 1)]  # once each
    assert all(t["state"] == "ended" for t in rt.turns(run))
    budgets = board.run(run)["budgets"]  # lb run show reports usage against each budget
    assert budgets["model_calls"] == {"used": len(rt.turns(run)), "limit": 64}
    assert 0 < budgets["output_bytes"]["used"] < budgets["output_bytes"]["limit"]
    assert board.run(run)["status"] == "completed"
    revs = rt.revisions(plan["consumer"].card_id or 0)
    assert [(r["revision"], r["state"]) for r in revs] == [(1, "superseded"), (2, "verified")]
    # the consumer asked, got the recorded answer, and kept its session
    roles = rt.roles(run)
    session = roles["specialist-b"]["session_id"]
    sfile = tmp_path / "state" / "agents" / f"run{run}" / "sessions" / f"{session}.json"
    saved = json.loads(sfile.read_text())
    assert saved["turns"] == 3
    assert "the field is called id" in saved["transcript"][1]
    events = [e.type for e in board.events(0, limit=10_000)]
    assert events.count("orchestration.revise") == 1 and "orchestration.answer" in events
    # stale evidence: the consumer's report for revision one, sent during revision two,
    # was refused; only revision two was reported and verified
    evs = board.events(0, limit=10_000)
    reports = [e.payload["revision"] for e in evs if e.type == "orchestration.report"
               and e.payload.get("assignment") == "consumer"]  # fmt: skip
    assert reports == [2]
    verified = [(e.payload["assignment"], e.payload["revision"]) for e in evs
                if e.type == "orchestration.verified"]  # fmt: skip
    assert verified == [("producer", 1), ("consumer", 2)]
    # a second --resume returns the stored result without starting any agent
    again = orchestrate(tmp_path, db, repo, "--resume")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["result"] == doc["result"]
    assert len(rt.turns(run)) == len(Runtime(board_of(db)).turns(run))
    assert "turn" not in again.stderr


def test_a_dirty_checkout_is_refused_at_the_goal_start(tmp_path: Path, db: str, repo: Path) -> None:
    (repo / "README.md").write_text("edited\n")
    out = orchestrate(tmp_path, db, repo)
    assert out.returncode == 1 and "WORKSPACE_ERROR" in out.stderr and "not clean" in out.stderr


def work_turns(rt: Runtime, run: int) -> list[tuple[str, int, str]]:
    return [(t["assignment"], t["revision"], t["state"]) for t in rt.turns(run)
            if t["purpose"] == "work"]  # fmt: skip


def test_a_sigkilled_run_recovers_through_recover_without_replaying_a_turn(
    tmp_path: Path, db: str, repo: Path
) -> None:
    script = {
        "coordinator": [
            {"turn": 1, **control("assign", "--assignment", "producer", "--owner",
                                  "specialist-a", "--brief", "write the record",
                                  "--path", "src/producer")},
            {"turn": 2, **control("recover", "--assignment", "producer", "--decision", "retry")},
            {"turn": 3, **control("complete")},
        ],
        "producer": {
            "r1": [
                control("accept", "--assignment", "producer", "--revision", "1"),
                {"write": "src/producer/partial.txt", "content": "half\n"},
                {"sleep": 4},
                control("report", "--assignment", "producer", "--revision", "1"),
            ],
            "r2": [
                control("accept", "--assignment", "producer", "--revision", "2"),
                {"write": "src/producer/api.txt", "content": "id\n"},
                control("report", "--assignment", "producer", "--revision", "2"),
            ],
        },
    }  # fmt: skip
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    argv = [sys.executable, "-m", "laneboard.cli.main", "orchestrate", "--repo", str(repo),
            "--goal", GOAL, "--allow-path", "src/producer", "--check", "test -f src/producer/api.txt",
            "--coordinator", "scripted", "--script", str(path),
            "--state-dir", str(tmp_path / "state"), "--json"]  # fmt: skip
    first = subprocess.Popen(argv, env=env_of(tmp_path, db), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        mid = lambda: any(repo.glob(".worktrees/*/src/producer/partial.txt"))  # noqa: E731
        wait_for(mid, what="the producer mid-turn")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        first.communicate()
    board = board_of(db)
    rt = Runtime(board)
    (run,) = [r["id"] for r in board.runs()]
    assert work_turns(rt, run) == [("producer", 1, "dispatched")]
    again = subprocess.run([*argv, "--resume"], env=env_of(tmp_path, db), capture_output=True,
                           text=True, timeout=240)  # fmt: skip
    assert again.returncode == 0, again.stderr + again.stdout
    doc = json.loads(again.stdout)
    assert doc["phase"] == "completed" and doc["result"]["applied"]
    assert work_turns(rt, run) == [("producer", 1, "uncertain"), ("producer", 2, "ended")]
    assert (repo / "src/producer/api.txt").read_text() == "id\n"
    assert not (repo / "src/producer/partial.txt").exists()  # the uncertain turn's effects
    assert "was interrupted mid-turn" in again.stderr
    events = [e for e in board.events(0, limit=10_000) if e.type == "orchestration.recover"]
    assert [e.payload["decision"] for e in events] == ["retry"]
    coordinator = [t["state"] for t in rt.turns(run) if t["role"] == "coordinator"]
    assert coordinator == ["ended", "ended", "ended"]  # the coordinator session resumed


def test_an_interrupted_publication_refuses_to_resume(tmp_path: Path, db: str, repo: Path) -> None:
    missing = orchestrate(tmp_path, db, repo, "--resume")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr  # nothing to resume yet
    script = {"coordinator": [{"turn": 1, **control("inspect")}]}
    first = orchestrate(tmp_path, db, repo, "--max-model-calls", "1", script=script)
    assert first.returncode == 1 and json.loads(first.stdout)["reason"] == (
        "budget_exhausted:model_calls"
    )
    board = board_of(db)
    (run,) = [r["id"] for r in board.runs()]
    Runtime(board).phase(run, "publishing")  # as if the runtime died mid-publication
    again = orchestrate(tmp_path, db, repo, "--resume")
    assert again.returncode == 1 and "PUBLICATION_UNCERTAIN" in again.stderr
    assert "verified.patch" in again.stderr and "does not resume on its own" in again.stderr
    assert len(Runtime(board).turns(run)) == 1  # no agent started


def test_a_goal_already_under_way_needs_resume(tmp_path: Path, db: str, repo: Path) -> None:
    script = {"coordinator": [{"turn": 1, **control("inspect")}]}
    orchestrate(tmp_path, db, repo, "--max-model-calls", "1", script=script)
    b = board_of(db)
    (run,) = [r["id"] for r in b.runs()]
    Runtime(b).phase(run, "running")  # a run still under way for this goal
    again = orchestrate(tmp_path, db, repo, script=script)
    assert again.returncode == 1 and "CONFLICT" in again.stderr and "--resume" in again.stderr
    assert [r["id"] for r in b.runs()] == [run]  # nothing was created
