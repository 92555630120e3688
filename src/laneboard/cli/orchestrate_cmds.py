"""``lb orchestrate``: a goal split by a coordinator agent into verified assignments.

A local command: it records the checkout at the goal start, runs the coordinator and
specialist sessions on this machine and publishes into the checkout. The control verbs
the agents call (``lb orchestrate control VERB``) are an operation of the table
(``ops.orchestrate``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.generated import command
from laneboard.domain.budgets import MIB
from laneboard.errors import LaneboardError, bad_input

BUDGET_FLAGS = (
    ("max_active_specialists", 2, "specialist turns active at once"),
    ("max_model_calls", 64, "dispatched turns and steers, failed or uncertain ones included"),
    ("max_output_bytes", MIB, "reply, reasoning and tool-argument text, in bytes"),
    ("max_elapsed_secs", 3600, "aggregate running time of the turns"),
    ("max_depth", 8, "dependency depth of the plan"),
    ("check_timeout_secs", 120, "each acceptance or --check command"),
    ("debounce_ms", 1000, "bursts of events combined before the coordinator is woken"),
)


def register(sub: Any) -> None:
    p = command(
        sub,
        "orchestrate",
        "run a goal as assignments planned by a coordinator agent",
        "Create (or with --resume continue) an orchestrated run: a coordinator session plans "
        "assignments for named specialists through orchestrator_control, the runtime "
        "verifies each reported revision (owned paths, checks) and integrates it in a "
        "detached worktree, and once the coordinator completes the goal the --check "
        "commands run on the combined change and verified.patch is applied to the checkout "
        "without committing (--publish merge lands it instead) — only if the checkout's "
        "HEAD and cleanliness still match the goal start. The checkout must be clean and "
        "committed. `lb orchestrate control VERB` is the agents' control tool.",
        (
            "lb orchestrate --repo . --goal 'producer/consumer contract' "
            "--allow-path src/producer --allow-path src/consumer --check 'make test'",
            "lb orchestrate --project WEB --goal 'producer/consumer contract' --resume",
        ),
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--project", help="the project (its path is the checkout)")
    where.add_argument("--repo", help="the checkout; registers a project for it when needed")
    p.add_argument("--goal", help="what the run is for (required)")
    p.add_argument("--allow-path", action="append", default=[], dest="allow_paths",
                   metavar="PATH", help="a repository path the run may change (repeat)")  # fmt: skip
    p.add_argument("--check", action="append", default=[], dest="checks", metavar="CMD",
                   help="a command the combined change must pass (repeat)")  # fmt: skip
    p.add_argument("--coordinator", default="codex", metavar="KIND",
                   help="the coordinator's agent kind (default codex; scripted for tests)")  # fmt: skip
    p.add_argument("--specialists", metavar="KIND",
                   help="the specialists' agent kind (default: the coordinator's)")  # fmt: skip
    p.add_argument("--model", help="the model the agents use (default: the kind's own)")
    p.add_argument("--resume", action="store_true", help="continue the run for this goal")
    p.add_argument("--publish", choices=("patch", "merge"), default="patch",
                   help="apply verified.patch uncommitted (default) or merge the integration")  # fmt: skip
    p.add_argument("--script", metavar="FILE",
                   help="scripted kinds: a JSON file of scripts by role or assignment name")  # fmt: skip
    p.add_argument("--state-dir", help="where sessions, tokens and logs live")
    for name, default, what in BUDGET_FLAGS:
        p.add_argument("--" + name.replace("_", "-"), type=int, metavar="N",
                       help=f"{what} (default {default})")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_orchestrate, creates_board=True)
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    from laneboard.cli.generated import add_parser
    from laneboard.ops.orchestrate import CONTROL

    add_parser(actions, CONTROL, "control")  # the agents' control tool, from the table


def cmd_orchestrate(ctx: Context) -> int:
    from laneboard.board.orchestrate import Orchestrations

    a = ctx.args
    if not a.goal or not (a.project or a.repo):
        raise bad_input("lb orchestrate needs --goal and --repo or --project",
                        "e.g. lb orchestrate --repo . --goal TEXT --allow-path PATH --check CMD")  # fmt: skip
    say = _printer(ctx.json)
    project, repo = _project(ctx)
    orch = Orchestrations(ctx.board)
    with ctx.store.read() as tx:
        row = tx.orchestration_for_goal(project, a.goal)
    if a.resume:
        if row is None:
            raise LaneboardError(
                "NOT_FOUND", f"no orchestrated run for this goal in project {project}",
                "start it without --resume",
            )  # fmt: skip
        run_id = int(row["run_id"])
        say(f"resuming run {run_id} ({row['phase']})")
    else:
        if row is not None and row["phase"] not in ("completed", "failed"):
            raise LaneboardError(
                "CONFLICT", f"run {row['run_id']} already works on this goal ({row['phase']})",
                "add --resume to continue it",
            )  # fmt: skip
        run_id = _create(ctx, project, repo)
        say(f"run {run_id}: {a.goal}")
    result = _drive(ctx, run_id, say)
    o = orch.get(run_id)
    doc = {"run": run_id, "phase": o.phase, "reason": o.reason, "result": result}
    if ctx.json:
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        _summary(doc)
    return 0 if o.phase == "completed" else 1


def _printer(as_json: bool) -> Any:
    stream = sys.stderr if as_json else sys.stdout

    def say(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()

    return say


def _summary(doc: dict[str, Any]) -> None:
    res = doc["result"] or {}
    lines = [f"run {doc['run']}: {doc['phase']}" + (f" — {doc['reason']}" if doc["reason"] else "")]
    for e in res.get("evidence") or []:
        lines.append(f"  check {e['exit_code']:>3}  {e['command']}")
    if res.get("patch_path"):
        lines.append(f"  patch: {res['patch_path']}")
    if not res.get("applied") and res.get("apply_command"):
        lines.append(f"  apply it yourself: {res['apply_command']}")
    sys.stdout.write("\n".join(lines) + "\n")


def _project(ctx: Context) -> tuple[int, str]:
    """The project and its checkout; ``--repo`` registers one when none has that path."""
    a = ctx.args
    board = ctx.board
    if a.project:
        p = board.project(a.project)
        if not p.path:
            raise bad_input(f"project {p.key} has no path", "give --repo DIR instead")
        return p.id, p.path
    repo = os.path.realpath(a.repo)
    for p in board.projects():
        if p.path and os.path.realpath(p.path) == repo:
            return p.id, p.path
    taken = {p.key for p in board.projects()}
    stem = re.sub(r"[^A-Z0-9]", "", os.path.basename(repo).upper()) or "REPO"
    stem = stem if stem[0].isalpha() else "R" + stem
    key, n = stem[:10], 2
    while key in taken:
        key, n = f"{stem[: 10 - len(str(n))]}{n}", n + 1
    return board.add_project(ctx.actor, key, path=repo).id, repo


def _create(ctx: Context, project: int, repo: str) -> int:
    from laneboard.board import inputs
    from laneboard.board.orchestrate_runtime import Runtime
    from laneboard.domain.budgets import Budgets
    from laneboard.workspace import git as g
    from laneboard.workspace.patch import goal_start

    a = ctx.args
    if not a.allow_paths:
        raise bad_input("the goal has no authorized path", "give --allow-path PATH (repeat)")
    paths = [inputs.repo_path(p) for p in a.allow_paths]
    checks = inputs.strings(a.checks, "checks")
    budgets = Budgets.from_dict({n: getattr(a, n) for n, _d, _w in BUDGET_FLAGS})
    start = goal_start(repo)  # refuses a checkout that is not clean and committed
    g.ensure_excluded(start.repo)  # lanes under .worktrees/ never make it dirty
    spec: dict[str, Any] = {
        "allow_paths": paths, "checks": checks, "coordinator": a.coordinator,
        "specialists": a.specialists or a.coordinator, "model": a.model, "publish": a.publish,
    }  # fmt: skip
    if a.script:
        spec["scripts"] = _scripts(a.script)
    o = Runtime(ctx.board).create(ctx.actor, project, a.goal, spec, budgets, start.to_dict())
    return o.run_id


def _scripts(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise bad_input(f"script file {path} cannot be read: {exc}", "give a JSON file") from None
    if not isinstance(data, dict):
        raise bad_input(f"script file {path} is not an object", "map names to scripts")
    return data


def _drive(ctx: Context, run_id: int, say: Any) -> dict[str, Any]:
    from dataclasses import replace

    from laneboard.board.orchestrate import Orchestrations
    from laneboard.board.orchestrate_runtime import Runtime
    from laneboard.config import load_supervisor_config
    from laneboard.domain.assignments import COORDINATOR
    from laneboard.supervisor.orchestrate import Driver, Progress
    from laneboard.supervisor.orchestrate_agents import Sessions

    o = Orchestrations(ctx.board).get(run_id)
    config = load_supervisor_config({"state_dir": ctx.args.state_dir} if ctx.args.state_dir else {})
    model = o.spec.get("model")
    if model:
        for kind in {o.spec.get("coordinator"), o.spec.get("specialists")}:
            kinds_cfg = dict(config.agent_kinds)
            kinds_cfg[str(kind)] = {**kinds_cfg.get(str(kind), {}), "model": model}
            config = replace(config, agent_kinds=kinds_cfg)
    kinds = {COORDINATOR: str(o.spec.get("coordinator")), "*": str(o.spec.get("specialists"))}
    sessions = Sessions(Runtime(ctx.board), run_id, config, str(o.start["repo"]), kinds)
    return Driver(ctx.board, run_id, sessions, Progress(say)).run()
