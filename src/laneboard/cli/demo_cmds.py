"""``lb demo``."""

from __future__ import annotations

from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.generated import command


def register(sub: Any) -> None:
    p = command(
        sub,
        "demo",
        "run three cards end to end with the scripted agent",
        "Make a temporary git project and board, add three cards as one run and run the "
        "real supervisor with the scripted agent until each card is verified, accepted and "
        "landed and the run has converged; then print what happened and the run's final "
        "convergence state. With --json, progress goes to stderr and "
        "stdout is the one summary document.",
        ("lb demo", "lb demo --keep --json", "lb demo --orchestrate"),
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary project and board")
    p.add_argument("--timeout", type=float, default=90.0, help="give up after this many seconds")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--orchestrate", action="store_true",
                   help="run the goal-driven mode instead: a scripted coordinator and "
                   "specialists, with revisions, checks and the published patch")  # fmt: skip
    p.set_defaults(func=cmd_demo)


def cmd_demo(ctx: Context) -> int:
    if ctx.args.orchestrate:
        from laneboard import demo_orchestrate

        return demo_orchestrate.main(ctx.args.keep, ctx.json)
    from laneboard.demo import main_demo

    return main_demo(ctx.args.keep, ctx.args.timeout, ctx.json)
