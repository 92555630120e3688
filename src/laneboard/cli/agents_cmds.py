"""``lb agents check`` and ``lb agents roles``: which agent CLIs and roles this machine has."""

from __future__ import annotations

import argparse
import os
from typing import Any

from laneboard.cli.common import Context, table
from laneboard.cli.generated import command


def register(sub: Any) -> None:
    agents = sub.add_parser(
        "agents",
        help="agent CLIs and roles on this machine",
        description="Which agent CLIs this machine has, and which roles the project defines.",
    ).add_subparsers(dest="agents_command", metavar="SUBCOMMAND")
    p = command(
        agents,
        "check",
        "check each agent kind: found, version, and whether its protocol answers",
        "Find each agent CLI (claude, codex, pi), ask its version and, unless "
        "--no-handshake, open its resident protocol without a model call; also shows the "
        "permission boundary each kind runs under.",
        ("lb agents check", "lb agents check --kind codex --json"),
    )
    p.add_argument(
        "--kind",
        action="append",
        default=[],
        dest="kinds",
        help="check only this kind (repeatable; default: claude, codex, pi)",
    )
    p.add_argument(
        "--no-handshake", action="store_true", help="only find the binaries and ask their versions"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_agents_check)

    p = command(
        agents,
        "roles",
        "show the discovered roles and the claim set",
        "The roles found in the project's .laneboard/roles/, the user's roles directory and "
        "laneboard's defaults (worker, reviewer, director), with the lanes they work and "
        "the claim set the supervisor claims for.",
        ("lb agents roles", "lb agents roles --project-dir ~/src/web --json"),
    )
    p.add_argument(
        "--project-dir",
        default=None,
        help="project whose .laneboard/roles/ to read (default: current directory)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_agents_roles)


def _kinds_config() -> dict[str, dict[str, Any]]:
    from laneboard.config import load_supervisor_config

    return {k: dict(v) for k, v in load_supervisor_config().agent_kinds.items()}


def cmd_agents_check(ctx: Context) -> int:
    from laneboard.agents.checking import check_report
    from laneboard.config import load_supervisor_config

    args: argparse.Namespace = ctx.args
    data = check_report(load_supervisor_config(), tuple(args.kinds), not args.no_handshake)
    ctx.out(data, render_check(data))
    return 0


def cmd_agents_roles(ctx: Context) -> int:
    from laneboard.agents.roles import claim_set, discover_roles

    args: argparse.Namespace = ctx.args
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor.preflight import boundary_summary

    project_dir = args.project_dir or os.getcwd()
    catalog = discover_roles(project_dir)
    runs = boundary_summary(load_supervisor_config(), project_dir)
    data = {
        "roles": [r.to_dict() for r in catalog.roles],
        "claim_set": list(claim_set(catalog.roles)),
        "runs_on": runs["agents"],
        "unassigned_role": runs["unassigned_role"],
        "warnings": catalog.warnings,
    }
    kinds = {c["role"]: f"{c['kind'] or 'NONE'} ({c['detail']})" for c in runs["agents"]}
    rows = [
        [r.id, ",".join(r.lanes), kinds.get(r.id, "-"), r.source, r.title] for r in catalog.roles
    ]
    text = table(rows, ["ID", "LANES", "RUNS ON", "SOURCE", "TITLE"])
    text += "\nclaim set: " + (", ".join(claim_set(catalog.roles)) or "(none)")
    text += "\nunassigned cards: " + (runs["unassigned_role"] or "claimed for no role")
    for w in catalog.warnings:
        text += f"\nwarning: {w}"
    ctx.out(data, text)
    return 0


def render_check(data: dict[str, Any]) -> str:
    from laneboard.agents.checking import status_word

    rows = [
        [r["kind"], "yes" if r["found"] else "no", r["version"] or "-", status_word(r),
         r["path"] or "-", r["error"] or ((r.get("login") or {}).get("problem") or "")]
        for r in data["kinds"]
    ]  # fmt: skip
    text = table(rows, ["KIND", "FOUND", "VERSION", "STATUS", "PATH", "PROBLEM"])
    text += f"\nsandbox: {data['sandbox']['line']}"
    checks = data.get("checks")
    return text + (f"\nchecks: {checks['line']}" if checks else "")
