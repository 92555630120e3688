"""``lb demo --orchestrate``: the goal-driven mode end to end on a temporary repository.

A scripted coordinator plans a producer and a consumer; the consumer asks about a field
and gets the coordinator's answer in the same session, checkpoints, and then accepts a
material contract change (its second revision) while the producer stays on its first.
Each report is verified and integrated by the runtime; the goal's check runs on the
combined change and the verified patch is applied to the temporary checkout. Real git,
a real SQLite board, real agent processes in their sandbox; only the agents are the
deterministic ``scripted`` kind.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from laneboard.board.orchestrate import Orchestrations
from laneboard.board.orchestrate_runtime import Runtime
from laneboard.board.service import Board
from laneboard.config import SupervisorConfig
from laneboard.demo import make_project
from laneboard.domain.assignments import COORDINATOR
from laneboard.domain.budgets import Budgets
from laneboard.domain.model import human
from laneboard.store import open_store
from laneboard.supervisor.orchestrate import Driver, Progress
from laneboard.supervisor.orchestrate_agents import Sessions
from laneboard.workspace.patch import goal_start

GOAL = "Emit records from the producer and read their key in the consumer"
ALLOW = ["producer", "consumer"]
CHECK = "python3 -c \"import consumer.read as r; assert r.key({'key': 7}) == 7\""
RECORD = "def record(n: int) -> dict[str, int]:\n    return {'key': n}\n"
DRAFT = "def key(rec: dict[str, int]) -> int:\n    return rec['id']\n"
READ = "def key(rec: dict[str, int]) -> int:\n    return rec['key']\n"


def _c(*args: str, check: bool = True) -> dict[str, Any]:
    step: dict[str, Any] = {"lb": ["orchestrate", "control", *args]}
    return step if check else {**step, "check": False}


SCRIPTS: dict[str, Any] = {
    COORDINATOR: [
        {"turn": 1, **_c("assign", "--assignment", "producer", "--owner", "specialist-a",
                         "--brief", "producer/emit.py: record(n) returns a record",
                         "--path", "producer", "--check", "test -f producer/emit.py")},
        {"turn": 1, **_c("assign", "--assignment", "consumer", "--owner", "specialist-b",
                         "--brief", "consumer/read.py: key(record) returns its id",
                         "--path", "consumer", "--dep", "producer")},
        {"turn": 3, **_c("answer", "--assignment", "consumer",
                         "--note", "read the id field for now")},
        {"turn": 4, **_c("revise", "--assignment", "consumer", "--brief",
                         "the contract changed: records carry key, not id", "--check", CHECK)},
        {"turn": 5, **_c("complete")},
    ],
    "producer": {"r1": [
        _c("accept", "--assignment", "producer", "--revision", "1"),
        {"write": "producer/__init__.py", "content": ""},
        {"write": "producer/emit.py", "content": RECORD},
        _c("report", "--assignment", "producer", "--revision", "1", "--note", "emit.py"),
    ]},
    "consumer": {
        "r1": [
            {"turn": 1, **_c("accept", "--assignment", "consumer", "--revision", "1")},
            {"turn": 1, "write": "consumer/read.py", "content": DRAFT},
            {"turn": 1, "lb": ["card", "ask", "{card}", "which field holds the record's key?"]},
            {"turn": 2, **_c("checkpoint", "--assignment", "consumer", "--revision", "1",
                             "--note", "read.py reads id, as answered")},
        ],
        "r2": [
            _c("report", "--assignment", "consumer", "--revision", "1", check=False),
            _c("accept", "--assignment", "consumer", "--revision", "2"),
            {"write": "consumer/__init__.py", "content": ""},
            {"write": "consumer/read.py", "content": READ},
            _c("report", "--assignment", "consumer", "--revision", "2", "--note", "reads key"),
        ],
    },
}  # fmt: skip


def run(root: Path, out: Any = sys.stdout) -> dict[str, Any]:
    """Run the orchestrated demo in ``root``; returns its summary."""
    repo = make_project(root)
    store = open_store(f"sqlite:///{root / 'board.db'}")
    board = Board(store)
    me = human("demo")
    board.add_project(me, "DEMO", "demo project", str(repo))
    start = goal_start(str(repo))
    spec = {"allow_paths": ALLOW, "checks": [CHECK], "coordinator": "scripted",
            "specialists": "scripted", "publish": "patch", "scripts": SCRIPTS}  # fmt: skip
    rt = Runtime(board)
    o = rt.create(me, "DEMO", GOAL, spec, Budgets(), start.to_dict())
    print(f"run {o.run_id}: {GOAL}", file=out)
    config = SupervisorConfig(default_agent="scripted", state_dir=str(root / "state")).validate()
    kinds = {COORDINATOR: "scripted", "*": "scripted"}
    sessions = Sessions(rt, o.run_id, config, start.repo, kinds)
    say = Progress(lambda line: print(line, file=out, flush=True))
    result = Driver(board, o.run_id, sessions, say).run()
    return _summary(board, o.run_id, result, repo)


def _summary(board: Board, run_id: int, result: dict[str, Any], repo: Path) -> dict[str, Any]:
    orch = Orchestrations(board)
    rt = Runtime(board)
    plan = []
    for a in orch.plan(run_id).values():
        revs = rt.revisions(a.card_id or 0)
        plan.append({"name": a.name, "owner": a.owner, "revision": a.revision,
                     "state": a.state.value, "revisions": [
                         {"revision": r["revision"], "state": r["state"]} for r in revs]})  # fmt: skip
    patch = Path(result["patch_path"]).read_text() if result.get("patch_path") else ""
    return {
        "ok": bool(result.get("applied")),
        "run": run_id,
        "plan": plan,
        "checks": result.get("evidence") or [],
        "reason": result.get("reason"),
        "patch": patch,
        "repo": str(repo),
    }


def render(s: dict[str, Any]) -> str:
    lines = ["", "plan:"]
    for a in s["plan"]:
        revs = ", ".join(f"r{r['revision']} {r['state']}" for r in a["revisions"])
        lines.append(f"  {a['name']} ({a['owner']}) at revision {a['revision']}: {a['state']} "
                     f"[{revs}]")  # fmt: skip
    lines.append("checks on the combined change:")
    lines += [f"  {c['exit_code']:>3}  {c['command']}" for c in s["checks"]] or ["  (none)"]
    lines.append(f"{'published' if s['ok'] else 'not published'}: {s['reason']}")
    lines += ["verified.patch:", s["patch"].rstrip() or "  (empty)", f"repository: {s['repo']}"]
    return "\n".join(lines)


def main(keep: bool, as_json: bool) -> int:
    import json
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="laneboard-demo-"))
    summary = run(root, out=sys.stderr if as_json else sys.stdout)
    summary["kept"] = keep
    print(json.dumps(summary, indent=2, sort_keys=True) if as_json else render(summary))
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if summary["ok"] else 1
