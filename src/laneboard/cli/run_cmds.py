"""``lb run --project P --goal TEXT``: create or resume one run and drive it.

The finite loop of ``supervisor.runs.RunDriver`` over this machine's supervisor (its
passes, its pool and the board socket its sessions reach the board through), with the
claims of every tick scoped to the run. ``lb run list|show|…`` are operations of the
table (``ops.runs``); this bare form is the local command.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.generated import command
from laneboard.errors import bad_input

DURATION = re.compile(r"^(-?\d+(?:\.\d+)?)(ms|s|m|h)?$")
UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}


def duration_ms(raw: str, where: str) -> int:
    """``250ms``, ``1s``, ``1.5s``, ``2m``; a bare number is seconds."""
    m = DURATION.match(raw.strip())
    if m is None:
        raise bad_input(f"{where} {raw!r} is not a duration", "use e.g. 250ms, 1s or 2m")
    return int(float(m.group(1)) * UNITS_MS[m.group(2)])


def register(sub: Any) -> None:
    from laneboard.cli.loop_cmds import supervisor_flags

    p = command(
        sub,
        "run",
        "create or resume a run and drive it until it converges",
        "Create a run for a goal in a project (or resume one with --resume) and drive it on "
        "this machine: the first iteration at once, later ones on a ticker; each iteration "
        "is one tick of the supervisor's passes with claims scoped to the run's cards. The "
        "loop ends when the run converges (completed or blocked), fails (the error "
        "threshold), is stopped, or reaches --max-iterations. Non-positive interval, "
        "backoff and threshold take their defaults; --headless runs one iteration unless "
        "--max-iterations says otherwise (a negative limit is unbounded). "
        "lb run list|show|create|start|pause|resume|stop|force-stop work on runs.",
        (
            'lb run --project WEB --goal "ship the billing export" --agent scripted',
            "lb run --resume 3 --headless --json",
            'lb run --project WEB --goal "nightly" --interval 5s --max-iterations 20',
        ),
    )
    from laneboard.ops.index import actions

    listed = "\n".join(f"  {word:<11} {summary}" for word, summary in actions("run").items())
    p.epilog = f"{p.epilog}\n\nactions: (lb run ACTION --help)\n{listed}"
    p.add_argument("--project", help="the project (key or name) of a new run")
    p.add_argument("--goal", help="what the run is for (a new run)")
    p.add_argument("--resume", type=int, metavar="RUN", help="resume this run instead")
    p.add_argument("--interval", default="1s", help="between iterations (default 1s)")
    p.add_argument(
        "--retry-backoff", default="250ms", help="after a failed iteration (default 250ms)"
    )
    p.add_argument(
        "--max-consecutive-errors", type=int, default=5,
        help="fail the run after this many failed iterations in a row (default 5)",
    )  # fmt: skip
    p.add_argument(
        "--max-iterations", type=int, default=0, help="bound the iterations (0: unbounded)"
    )
    p.add_argument(
        "--headless", action="store_true",
        help="no progress lines; zero iterations means one",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    supervisor_flags(p)
    p.add_argument("--turn-timeout", type=int, help="agent turn timeout, seconds (default 1800)")
    p.set_defaults(func=cmd_run, creates_board=False)


def options(args: argparse.Namespace) -> Any:
    from laneboard.domain.runs import normalize

    return normalize(
        interval_ms=duration_ms(args.interval, "--interval"),
        retry_backoff_ms=duration_ms(args.retry_backoff, "--retry-backoff"),
        max_consecutive_errors=args.max_consecutive_errors,
        max_iterations=args.max_iterations,
        headless=args.headless,
    )


def check_args(ctx: Context) -> None:
    """Refuse a bad command line before anything starts or is written."""
    from laneboard.board.runs import check_goal

    a = ctx.args
    if a.resume is not None:
        if a.goal is not None:
            raise bad_input("--resume takes no --goal", "resume with: lb run --resume RUN")
        run = ctx.board.run_record(a.resume)
        if a.project is not None and ctx.board.project(a.project).id != run.project_id:
            raise bad_input(
                f"run {run.id} is not in project {a.project}", "drop --project or fix it"
            )
        return
    if a.project is None or a.goal is None:
        raise bad_input(
            "a new run needs --project and --goal",
            'e.g. lb run --project WEB --goal "ship the export", or --resume RUN',
        )
    ctx.board.project(a.project)
    check_goal(a.goal)


def open_run(ctx: Context, opts: Any) -> int:
    from laneboard.board import run_loop

    a = ctx.args
    if a.resume is not None:
        return run_loop.reopen(ctx.store, ctx.actor, a.resume, opts.to_dict()).id
    return int(ctx.board.create_run(ctx.actor, a.project, a.goal, opts)["id"])


def cmd_run(ctx: Context) -> int:
    from laneboard.cli.loop_cmds import runtime
    from laneboard.supervisor import board_socket
    from laneboard.supervisor.loop import Supervisor
    from laneboard.supervisor.preflight import preflight
    from laneboard.supervisor.runs import RunDriver

    opts = options(ctx.args)
    check_args(ctx)
    rt = runtime(ctx)
    preflight(rt)
    sup = Supervisor(rt, drive_runs=False)
    sup.start()  # this machine's supervisor slot first: refused, nothing is written
    try:
        run_id = open_run(ctx, opts)
    except BaseException:
        sup.shutdown()
        raise
    rt.run_scope = run_id

    def passes() -> None:
        result = sup.ticker.tick(force=True)
        failed = {k: v["error"] for k, v in result.passes.items() if isinstance(v, dict)
                  and v.get("error")}  # fmt: skip
        if failed:
            raise RuntimeError("; ".join(f"{k} pass: {v}" for k, v in sorted(failed.items())))

    driver = RunDriver(sup, run_id, passes)
    progress = Progress(ctx, run_id) if not opts.headless and not ctx.json else None
    sup.extra_clocks.append(("run", 0, driver))
    if progress is not None:
        sup.extra_clocks.append(("progress", 0, progress))
    sup.install_signals()
    sock = board_socket.serve(rt.board, rt.config.state_path(), rt.log)
    if progress is not None:
        sys.stderr.write(f"run {run_id}: driving it on this machine (board socket {sock.url})\n")
    try:
        sup.run()
    finally:
        sock.close()
    result = driver.result or driver.canceled()
    conv = result.convergence
    ctx.out(
        result.to_dict(),
        f"run {result.run_id} {result.status} after {result.iterations} iterations "
        f"({result.reason}); convergence {conv.get('state')} / {conv.get('reason')}",
    )
    return 1 if result.status == "failed" else 0


class Progress:
    """A line on standard error whenever the run's status or convergence changes."""

    def __init__(self, ctx: Context, run_id: int) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.last: tuple[Any, ...] | None = None

    def __call__(self) -> None:
        v = self.ctx.board.run(self.run_id)
        now = (v["status"], v["convergence"]["state"], v["convergence"]["reason"], v["cards"])
        if now != self.last:
            self.last = now
            cards = ", ".join(f"{n} {s}" for s, n in v["cards"].items()) or "no cards yet"
            sys.stderr.write(
                f"run {self.run_id} {v['status']}: {v['convergence']['reason'] or '-'} ({cards})\n"
            )
            sys.stderr.flush()
