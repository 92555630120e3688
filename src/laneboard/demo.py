"""``lb demo``: a temporary git project, three cards, the real supervisor, scripted agents.

Everything runs for real — a SQLite board, git lanes, agent processes, runtime checks,
landing — only the agent is the deterministic ``scripted`` one, so the demo needs no
model and no network. The board and the project live in a temporary directory that is
printed at the end (and kept with ``--keep``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.domain.model import human
from laneboard.domain.runs import RunOptions
from laneboard.store import open_store
from laneboard.store.notify import Broadcaster
from laneboard.supervisor.logs import LogFile
from laneboard.supervisor.loop import Supervisor
from laneboard.supervisor.runtime import Runtime

GIT = [
    "git",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "user.name=laneboard demo",
    "-c",
    "user.email=demo@laneboard.invalid",
]

GOAL = "greet, add and print: three cards as one run"
GREET = 'def hello(name: str) -> str:\n    return f"hello, {name}"\n'
ADD_BUGGY = "def add(a: int, b: int) -> int:\n    return a - b\n"
ADD = "def add(a: int, b: int) -> int:\n    return a + b\n"
MAIN = 'import sys\n\nfrom greet import hello\n\nprint(hello(sys.argv[1] if len(sys.argv) > 1 else "world"))\n'

CARDS: list[dict[str, Any]] = [
    {
        "title": "Add a greeting helper",
        "description": "greet.hello(name) returns 'hello, <name>'.",
        "acceptance": ["greet.hello('lb') == 'hello, lb'"],
        "checks": ["python3 -c \"import greet; assert greet.hello('lb') == 'hello, lb'\""],
        "allowed_paths": ["greet.py"],
        "script": [{"write": "greet.py", "content": GREET}, {"deliver": "greet.py added"}],
    },
    {
        "title": "Add an adder",
        "description": "add.add(a, b) returns the sum. The first attempt gets it wrong; the "
        "runtime's check refuses that delivery and the agent fixes it.",
        "acceptance": ["add.add(2, 3) == 5"],
        "checks": ['python3 -c "import add; assert add.add(2, 3) == 5"'],
        "allowed_paths": ["add.py"],
        "script": [
            {"write": "add.py", "content": ADD_BUGGY, "attempt": 1},
            {"deliver": "add.py added", "attempt": 1},
            {"write": "add.py", "content": ADD, "attempt": 2},
            {"deliver": "add.py fixed: a + b", "attempt": 2},
        ],
    },
    {
        "title": "Greet from the command line",
        "description": "main.py prints hello, <name> using the greeting helper.",
        "acceptance": ["python3 main.py lb prints 'hello, lb'"],
        "checks": ["test \"$(python3 main.py lb)\" = 'hello, lb'"],
        "allowed_paths": ["main.py"],
        "depends_on_first": True,
        "script": [{"write": "main.py", "content": MAIN}, {"deliver": "main.py added"}],
    },
]


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def make_project(root: Path) -> Path:
    repo = root / "project"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# demo project\n\nBuilt card by card by laneboard.\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "initial commit")
    return repo


def run_demo(root: Path, *, timeout: float = 90.0, out: Any = sys.stdout) -> dict[str, Any]:
    """Run the demo in ``root``; returns the summary (also printed as it goes)."""
    repo = make_project(root)
    url = f"sqlite:///{root / 'board.db'}"
    store = open_store(url)
    board = Board(store)
    me = human("demo")
    board.add_project(me, "DEMO", "demo project", str(repo))
    run = board.create_run(me, "DEMO", GOAL, RunOptions(interval_ms=100))
    print(f"run {run['id']}: {GOAL}", file=out)
    refs: list[str] = []
    for spec in CARDS:
        card = board.create_card(
            me,
            "DEMO",
            spec["title"],
            description=spec["description"],
            acceptance=spec["acceptance"],
            acceptance_mode="off",
            checks=spec["checks"],
            allowed_paths=spec["allowed_paths"],
            meta={"script": spec["script"]},
            depends_on=[refs[0]] if spec.get("depends_on_first") else [],
            run_id=run["id"],
        )
        refs.append(card.ref)
        print(f"created {card.ref}: {card.title}", file=out)
    cfg = SupervisorConfig(
        force_agent="scripted",
        state_dir=str(root / "state"),
        max_concurrency=3,
        event_poll_ms=100,
        debounce_ms=100,
    )
    cfg = replace(cfg, time=replace(cfg.time, tick_interval=30)).validate()
    rt = Runtime(
        open_store(url), cfg, f"demo-{os.getpid()}", LogFile(str(root / "state" / "supervisor.log"))
    )
    sup = Supervisor(rt)
    sup.start()
    thread = threading.Thread(target=sup.run, daemon=True)
    thread.start()
    cursor = "0"
    deadline = time.monotonic() + timeout
    wakeups = Broadcaster(store, poll_s=0.2).start()
    try:
        while time.monotonic() < deadline:
            events, cursor = board.events_after(cursor, limit=200)
            for e in events:
                line = _describe(e.type, e.payload)
                if line and e.card_id is not None:
                    print(f"  {board.get(e.card_id).ref}: {line}", file=out)
            converged = board.run(run["id"])["status"] in ("completed", "blocked", "failed")
            if converged and _lanes_left(store) == 0:
                break
            wakeups.wait(cursor, 1.0)
    finally:
        wakeups.close()
        sup.stop_event.set()
        thread.join(60)
    summary = _summary(board, store, refs, repo)
    view = board.run(run["id"])
    summary["run"] = {"id": view["id"], "goal": view["goal"], "status": view["status"],
                      "convergence": view["convergence"]}  # fmt: skip
    summary["ok"] = summary["ok"] and view["status"] == "completed"
    rt.store.close()
    store.close()
    return summary


def _lanes_left(store: Any) -> int:
    """Lanes of the demo not yet cleaned up (worktree and merged branch)."""
    with store.read() as tx:
        return int(tx.count_lanes(("active", "landed")))


def _describe(kind: str, p: dict[str, Any]) -> str | None:
    if kind == "card.claimed":
        return f"claimed by {p.get('holder')} (epoch {p.get('epoch')})"
    if kind == "turn.started":
        return f"agent started (pid {p.get('pid')})" + (" — replayed" if p.get("replayed") else "")
    if kind == "turn.finished":
        err = f": {p.get('error')}" if p.get("error") else ""
        return f"turn {p.get('outcome')}{err}"
    if kind == "card.moved":
        return f"{p.get('from')} -> {p.get('to')}"
    return None


def _summary(board: Board, store: Any, refs: list[str], repo: Path) -> dict[str, Any]:
    cards = []
    for ref in refs:
        c = board.get(ref)
        with store.read() as tx:
            turns = tx.turn_outcomes(c.id)
        cards.append(
            {
                "ref": c.ref,
                "title": c.title,
                "status": c.status.value,
                "round": c.delivery_round,
                "turns": [t["outcome"] for t in turns],
                "merge_commit": c.meta.get("merge_commit"),
            }
        )
    log = _git(repo, "log", "--oneline", "main").splitlines()
    worktrees = _git(repo, "worktree", "list").splitlines()[1:]
    branches = [b.strip("* +") for b in _git(repo, "branch", "--list", "lane/*").splitlines()]
    return {
        "project": str(repo),
        "cards": cards,
        "main_log": log,
        "worktrees_left": worktrees,
        "lane_branches_left": branches,
        "ok": all(c["status"] == "done" and c["merge_commit"] for c in cards),
    }


def render(summary: dict[str, Any]) -> str:
    lines = ["", "cards:"]
    for c in summary["cards"]:
        commit = (c["merge_commit"] or "-")[:10]
        lines.append(
            f"  {c['ref']:<8} {c['status']:<9} round {c['round']}  turns "
            f"{','.join(c['turns'])}  landed {commit}  {c['title']}"
        )
    run = summary.get("run")
    if run:
        conv = run["convergence"]
        lines += ["", f"run {run['id']} ({run['goal']}): {run['status']}, convergence "
                      f"{conv['state']} / {conv['reason']}"]  # fmt: skip
    left = summary["worktrees_left"] + summary["lane_branches_left"]
    lines += ["", "lanes left behind: " + (", ".join(left) if left else "none")]
    lines += ["", "main branch of the project:"] + [f"  {ln}" for ln in summary["main_log"]]
    lines += [
        "",
        f"project: {summary['project']}"
        + ("" if summary.get("kept") else "  (removed on exit; run lb demo --keep to keep it)"),
        "demo "
        + (
            "finished: every card landed"
            if summary["ok"]
            else "did NOT finish: see the cards above"
        ),
    ]
    return "\n".join(lines)


def main_demo(keep: bool, timeout: float, as_json: bool) -> int:
    import json

    root = Path(tempfile.mkdtemp(prefix="laneboard-demo-"))
    # progress goes to stderr with --json: stdout is the one summary document
    summary = run_demo(root, timeout=timeout, out=sys.stderr if as_json else sys.stdout)
    summary["kept"] = keep
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(render(summary))
    if not keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0 if summary["ok"] else 1
