"""``lb start``, ``lb loop run|poll`` and ``lb status``."""

from __future__ import annotations

import argparse
from typing import Any

from laneboard.cli.common import Context
from laneboard.errors import LaneboardError


def _supervisor_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-concurrency", type=int, help="agent turns at once (default 8)")
    p.add_argument("--project-concurrency", type=int, help="per project (default: the max)")
    p.add_argument(
        "--agent",
        dest="default_agent",
        help="agent kind for roles that name none (claude, codex, pi, command, scripted)",
    )
    p.add_argument(
        "--no-claim-unassigned",
        dest="claim_unassigned",
        action="store_false",
        default=None,
        help="take only cards assigned to a configured role",
    )
    p.add_argument("--state-dir", help="logs and agent state (default: XDG state directory)")


def register(sub: Any) -> None:
    p = sub.add_parser("start", help="run the resident supervisor (clocks, passes, pool)")
    _supervisor_flags(p)
    p.add_argument("--tick-interval", type=int, help="fallback tick, seconds (default 600)")
    p.add_argument("--turn-timeout", type=int, help="agent turn timeout, seconds (default 1800)")
    p.add_argument("--for-seconds", type=float, help="stop after this long (for scripts)")
    p.add_argument(
        "--notify", metavar="CMD", help="patrol alerts go to this command as JSON on stdin"
    )
    p.set_defaults(func=cmd_start)

    loop = sub.add_parser("loop", help="one-shot supervisor passes (cron shape)").add_subparsers(
        dest="loop_cmd", metavar="ACTION", required=True
    )
    p = loop.add_parser("run", help="one ping or one tick")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--ping-once", action="store_true", help="check pool and agent liveness")
    g.add_argument("--continue-once", action="store_true", help="run one tick of the passes")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _supervisor_flags(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_loop_run)
    p = loop.add_parser("poll", help="run the poll pass once")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _supervisor_flags(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_loop_poll)
    p = loop.add_parser("workflow", help="run the workflow pass once (reviews, acceptance, epics)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _supervisor_flags(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_loop_workflow)

    p = sub.add_parser("status", help="supervisor, pool, queue and sessions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)


def _config(ctx: Context) -> Any:
    from laneboard.config import load_supervisor_config

    a = ctx.args
    over: dict[str, Any] = {}
    for name in (
        "max_concurrency",
        "project_concurrency",
        "default_agent",
        "claim_unassigned",
        "state_dir",
    ):
        v = getattr(a, name, None)
        if v is not None:
            over[name] = v
    time_over = {}
    if getattr(a, "tick_interval", None):
        time_over["tick_interval"] = a.tick_interval
    if getattr(a, "turn_timeout", None):
        time_over["turn_timeout"] = a.turn_timeout
    if time_over:
        over["time"] = time_over
    return load_supervisor_config(over)


def runtime(ctx: Context) -> Any:
    from dataclasses import replace

    from laneboard.agents.roles import discover_roles
    from laneboard.supervisor.instances import machine_name
    from laneboard.supervisor.logs import LogFile
    from laneboard.supervisor.runtime import Runtime

    cfg = _config(ctx)
    roles = {r.id: r for r in discover_roles().roles}
    workers = tuple(r.id for r in roles.values() if "worker" in r.lanes)
    reviewers = tuple(r.id for r in roles.values() if "reviewer" in r.lanes)
    cfg = replace(
        cfg,
        worker_roles=workers or cfg.worker_roles,
        reviewer_roles=reviewers or cfg.reviewer_roles,
    )
    log = LogFile(cfg.state_path("supervisor.log"), cfg.log_max_bytes, cfg.log_keep)
    return Runtime(
        ctx.store, cfg, machine_name(), log, roles=roles, kind_available=_availability(cfg)
    )


def _availability(cfg: Any) -> Any:
    from laneboard.agents.discovery import find_binary

    cache: dict[str, bool] = {}

    def available(kind: str) -> bool:
        if kind not in cache:
            if kind == "scripted":
                cache[kind] = True
            elif kind == "command":
                cache[kind] = bool(cfg.agent_kinds.get("command", {}).get("template"))
            else:
                cache[kind] = find_binary(kind, cfg.agent_kinds.get(kind, {})) is not None
        return cache[kind]

    return available


def cmd_start(ctx: Context) -> int:
    import sys

    from laneboard.board.schedules import run_schedule_pass
    from laneboard.supervisor.loop import Supervisor

    rt = runtime(ctx)

    def schedules() -> None:
        result = run_schedule_pass(rt.store, rt.clock, rt.instance or "supervisor")
        if result.fired or result.failed:
            rt.log.info(
                "schedules",
                "schedule pass",
                **{"fired": len(result.fired), "failed": len(result.failed)},
            )

    from laneboard.supervisor.director import DirectorLane, director_clock
    from laneboard.supervisor.patrol import load_settings

    rt.patrol_settings = load_settings(notify_command=ctx.args.notify)
    lane = DirectorLane(rt)  # questions and routing, on the director's own clock
    sup = Supervisor(rt, extra_clocks=[("schedules", 20_000, schedules), director_clock(lane)])
    sup.start()
    sup.install_signals()
    sys.stderr.write(
        f"laneboard supervisor running (instance {rt.instance}); "
        f"log: {rt.config.state_path('supervisor.log')}\n"
    )
    sys.stderr.flush()
    try:
        sup.run(max_seconds=ctx.args.for_seconds)
    finally:
        lane.close()
    return 0


def cmd_loop_run(ctx: Context) -> int:
    from laneboard.supervisor.loop import Ticker

    rt = runtime(ctx)
    if ctx.args.ping_once:
        from laneboard.supervisor.ping import ping_once

        report = ping_once(rt, dry_run=ctx.args.dry_run)
        ctx.out(report, "\n".join(f"{k}: {v}" for k, v in report.items()))
        return 0
    result = Ticker(rt).tick(force=True, dry_run=ctx.args.dry_run)
    ctx.out(
        result.to_dict(),
        f"tick {result.state}"
        + (f": {result.reason}" if result.reason else "")
        + "".join(f"\n  {k}: {v}" for k, v in result.passes.items()),
    )
    return 3 if result.state == "skipped" else 0


def cmd_loop_poll(ctx: Context) -> int:
    from laneboard.supervisor.poll import poll

    rt = runtime(ctx)
    res = poll(rt, dry_run=ctx.args.dry_run)
    ctx.out(res.to_dict(), "\n".join(f"{k}: {v}" for k, v in res.to_dict().items()))
    return 0


def cmd_loop_workflow(ctx: Context) -> int:
    from laneboard.supervisor.workflow import render, run

    rt = runtime(ctx)
    out = run(rt, dry_run=ctx.args.dry_run)
    ctx.out(out, render(out))
    return 0


def cmd_status(ctx: Context) -> int:
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor.status import render, status_report

    try:
        cfg = load_supervisor_config()
    except LaneboardError:
        raise
    report = status_report(ctx.store, ctx.clock, cfg)
    ctx.out(report, render(report))
    return 0
