"""``lb start`` and ``lb loop run|poll|workflow``: the supervisor, resident or one-shot."""

from __future__ import annotations

import argparse
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.generated import command


def supervisor_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-concurrency", type=int, help="agent turns at once (default 8)")
    p.add_argument("--project-concurrency", type=int, help="per project (default: the max)")
    p.add_argument(
        "--agent",
        dest="force_agent",
        metavar="KIND",
        help="run every role on this kind and no other (claude, codex, pi, command, scripted)",
    )
    p.add_argument(
        "--default-agent",
        dest="default_agent",
        metavar="KIND",
        help="kind for roles that name none or whose kinds are not available",
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
    p = command(
        sub,
        "start",
        "run the resident supervisor (clocks, passes, pool)",
        "Run this machine's supervisor until stopped: the fallback tick and the event "
        "clock drive the passes (poll, workflow, patrol, lanes, schedules, the director), "
        "and the pool runs one agent session per claimed card; every active run is ticked "
        "on its own clock (a run's failing ticks back off and mark it degraded). The "
        "sessions reach the board through the board socket in the state directory, never "
        "the database.",
        ("lb start", "lb start --max-concurrency 2 --agent codex", "lb start --for-seconds 60"),
    )
    supervisor_flags(p)
    p.add_argument("--tick-interval", type=int, help="fallback tick, seconds (default 600)")
    p.add_argument("--turn-timeout", type=int, help="agent turn timeout, seconds (default 1800)")
    p.add_argument("--for-seconds", type=float, help="stop after this long (for scripts)")
    p.add_argument(
        "--health-port", type=int, metavar="PORT",
        help="serve GET /healthz on 127.0.0.1:PORT (0: a free port, printed at start)",
    )  # fmt: skip
    p.add_argument(
        "--notify", metavar="CMD", help="patrol alerts go to this command as JSON on stdin"
    )
    p.set_defaults(func=cmd_start, creates_board=True)

    loop = sub.add_parser(
        "loop", help="one-shot supervisor passes (cron shape)", description=LOOP
    ).add_subparsers(dest="loop_cmd", metavar="ACTION", required=True)
    p = command(
        loop,
        "run",
        "run one ping or one tick",
        "--ping-once checks the pool's and the agents' liveness and recovers rows whose "
        "agent died; --continue-once runs one tick of every pass, as the resident "
        "supervisor would. Exit 3 when another tick holds the lock.",
        ("lb loop run --continue-once", "lb loop run --ping-once --json"),
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--ping-once", action="store_true", help="check pool and agent liveness")
    g.add_argument("--continue-once", action="store_true", help="run one tick of the passes")
    _one_shot(p, cmd_loop_run)
    p = command(
        loop,
        "poll",
        "run the poll pass once",
        "Claim ready cards for the configured roles and queue their sessions, once.",
        ("lb loop poll --dry-run",),
    )
    _one_shot(p, cmd_loop_poll)
    p = command(
        loop,
        "workflow",
        "run the workflow pass once (reviews, acceptance, epics)",
        "Open review cards for delivered work, apply verdicts, close accepted cards and "
        "roll up epics, once.",
        ("lb loop workflow", "lb loop workflow --dry-run --json"),
    )
    _one_shot(p, cmd_loop_workflow)


LOOP = "One pass of the supervisor at a time, for cron or a script instead of lb start."


def _one_shot(p: argparse.ArgumentParser, func: Any) -> None:
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    supervisor_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=func)


def _config(ctx: Context) -> Any:
    from laneboard.config import load_supervisor_config

    a = ctx.args
    over: dict[str, Any] = {}
    for name in (
        "max_concurrency",
        "project_concurrency",
        "default_agent",
        "force_agent",
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
    from laneboard.config import check_project_files
    from laneboard.supervisor.instances import machine_name
    from laneboard.supervisor.logs import LogFile
    from laneboard.supervisor.runtime import Runtime

    cfg = _config(ctx)
    check_project_files(ctx.board.projects())  # a bad project file stops the start
    roles = {r.id: r for r in discover_roles().roles}
    workers = tuple(r.id for r in roles.values() if "worker" in r.lanes)
    reviewers = tuple(r.id for r in roles.values() if "reviewer" in r.lanes)
    cfg = replace(
        cfg,
        worker_roles=workers or cfg.worker_roles,
        reviewer_roles=reviewers or cfg.reviewer_roles,
    )
    log = LogFile(cfg.state_path("supervisor.log"), cfg.log_max_bytes, cfg.log_keep)
    rt = Runtime(
        ctx.store, cfg, machine_name(), log, roles=roles, kind_available=_availability(cfg)
    )
    from laneboard.domain.weights import SlaLimits
    from laneboard.supervisor.patrol import settings_of

    # the candidate order's SLA pressure uses the patrol's own limits (``[patrol]``)
    patrol = settings_of(rt)
    rt.board.sla = SlaLimits(patrol.review_aging_min, patrol.stale_min)
    return rt


def _availability(cfg: Any) -> Any:
    from laneboard.supervisor.preflight import availability

    return availability(cfg)


def cmd_start(ctx: Context) -> int:
    import sys

    from laneboard.board.schedules import run_schedule_pass
    from laneboard.supervisor.loop import Supervisor
    from laneboard.supervisor.preflight import preflight

    rt = runtime(ctx)
    preflight(rt)  # refuses to run agents without a sandbox or with an unexplained bypass

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
    from laneboard.supervisor import board_socket

    sock = board_socket.serve(
        rt.board, rt.config.state_path(), rt.log
    )  # the sessions' LANEBOARD_URL
    probe = ""
    if ctx.args.health_port is not None:
        from laneboard.cli.health_port import serve

        port = serve(rt.store, ctx.args.health_port).server_address[1]
        probe = f"; health: http://127.0.0.1:{port}/healthz"
    sys.stderr.write(
        f"laneboard supervisor running (instance {rt.instance}); "
        f"log: {rt.config.state_path('supervisor.log')}; board socket: {sock.url}{probe}\n"
    )
    sys.stderr.flush()
    try:
        sup.run(max_seconds=ctx.args.for_seconds)
    finally:
        lane.close()
    return 0


def cmd_loop_run(ctx: Context) -> int:
    from laneboard.supervisor.ticker import Ticker

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
