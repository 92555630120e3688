"""``lb worktree create|status|leave|sweep`` (a human's session worktrees) and ``lb land``."""

from __future__ import annotations

import os
from typing import Any

from laneboard.cli.common import Context, table
from laneboard.errors import LaneboardError


def register(sub: Any) -> None:
    wt = sub.add_parser(
        "worktree", help="your own session worktrees under .worktrees/"
    ).add_subparsers(dest="worktree_cmd", metavar="ACTION", required=True)
    p = wt.add_parser("create", help="create .worktrees/NAME on branch wt/NAME (or --branch)")
    p.add_argument("name")
    p.add_argument("--branch", help="branch to create or attach (never lane/...)")
    p.add_argument("--from", dest="start", help="start a new branch from this ref (default HEAD)")
    _common(p, cmd_create)

    p = wt.add_parser("status", help="every worktree: branch, clean, merged (git worktree list)")
    _common(p, cmd_status)

    p = wt.add_parser("leave", help="say whether NAME can go; --remove deletes it if safe")
    p.add_argument("name")
    p.add_argument(
        "--remove", action="store_true", help="remove it when clean and merged (never forced)"
    )
    _common(p, cmd_leave)

    p = wt.add_parser("sweep", help="remove clean, merged session trees; report the survivors")
    _common(p, cmd_sweep)

    p = sub.add_parser("land", help="land an accepted card's lane (merge it), or retry a landing")
    p.add_argument("card")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_land)


def _common(p: Any, func: Any) -> None:
    p.add_argument("--repo", default=".", help="a directory in the repository (default: here)")
    p.add_argument("--json", action="store_true")
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


def cmd_land(ctx: Context) -> int:
    from laneboard.workspace.land import land

    card = ctx.board.get(ctx.args.card)
    if card.status.value == "in_review":
        closed = ctx.board.move(ctx.actor, card.ref, "done")  # lands through the gate
        merge = closed.meta.get("merge_commit")
        data = {"card": closed.ref, "status": closed.status.value, "landed": merge is not None,
                "merge_commit": merge}  # fmt: skip
        text = (
            f"{closed.ref} landed at {merge} and is done"
            if merge
            else (f"{closed.ref} is done (it has no lane to land)")
        )
        ctx.out(data, text)
        return 0
    if card.status.value != "done":
        raise LaneboardError(
            "ILLEGAL_TRANSITION",
            f"{card.ref} is {card.status.value}; only an accepted card lands",
            f"deliver and review it first, then: lb land {card.ref}",
        )
    res = land(ctx.store, card)
    if res.blocked is not None:
        raise LaneboardError(
            "LANDING_BLOCKED",
            f"{card.ref} was not landed: {res.blocked}",
            f"see the note on the card, then run: lb land {card.ref}",
            commands=res.commands,
        )
    data = {"card": card.ref, "status": card.status.value, **res.to_dict()}
    if res.skipped:
        text = f"{card.ref} {res.skipped}: nothing to land"
    else:
        text = f"{card.ref} landed at {res.merge_commit} on {res.target_branch}"
    ctx.out(data, text)
    return 0
