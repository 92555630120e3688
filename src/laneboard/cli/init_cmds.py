"""``lb init``: create the board database (and optionally a project). The board's
operations (projects, cards) are declared in ``laneboard.ops``."""

from __future__ import annotations

import os
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.generated import Formatter


def register(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="create the board database (and optionally a project)",
        description="Create the board database (or upgrade its schema), and optionally add "
        "a project. Running it again is harmless.",
        epilog="examples:\n  lb init\n  lb init --project WEB --path ~/src/web",
        formatter_class=Formatter,
    )
    p.add_argument("--project", metavar="KEY", help="also add a project with this key")
    p.add_argument("--path", default=None, help="project directory (default: current directory)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_init, creates_board=True)


def cmd_init(ctx: Context) -> int:
    store = ctx.store
    result: dict[str, Any] = {"database": store.url, "schema_version": store.schema_version()}
    if ctx.args.project:
        from laneboard.ops.board import PROJECT_ADD
        from laneboard.ops.invoke import Call, invoke

        path = os.path.abspath(ctx.args.path or os.getcwd())
        call = Call(ctx.board, ctx.actor)
        result["project"] = invoke(PROJECT_ADD, call, {"key": ctx.args.project, "path": path})
    ctx.out(
        result,
        f"board ready at {store.url} (schema {result['schema_version']})"
        + (f"; project {ctx.args.project} added" if ctx.args.project else ""),
    )
    return 0
