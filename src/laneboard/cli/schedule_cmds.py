"""``lb schedule add|list|show|remove|enable|disable`` and ``lb scheduler run``."""

from __future__ import annotations

import argparse
from typing import Any

from laneboard.cli.common import Context, table


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def register(sub: Any) -> None:
    sch = sub.add_parser("schedule", help="schedules: cards created by cron").add_subparsers(
        dest="schedule_cmd", metavar="ACTION", required=True
    )
    p = sch.add_parser("add", help="add a schedule from a card template (TOML or JSON)")
    p.add_argument("jobdef", metavar="JOBDEF", help="path to the card template")
    p.add_argument("--cron", required=True, help='five-field cron, e.g. "*/5 * * * *"')
    p.add_argument("--name", required=True, help="a unique name for the schedule")
    p.add_argument(
        "--timezone",
        default="local",
        help="local (the host's zone, the default) or an IANA name like Europe/Berlin",
    )
    p.add_argument("--disabled", action="store_true", help="add it disabled")
    _json_flag(p)
    p.set_defaults(func=cmd_add)

    p = sch.add_parser("list", help="list schedules with next due, last outcome and health")
    _json_flag(p)
    p.set_defaults(func=cmd_list)

    p = sch.add_parser("show", help="show one schedule")
    p.add_argument("name")
    _json_flag(p)
    p.set_defaults(func=cmd_show)

    for action, helptext in (
        ("remove", "delete a schedule (cards it created stay)"),
        ("enable", "enable a schedule (it fires from its next matching minute)"),
        ("disable", "disable a schedule (it stops firing)"),
    ):
        p = sch.add_parser(action, help=helptext)
        p.add_argument("name")
        _json_flag(p)
        p.set_defaults(func=cmd_change, action=action)

    run = sub.add_parser("scheduler", help="run schedule passes").add_subparsers(
        dest="scheduler_cmd", metavar="ACTION", required=True
    )
    p = run.add_parser("run", help="one pass (--once) or a pass every --poll-ms")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--once", action="store_true", help="run one pass; exit 3 if locked")
    g.add_argument("--poll-ms", type=int, help="run a pass every N milliseconds (e.g. 30000)")
    p.add_argument("--max-passes", type=int, default=0, help="with --poll-ms: stop after N")
    _json_flag(p)
    p.set_defaults(func=cmd_run)


def _service(ctx: Context) -> Any:
    from laneboard.board.schedules import Schedules

    return Schedules(ctx.store, ctx.clock)


def _line(v: dict[str, Any]) -> str:
    state = "enabled" if v["enabled"] else "disabled"
    nxt = v["next_due_local"] or "-"
    out = f"{v['name']}: {v['expression']} ({v['explanation']}; {v['timezone']}), {state}"
    return out + f", next due {nxt}, health {v['health']}"


def cmd_add(ctx: Context) -> int:
    from laneboard.board.schedule_jobs import load_job

    a = ctx.args
    job = load_job(a.jobdef)
    v = _service(ctx).add(
        ctx.actor, a.name, a.cron, job, timezone=a.timezone, enabled=not a.disabled
    )
    ctx.out(v, "added schedule " + _line(v))
    return 0


def cmd_list(ctx: Context) -> int:
    items = _service(ctx).list()
    rows = []
    for v in items:
        last = v["last_outcome"] or "-"
        if v["last_card"]:
            last += f" {v['last_card']}"
        rows.append(
            [
                v["name"],
                v["expression"],
                v["explanation"],
                v["timezone"],
                "yes" if v["enabled"] else "no",
                v["next_due_local"] or "-",
                last,
                v["health"],
            ]
        )
    headers = ["NAME", "CRON", "MEANING", "ZONE", "ON", "NEXT DUE", "LAST", "HEALTH"]
    ctx.out(items, table(rows, headers))
    return 0


def cmd_show(ctx: Context) -> int:
    v = _service(ctx).get(ctx.args.name)
    text = [_line(v), f"  card: {v['project']}: {v['title']}"]
    if v["last_outcome"]:
        text.append(
            f"  last: {v['last_outcome']} for {v['last_minute']}"
            + (f" -> {v['last_card']}" if v["last_card"] else "")
            + (f" ({v['last_detail']})" if v["last_detail"] else "")
        )
    if v["overdue_since"]:
        text.append(f"  overdue: the occurrence at {v['overdue_since']} has no outcome")
    ctx.out(v, "\n".join(text))
    return 0


def cmd_change(ctx: Context) -> int:
    svc = _service(ctx)
    action = ctx.args.action
    if action == "remove":
        v = svc.remove(ctx.actor, ctx.args.name)
        ctx.out(v, f"removed schedule {v['name']}")
        return 0
    v = svc.set_enabled(ctx.actor, ctx.args.name, action == "enable")
    ctx.out(v, f"{action}d schedule " + _line(v))
    return 0


def _render(d: dict[str, Any]) -> str:
    if d["state"] == "locked":
        return f"schedule pass skipped: the tick lock is held by {d['lock_holder']}"
    lines = [f"schedule pass at {d['minute']}: {d['checked']} enabled"]
    for r in d["reconciled"]:
        extra = f" {r['ref']}" if r.get("ref") else ""
        note = f" ({r['anomaly']})" if r.get("anomaly") else ""
        lines.append(f"  reconciled {r['name']} {r['minute']}: {r['action']}{extra}{note}")
    for m in d["missed"]:
        lines.append(f"  missed {m['name']} at {m['minute']} (no catch-up)")
    for f in d["fired"]:
        note = f" ({f['anomaly']})" if f.get("anomaly") else ""
        lines.append(f"  dispatched {f['name']} -> {f['ref']}{note}")
    for f in d["failed"]:
        lines.append(f"  dispatch-failed {f['name']}: {f['reason']}")
    return "\n".join(lines)


def _holder() -> str:
    import os
    import socket
    import uuid

    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def cmd_run(ctx: Context) -> int:
    import sys
    import time

    from laneboard.board.schedules import run_schedule_pass
    from laneboard.errors import bad_input

    a = ctx.args
    holder = _holder()
    if a.once:
        res = run_schedule_pass(ctx.store, ctx.clock, holder)
        ctx.out(res.to_dict(), _render(res.to_dict()))
        return 3 if res.locked else 0
    if a.poll_ms < 1000:
        raise bad_input(f"--poll-ms {a.poll_ms} is too short", "use at least 1000 (default 30000)")
    passes = 0
    while True:
        res = run_schedule_pass(ctx.store, ctx.clock, holder)
        ctx.out(res.to_dict(), _render(res.to_dict()))
        sys.stdout.flush()
        passes += 1
        if a.max_passes and passes >= a.max_passes:
            return 0
        time.sleep(a.poll_ms / 1000)
