"""``lb agents check`` and ``lb agents roles``: which agent CLIs and roles this machine has."""

from __future__ import annotations

import argparse
import os
from typing import Any

from laneboard.cli.common import Context, table


def register(sub: Any) -> None:
    agents = sub.add_parser("agents", help="agent CLIs and roles on this machine").add_subparsers(
        dest="agents_command", metavar="SUBCOMMAND"
    )
    p = agents.add_parser(
        "check", help="per agent kind: found, version, and whether its resident protocol answers"
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
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_agents_check)

    p = agents.add_parser("roles", help="the discovered roles and the claim set")
    p.add_argument(
        "--project-dir",
        default=None,
        help="project whose .laneboard/roles/ to read (default: current directory)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_agents_roles)


def _kinds_config() -> dict[str, dict[str, Any]]:
    from laneboard.config import load_supervisor_config

    return {k: dict(v) for k, v in load_supervisor_config().agent_kinds.items()}


def cmd_agents_check(ctx: Context) -> int:
    from laneboard.agents.discovery import KINDS, check_all
    from laneboard.agents.permissions import permission_summary

    args: argparse.Namespace = ctx.args
    kinds_cfg = _kinds_config()
    kinds = tuple(args.kinds) or KINDS
    results = check_all(kinds_cfg, handshake=not args.no_handshake, kinds=kinds)
    perms = permission_summary(kinds_cfg)["kinds"]
    data = {
        "kinds": [{**r.to_dict(), "permissions": perms.get(r.kind)} for r in results],
        "available": [r.kind for r in results if r.found and r.handshake is not False],
    }
    rows = []
    for r in results:
        shake = "-" if r.handshake is None else ("ok" if r.handshake else "FAILED")
        rows.append(
            [
                r.kind,
                "yes" if r.found else "no",
                r.version or "-",
                shake,
                r.path or "-",
                r.error or "",
            ]
        )
    ctx.out(data, table(rows, ["KIND", "FOUND", "VERSION", "PROTOCOL", "PATH", "PROBLEM"]))
    return 0


def cmd_agents_roles(ctx: Context) -> int:
    from laneboard.agents.roles import claim_set, discover_roles

    args: argparse.Namespace = ctx.args
    catalog = discover_roles(args.project_dir or os.getcwd())
    data = {
        "roles": [r.to_dict() for r in catalog.roles],
        "claim_set": list(claim_set(catalog.roles)),
        "warnings": catalog.warnings,
    }
    rows = [[r.id, ",".join(r.lanes), r.agent, r.source, r.title] for r in catalog.roles]
    text = table(rows, ["ID", "LANES", "AGENT", "SOURCE", "TITLE"])
    text += "\nclaim set: " + (", ".join(claim_set(catalog.roles)) or "(none)")
    for w in catalog.warnings:
        text += f"\nwarning: {w}"
    ctx.out(data, text)
    return 0
