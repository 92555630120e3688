"""``lb init``, ``lb project`` and ``lb card``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from laneboard.cli.common import Context, table
from laneboard.errors import bad_input


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def register(sub: Any) -> None:
    p = sub.add_parser("init", help="create the board database (and optionally a project)")
    p.add_argument("--project", metavar="KEY", help="also add a project with this key")
    p.add_argument("--path", default=None, help="project directory (default: current directory)")
    _json_flag(p)
    p.set_defaults(func=cmd_init)

    proj = sub.add_parser("project", help="projects on the board").add_subparsers(
        dest="project_cmd", metavar="ACTION", required=True
    )
    p = proj.add_parser("add", help="add a project")
    p.add_argument("key", help="short upper-case key used in card ids, e.g. WEB")
    p.add_argument("--name", help="display name (default: the key)")
    p.add_argument("--path", help="the project's directory (a git checkout for lanes)")
    p.add_argument("--base-ref", help="git ref lanes start from (default: the current branch)")
    _json_flag(p)
    p.set_defaults(func=cmd_project_add)
    p = proj.add_parser("config", help="show or change a project's settings")
    p.add_argument("key", help="project key or name")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="workspace=lanes|shared, review_gate=CMD (repeat to add), "
        "check_timeout=SECONDS, base_ref=REF",
    )
    p.add_argument("--unset", action="append", default=[], metavar="NAME")
    _json_flag(p)
    p.set_defaults(func=cmd_project_config)
    p = proj.add_parser("list", help="list projects")
    _json_flag(p)
    p.set_defaults(func=cmd_project_list)

    card = sub.add_parser("card", help="cards: create, read, move, claim, report").add_subparsers(
        dest="card_cmd", metavar="ACTION", required=True
    )
    _card_parsers(card)
    from laneboard.cli.question_cmds import register_card

    register_card(card)  # lb card ask / lb card wait


def _card_parsers(card: Any) -> None:
    p = card.add_parser("add", help="create a card")
    p.add_argument("project", help="project key or name")
    p.add_argument("title")
    p.add_argument("--description", "-d", default="")
    p.add_argument("--kind", default="task", choices=["task", "epic"])
    p.add_argument("--parent", help="epic this card belongs to")
    p.add_argument("--assignee", help="role or agent name (default: unassigned)")
    p.add_argument("--priority", "-p", type=int, default=2, help="0 highest … 3 lowest")
    p.add_argument("--label", action="append", default=[], dest="labels")
    p.add_argument(
        "--accept",
        action="append",
        default=[],
        dest="acceptance",
        help="an acceptance criterion (repeatable)",
    )
    p.add_argument("--acceptance-mode", default="auto", choices=["off", "auto", "human"])
    p.add_argument(
        "--check",
        action="append",
        default=[],
        dest="checks",
        help="a command that must pass before acceptance (repeatable)",
    )
    p.add_argument(
        "--allow-path",
        action="append",
        default=[],
        dest="allowed_paths",
        help="repository-relative path the card may change (repeatable)",
    )
    p.add_argument("--status", default="todo", choices=["todo", "backlog"])
    p.add_argument("--depends-on", action="append", default=[], dest="depends_on")
    p.add_argument("--meta", help="JSON object of extra fields")
    p.add_argument("--key", dest="idempotency_key", help="idempotency key")
    _json_flag(p)
    p.set_defaults(func=cmd_card_add)

    p = card.add_parser("get", help="show one card")
    p.add_argument("ref")
    _json_flag(p)
    p.set_defaults(func=cmd_card_get)

    p = card.add_parser("list", help="list cards")
    p.add_argument("--project")
    p.add_argument("--status", action="append", default=[], dest="statuses")
    p.add_argument("--assignee")
    p.add_argument("--unassigned", action="store_true")
    p.add_argument("--label")
    p.add_argument("--parent")
    p.add_argument("--limit", type=int, default=500)
    _json_flag(p)
    p.set_defaults(func=cmd_card_list)

    p = card.add_parser("edit", help="change fields of a card")
    p.add_argument("ref")
    p.add_argument("--title")
    p.add_argument("--description", "-d")
    p.add_argument("--assignee", help="'' to unassign")
    p.add_argument("--priority", "-p", type=int)
    p.add_argument("--label", action="append", dest="labels")
    p.add_argument("--accept", action="append", dest="acceptance")
    p.add_argument("--acceptance-mode", choices=["off", "auto", "human"])
    p.add_argument("--check", action="append", dest="checks")
    p.add_argument("--allow-path", action="append", dest="allowed_paths")
    p.add_argument("--parent", help="epic ('' to detach)")
    p.add_argument("--meta", help="JSON object merged into meta")
    _json_flag(p)
    p.set_defaults(func=cmd_card_edit)

    p = card.add_parser("move", help="move a card to another status")
    p.add_argument("ref")
    p.add_argument("status")
    p.add_argument("--reason", help="E1-E5 for awaiting; free text for blocked")
    p.add_argument("--question", help="the question, for awaiting")
    p.add_argument("--note", help="a note comment written with the move")
    p.add_argument("--key", dest="idempotency_key", help="idempotency key")
    _json_flag(p)
    p.set_defaults(func=cmd_card_move)

    p = card.add_parser("claim", help="claim a card (atomic; losers get CLAIM_CONFLICT)")
    p.add_argument("ref", nargs="?", help="the card (or use --next)")
    p.add_argument(
        "--next", action="store_true", help="claim the heaviest ready card of the claim set"
    )
    p.add_argument(
        "--assignee",
        action="append",
        default=[],
        dest="assignees",
        help="with --next: the claim set (repeatable; default: your own name)",
    )
    p.add_argument(
        "--include-unassigned", action="store_true", help="with --next: also unassigned cards"
    )
    p.add_argument("--project", help="with --next: only this project")
    p.add_argument("--holder", help="claim under this name (default: you)")
    p.add_argument("--session", help="agent session id")
    p.add_argument("--key", dest="idempotency_key")
    _json_flag(p)
    p.set_defaults(func=cmd_card_claim)

    p = card.add_parser("heartbeat", help="refresh your claim")
    p.add_argument("ref")
    _json_flag(p)
    p.set_defaults(func=cmd_card_heartbeat)

    p = card.add_parser("release", help="give a claimed card back (in_progress -> todo)")
    p.add_argument("ref")
    p.add_argument("--note")
    _json_flag(p)
    p.set_defaults(func=cmd_card_release)

    p = card.add_parser("comment", help="comment on a card")
    p.add_argument("ref")
    p.add_argument("body")
    p.add_argument(
        "--kind",
        default="note",
        choices=["note", "question", "answer", "decision", "confirm", "change", "finding"],
    )
    _json_flag(p)
    p.set_defaults(func=cmd_card_comment)

    p = card.add_parser("report", help="write the delivery report for the current round")
    p.add_argument("ref")
    p.add_argument("--body", required=True, help="the report text ('-' reads stdin)")
    p.add_argument("--commit", help="commit the report is anchored to")
    p.add_argument(
        "--evidence",
        action="append",
        default=[],
        help="EXIT:COMMAND, e.g. '0:pytest -q' (repeatable)",
    )
    p.add_argument("--verdict", choices=["APPROVE", "REJECT"])
    _json_flag(p)
    p.set_defaults(func=cmd_card_report)

    p = card.add_parser("link", help="make REF depend on DEPENDS_ON")
    p.add_argument("ref")
    p.add_argument("depends_on")
    p.add_argument("--remove", action="store_true", help="remove the dependency instead")
    _json_flag(p)
    p.set_defaults(func=cmd_card_link)

    p = card.add_parser("candidates", help="claimable cards, heaviest first")
    p.add_argument("--assignee", action="append", default=[], dest="assignees")
    p.add_argument("--include-unassigned", action="store_true")
    p.add_argument(
        "--stale", action="store_true", help="add in_progress cards with stale heartbeats"
    )
    p.add_argument("--project")
    p.add_argument("--limit", type=int, default=50)
    _json_flag(p)
    p.set_defaults(func=cmd_card_candidates)


# -- helpers ------------------------------------------------------------------------
def _meta(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise bad_input(f"--meta is not JSON ({exc.msg})", "pass a JSON object") from None
    if not isinstance(value, dict):
        raise bad_input("--meta must be a JSON object", "pass {...}")
    return value


def _card_line(c: Any) -> str:
    who = c.holder or c.assignee or "-"
    return f"{c.ref}  {c.status.value:<11}  p{c.priority}  {who:<12}  {c.title}"


def _card_text(d: dict[str, Any]) -> str:
    lines = [
        f"{d['ref']}  {d['title']}",
        f"  status {d['status']}  kind {d['kind']}  priority {d['priority']}  "
        f"round {d['delivery_round']}  acceptance {d['acceptance_mode']}",
        f"  assignee {d['assignee'] or '-'}  holder {d['claim']['holder'] or '-'}  "
        f"epoch {d['claim']['epoch']}  heartbeat {d['claim']['heartbeat_at'] or '-'}",
    ]
    if d.get("labels"):
        lines.append("  labels " + ", ".join(d["labels"]))
    if d["description"]:
        lines += ["", *("  " + ln for ln in d["description"].splitlines())]
    if d["acceptance"]:
        lines += ["", "  acceptance:"] + [f"    {a['id']}. {a['text']}" for a in d["acceptance"]]
    if d["checks"]:
        lines += ["  checks:"] + [f"    $ {c}" for c in d["checks"]]
    if d["allowed_paths"]:
        lines.append("  allowed paths: " + ", ".join(d["allowed_paths"]))
    if d.get("dependencies"):
        lines.append(
            "  depends on: " + ", ".join(f"{x['ref']} ({x['status']})" for x in d["dependencies"])
        )
    for c in d.get("comments", []):
        lines.append(
            f"  [{c['kind']}] {c['author']} ({c['author_kind']}) {c['created_at']}: "
            + c["body"].splitlines()[0]
            if c["body"]
            else ""
        )
    for t in d.get("turns", []):
        cost = f" ${t['cost_usd']:.4f}" if t.get("cost_usd") is not None else ""
        lines.append(
            f"  turn r{t['round']} {t['agent_kind']} {t['outcome']}: "
            f"{t['input_tokens']} in / {t['output_tokens']} out tokens{cost}, "
            f"{t['duration_ms'] / 1000:.1f}s"
        )
    for r in d.get("reports", []):
        lines.append(f"  report r{r['round']} by {r['author']}: {len(r['evidence'])} evidence")
    return "\n".join(lines)


# -- commands -----------------------------------------------------------------------
def cmd_init(ctx: Context) -> int:
    store = ctx.store
    result: dict[str, Any] = {"database": store.url, "schema_version": store.schema_version()}
    if ctx.args.project:
        path = os.path.abspath(ctx.args.path or os.getcwd())
        p = ctx.board.add_project(ctx.actor, ctx.args.project, path=path)
        result["project"] = p.to_dict()
    ctx.out(
        result,
        f"board ready at {store.url} (schema {result['schema_version']})"
        + (f"; project {ctx.args.project} added" if ctx.args.project else ""),
    )
    return 0


def cmd_project_add(ctx: Context) -> int:
    a = ctx.args
    path = os.path.abspath(a.path) if a.path else None
    if path is not None and not os.path.isdir(path):
        raise bad_input(f"project path {a.path} is not a directory", "create it or fix --path")
    p = ctx.board.add_project(ctx.actor, a.key, a.name, path, a.base_ref)
    ctx.out(p.to_dict(), f"project {p.key} added ({p.path or 'no directory'})")
    return 0


def cmd_project_config(ctx: Context) -> int:
    a = ctx.args
    changes: dict[str, Any] = {}
    for item in a.set:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise bad_input(f"--set {item!r} is not NAME=VALUE", "e.g. --set workspace=shared")
        name = name.strip()
        if name == "review_gate":
            changes.setdefault(name, []).append(value)
        else:
            changes[name] = value
    if changes or a.unset:
        cfg = ctx.board.set_project_config(ctx.actor, a.key, changes, a.unset)
    else:
        cfg = ctx.board.project_config(a.key)
    ctx.out(
        cfg, "\n".join(f"{k} = {json.dumps(v)}" for k, v in sorted(cfg.items())) or "(defaults)"
    )
    return 0


def cmd_project_list(ctx: Context) -> int:
    ps = ctx.board.projects()
    ctx.out(
        [p.to_dict() for p in ps],
        table(
            [[p.key, p.name, p.path or "-", p.base_ref or "-"] for p in ps],
            ["KEY", "NAME", "PATH", "BASE"],
        ),
    )
    return 0


def cmd_card_add(ctx: Context) -> int:
    a = ctx.args
    c = ctx.board.create_card(
        ctx.actor,
        a.project,
        a.title,
        description=a.description,
        kind=a.kind,
        parent=a.parent,
        assignee=a.assignee,
        priority=a.priority,
        labels=a.labels,
        acceptance=a.acceptance,
        acceptance_mode=a.acceptance_mode,
        checks=a.checks,
        allowed_paths=a.allowed_paths,
        status=a.status,
        depends_on=a.depends_on,
        meta=_meta(a.meta),
        idempotency_key=a.idempotency_key,
    )
    ctx.out(c.to_dict(), f"{c.ref} created ({c.status.value})")
    return 0


def cmd_card_get(ctx: Context) -> int:
    d = ctx.board.card_detail(ctx.args.ref)
    ctx.out(d, _card_text(d))
    return 0


def cmd_card_list(ctx: Context) -> int:
    a = ctx.args
    cards = ctx.board.list_cards(
        project=a.project,
        statuses=a.statuses,
        assignee=a.assignee,
        unassigned=a.unassigned,
        label=a.label,
        parent=a.parent,
        limit=a.limit,
    )
    ctx.out([c.to_dict() for c in cards], "\n".join(_card_line(c) for c in cards) or "(none)")
    return 0


def cmd_card_edit(ctx: Context) -> int:
    a = ctx.args
    changes: dict[str, Any] = {}
    for name in (
        "title",
        "description",
        "assignee",
        "priority",
        "labels",
        "acceptance",
        "acceptance_mode",
        "checks",
        "allowed_paths",
    ):
        v = getattr(a, name)
        if v is not None:
            changes[name] = v
    if a.parent is not None:
        changes["parent"] = a.parent or None
    meta = _meta(a.meta)
    if meta is not None:
        changes["meta"] = meta
    c = ctx.board.edit(ctx.actor, a.ref, **changes)
    ctx.out(c.to_dict(), f"{c.ref} updated")
    return 0


def cmd_card_move(ctx: Context) -> int:
    a = ctx.args
    c = ctx.board.move(
        ctx.actor,
        a.ref,
        a.status,
        reason=a.reason,
        question=a.question,
        note=a.note,
        idempotency_key=a.idempotency_key,
    )
    ctx.out(c.to_dict(), f"{c.ref} is {c.status.value}")
    return 0


def cmd_card_claim(ctx: Context) -> int:
    a = ctx.args
    if a.next:
        if a.ref is not None or a.idempotency_key is not None:
            raise bad_input(
                "--next picks the card itself; it takes no CARD and no --key",
                "drop the card reference, or drop --next",
            )
        c = ctx.board.claim_next(
            ctx.actor,
            assignees=a.assignees,
            include_unassigned=a.include_unassigned,
            project=a.project,
            holder=a.holder,
            session_id=a.session,
        )
    else:
        if a.ref is None:
            raise bad_input("which card? none was given", "pass CARD, or --next to pick one")
        if a.assignees or a.include_unassigned or a.project:
            raise bad_input(
                "--assignee, --include-unassigned and --project only go with --next",
                "add --next, or drop them",
            )
        c = ctx.board.claim(
            ctx.actor,
            a.ref,
            holder=a.holder,
            session_id=a.session,
            idempotency_key=a.idempotency_key,
        )
    if os.environ.get("LANEBOARD_TOKEN_FILE"):  # a re-claim: the credential follows the epoch
        from laneboard.board.questions import refresh_token_file

        refresh_token_file(ctx.store, ctx.actor, c, os.environ["LANEBOARD_TOKEN_FILE"])
    ctx.out(c.to_dict(), f"{c.ref} claimed by {c.holder} (epoch {c.claim_epoch})")
    return 0


def cmd_card_heartbeat(ctx: Context) -> int:
    c = ctx.board.heartbeat(ctx.actor, ctx.args.ref)
    ctx.out(c.to_dict(), f"{c.ref} heartbeat recorded")
    return 0


def cmd_card_release(ctx: Context) -> int:
    c = ctx.board.release(ctx.actor, ctx.args.ref, note=ctx.args.note)
    ctx.out(c.to_dict(), f"{c.ref} released to {c.status.value}")
    return 0


def cmd_card_comment(ctx: Context) -> int:
    c = ctx.board.comment(ctx.actor, ctx.args.ref, ctx.args.body, ctx.args.kind)
    ctx.out(c.to_dict(), f"comment {c.id} added")
    return 0


def _evidence(items: list[str]) -> list[dict[str, Any]]:
    out = []
    for item in items:
        code, sep, command = item.partition(":")
        if not sep or not command.strip() or not code.strip().lstrip("-").isdigit():
            raise bad_input(
                f"evidence {item!r} is not EXIT:COMMAND", "e.g. --evidence '0:pytest -q'"
            )
        out.append({"command": command.strip(), "exit_code": int(code), "digest": ""})
    return out


def cmd_card_report(ctx: Context) -> int:
    a = ctx.args
    body = sys.stdin.read() if a.body == "-" else a.body
    r = ctx.board.report(
        ctx.actor, a.ref, body, commit=a.commit, evidence=_evidence(a.evidence), verdict=a.verdict
    )
    ctx.out(r.to_dict(), f"report for round {r.round} recorded")
    return 0


def cmd_card_link(ctx: Context) -> int:
    a = ctx.args
    if a.remove:
        c = ctx.board.unlink(ctx.actor, a.ref, a.depends_on)
    else:
        c = ctx.board.link(ctx.actor, a.ref, a.depends_on)
    ctx.out(c.to_dict(), f"{c.ref} depends on {len(c.depends_on)} card(s)")
    return 0


def cmd_card_candidates(ctx: Context) -> int:
    a = ctx.args
    if not 1 <= a.limit <= 1000:
        raise bad_input(f"limit {a.limit} is out of range", "use 1 to 1000")
    got = ctx.board.candidates(
        assignees=a.assignees,
        include_unassigned=a.include_unassigned,
        stale=a.stale,
        project=a.project,
        limit=a.limit,
    )
    rows = [
        [
            c.card.ref,
            c.card.status.value,
            f"p{c.card.priority}",
            f"{c.weight:.1f}",
            str(c.fanout),
            "stale" if c.stale else "",
            c.card.title,
        ]
        for c in got
    ]
    ctx.out(
        [c.to_dict() for c in got],
        table(rows, ["CARD", "STATUS", "PRI", "WEIGHT", "FANOUT", "", "TITLE"]),
    )
    return 0
