"""``lb demo``."""

from __future__ import annotations

from typing import Any

from laneboard.cli.common import Context


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run three cards end to end with the scripted agent")
    p.add_argument("--keep", action="store_true", help="keep the temporary project and board")
    p.add_argument("--timeout", type=float, default=90.0, help="give up after this many seconds")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_demo)


def cmd_demo(ctx: Context) -> int:
    from laneboard.demo import main_demo

    return main_demo(ctx.args.keep, ctx.args.timeout, ctx.json)
