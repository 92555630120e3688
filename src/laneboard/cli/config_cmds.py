"""``lb config show|check|move-to-file``: resolved settings, their origins, and the files."""

from __future__ import annotations

import os
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.verb import add_verb, json_flag
from laneboard.errors import LaneboardError, bad_input


def register(sub: Any) -> None:
    cfg = sub.add_parser(
        "config", help="configuration: resolved values, where each came from, checks"
    ).add_subparsers(dest="config_cmd", metavar="ACTION", required=True)

    p = add_verb(
        cfg,
        "show",
        "print every setting with its value and where it came from",
        "Resolves each key with one precedence: flag, environment (LANEBOARD_*), the "
        "project's .laneboard/config.toml, the board's project settings, the user's "
        "config.toml, the built-in default. Each value names its origin: the flag, the "
        "variable, the file and line, the board, or default.\n\n"
        "Without --project the project file is looked up from the current directory "
        "upwards (to the top of the checkout).",
        "lb config show --project WEB\nlb config show --json --set supervisor.max_concurrency=2",
    )
    _project_flag(p)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="resolve as though KEY were given as a flag (repeatable)",
    )
    json_flag(p)
    p.set_defaults(func=cmd_show)

    p = add_verb(
        cfg,
        "check",
        "check the configuration files and stop on the first problem",
        "Reads the user's config.toml and the project files (the current directory's, "
        "or --project's, or with --all every project on the board) and refuses an "
        "unknown table or key or a bad value with the file, the line and the fix. "
        "Exit 0 when everything is valid, 2 otherwise.",
        "lb config check --all",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--project", help="check this board project's file (key or name)")
    g.add_argument("--all", action="store_true", help="check every project on the board")
    json_flag(p)
    p.set_defaults(func=cmd_check)

    p = add_verb(
        cfg,
        "move-to-file",
        "move a project's board settings into its .laneboard/config.toml",
        "Appends the settings held by the board for PROJECT (lb project config, and "
        "the base ref given to lb project add) to the [project] table of the project's "
        "own file, keeping every line already there, then removes them from the board. "
        "A setting the file already has keeps the file's value. Commit the file so the "
        "team reviews it with the code.",
        "lb config move-to-file WEB --print\nlb config move-to-file WEB",
    )
    p.add_argument("project", metavar="PROJECT", help="project key or name")
    p.add_argument("--print", action="store_true", help="show the file it would write")
    json_flag(p)
    p.set_defaults(func=cmd_move)


def _project_flag(p: Any) -> None:
    p.add_argument("--project", help="resolve for this board project (key or name)")


def _flags(items: list[str]) -> dict[str, Any]:
    from laneboard.config_keys import all_keys
    from laneboard.config_resolve import Flag

    keys = all_keys()
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise bad_input(
                f"--set {item!r} is not KEY=VALUE", "e.g. --set project.workspace=shared"
            )
        if name not in keys:
            import difflib

            close = difflib.get_close_matches(name, list(keys), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise bad_input(f"unknown setting {name!r}{hint}", "lb config show lists every key")
        out[name] = Flag(value, f"--set {name}")
    return out


def _project(ctx: Context, ref: str | None) -> tuple[Any, dict[str, Any] | None]:
    if not ref:
        return None, None
    project = ctx.board.project(ref)
    return project, ctx.board.project_config(project.id)


def cmd_show(ctx: Context) -> int:
    from laneboard.config_report import find_project_dir, render, show

    a = ctx.args
    flags = _flags(a.set)
    project, stored = _project(ctx, a.project)
    report = show(
        flags=flags,
        project=project,
        stored=stored,
        project_dir=None if project is not None else find_project_dir(os.getcwd()),
        db_flag=a.db,
    )
    ctx.out(report, render(report))
    return 0


def cmd_check(ctx: Context) -> int:
    from laneboard.config import check_project_files, project_settings
    from laneboard.config_report import find_project_dir
    from laneboard.config_resolve import resolve

    a = ctx.args
    resolve()  # the user's file, whole
    checked = []
    if a.all:
        projects = ctx.board.projects()
        check_project_files(projects)
        checked = [p.key for p in projects if p.path and os.path.isdir(p.path)]
    elif a.project:
        project, stored = _project(ctx, a.project)
        project_settings(project, stored)
        checked = [project.key]
    else:
        here = find_project_dir(os.getcwd())
        if here:
            project_settings(project_dir=here)
            checked = [here]
    from laneboard.config_resolve import user_file_path

    out = {"ok": True, "user_file": user_file_path(), "projects": checked}
    ctx.out(out, f"ok: {user_file_path()}" + "".join(f"\nok: {c}" for c in checked))
    return 0


def cmd_move(ctx: Context) -> int:
    a = ctx.args
    result = ctx.board.move_project_config_to_file(ctx.actor, a.project, dry_run=a.print)
    if ctx.json:
        ctx.out(result)
        return 0
    if a.print:
        ctx.out(result, f"# would write {result['file']}\n{result['text']}")
        return 0
    if not result["moved"] and not result["kept_from_file"]:
        raise LaneboardError(
            "NOT_FOUND",
            f"the board holds no settings for {result['project']}",
            f"lb config show --project {result['project']} shows where each comes from",
        )
    lines = [f"{result['file']}: added {', '.join(result['moved']) or 'nothing'}"]
    if result["kept_from_file"]:
        lines.append(f"kept the file's {', '.join(result['kept_from_file'])}")
    lines.append(f"the board no longer holds settings for {result['project']}; commit the file")
    ctx.out(result, "\n".join(lines))
    return 0
