"""``lb worktree create|status|leave|sweep``: a person's session worktrees."""

from __future__ import annotations

import os
from typing import Any

from laneboard.cli.common import Context, table
from laneboard.cli.generated import command


def register(sub: Any) -> None:
    wt = sub.add_parser(
        "worktree",
        help="your own session worktrees under .worktrees/",
        description="Worktrees a person works in beside the lanes, under .worktrees/.",
    ).add_subparsers(dest="worktree_cmd", metavar="ACTION", required=True)
    p = command(
        wt,
        "create",
        "create .worktrees/NAME on branch wt/NAME (or --branch)",
        "Add a git worktree for your own session under the repository's .worktrees/, on a "
        "new branch wt/NAME (or an existing --branch; never a lane/ branch).",
        ("lb worktree create spike", "lb worktree create fix --branch fix/login --from main"),
    )
    p.add_argument("name", help="the worktree's name (its directory under .worktrees/)")
    p.add_argument("--branch", help="branch to create or attach (never lane/...)")
    p.add_argument("--from", dest="start", help="start a new branch from this ref (default HEAD)")
    _common(p, cmd_create)

    p = command(
        wt,
        "status",
        "list every worktree: branch, clean, merged",
        "Every worktree of the repository (yours, the lanes and the main checkout), whether "
        "its tree is clean and whether its branch is merged.",
        ("lb worktree status", "lb worktree status --repo ~/src/web --json"),
    )
    _common(p, cmd_status)

    p = command(
        wt,
        "leave",
        "say whether a worktree can go; --remove deletes it if safe",
        "A worktree can go when its tree is clean and its branch merged; --remove then "
        "removes the tree and its branch. A tree that is not safe to remove is never forced.",
        ("lb worktree leave spike", "lb worktree leave spike --remove"),
    )
    p.add_argument("name", help="the worktree's name")
    p.add_argument(
        "--remove", action="store_true", help="remove it when clean and merged (never forced)"
    )
    _common(p, cmd_leave)

    p = command(
        wt,
        "sweep",
        "remove clean, merged session trees; report the survivors",
        "Remove every session worktree that is clean and merged, and say why each other one stays.",
        ("lb worktree sweep",),
    )
    _common(p, cmd_sweep)


def _common(p: Any, func: Any) -> None:
    p.add_argument("--repo", default=".", help="a directory in the repository (default: here)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=func)


def _flag(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


def cmd_create(ctx: Context) -> int:
    from laneboard.workspace import session_worktrees as sw

    a = ctx.args
    t = sw.create(os.path.abspath(a.repo), a.name, a.branch, a.start)
    ctx.out(t.to_dict(), f"created {t.path} on {t.branch}")
    return 0


def cmd_status(ctx: Context) -> int:
    from laneboard.workspace import session_worktrees as sw

    trees = sw.status(os.path.abspath(ctx.args.repo))
    rows = [
        [t.kind, t.branch or "(detached)", _flag(t.clean), _flag(t.merged), t.path] for t in trees
    ]
    ctx.out(
        [t.to_dict() for t in trees], table(rows, ["KIND", "BRANCH", "CLEAN", "MERGED", "PATH"])
    )
    return 0


def cmd_leave(ctx: Context) -> int:
    from laneboard.workspace import session_worktrees as sw

    a = ctx.args
    got = sw.leave(os.path.abspath(a.repo), a.name, remove=a.remove)
    ctx.out(got, f"{got['worktree']['path']}: {got['note']}")
    return 0


def cmd_sweep(ctx: Context) -> int:
    from laneboard.workspace import session_worktrees as sw

    got = sw.sweep(os.path.abspath(ctx.args.repo))
    lines = [f"removed {t['path']} ({t['branch']})" for t in got["removed"]]
    lines += [
        f"kept {t['path']} ({t['branch'] or 'detached'}): {t['reason']}" for t in got["survivors"]
    ]
    ctx.out(got, "\n".join(lines) or "nothing to sweep")
    return 0
