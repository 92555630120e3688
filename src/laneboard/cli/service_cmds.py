"""``lb supervisor enable|disable|status`` and ``lb service enable|disable|status UNIT``.

``lb supervisor X`` is ``lb service X supervisor``; the server's unit is
``lb service X server``.
"""

from __future__ import annotations

import argparse
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.verb import add_verb, json_flag

SCHEDULER_HELP = (
    "auto (launchd on macOS, systemd where systemctl --user answers, else cron), "
    "systemd, launchd or cron"
)
ENABLE = (
    "Writes a unit that runs {what} with the absolute interpreter, an explicit PATH "
    "(the agent CLIs' directories first), the board's URL or SQLite file, the state "
    "directory (its log is {log}) and, for secrets, a reference to the environment "
    "file (mode 0600), then loads it. systemd: a user service with Restart=on-failure "
    "(a warning says when lingering is off); launchd: a KeepAlive agent; cron (the "
    "supervisor only): a marked block running lb loop run --ping-once every minute and "
    "--continue-once on the tick interval.\n\n"
    "Enabling again changes nothing; a changed definition is rewritten and reloaded. "
    "--print shows what would be written and run, and touches nothing."
)
DISABLE = (
    "Stops and removes exactly what enable wrote (with --scheduler auto: wherever it "
    "is installed), and the environment file when it holds nothing else."
)
STATUS = (
    "For each scheduler that has the unit: installed (and whether it matches what "
    "enable would write now), loaded, running with its pid, and the last exit; for "
    "the supervisor also the board's view of this machine's supervisor."
)


def _common(p: argparse.ArgumentParser, *, enable: bool = False) -> None:
    p.add_argument(
        "--scheduler",
        choices=["auto", "systemd", "launchd", "cron"],
        default="auto",
        help=SCHEDULER_HELP,
    )
    if enable:
        p.add_argument(
            "--print", action="store_true", help="show what would be written; write nothing"
        )
    json_flag(p)


def register(sub: Any) -> None:
    sup = sub.add_parser(
        "supervisor", help="the supervisor as an OS service (systemd, launchd, cron)"
    ).add_subparsers(dest="supervisor_cmd", metavar="ACTION", required=True)
    p = add_verb(
        sup,
        "enable",
        "run the supervisor as a service that restarts on failure",
        ENABLE.format(what="lb start", log="supervisor.log"),
        "lb supervisor enable --print\nlb supervisor enable\nlb supervisor enable --scheduler cron",
    )
    _common(p, enable=True)
    p.set_defaults(func=cmd_enable, unit="supervisor", creates_board=True)
    p = add_verb(
        sup,
        "disable",
        "stop the supervisor's service and remove its unit",
        DISABLE,
        "lb supervisor disable",
    )
    _common(p)
    p.set_defaults(func=cmd_disable, unit="supervisor")
    p = add_verb(
        sup,
        "status",
        "is the supervisor's unit installed, loaded, running; its last exit",
        STATUS,
        "lb supervisor status --json",
    )
    _common(p)
    p.set_defaults(func=cmd_status, unit="supervisor")

    svc = sub.add_parser(
        "service", help="the supervisor and the server as OS services"
    ).add_subparsers(dest="service_cmd", metavar="ACTION", required=True)
    p = add_verb(
        svc,
        "enable",
        "run the supervisor or the server as a service",
        ENABLE.format(
            what="lb start (supervisor) or lb serve (server)", log="supervisor.log or server.log"
        ),
        "lb service enable server --port 8765\nlb service enable supervisor --print",
    )
    p.add_argument("unit", choices=["supervisor", "server"], help="which unit")
    p.add_argument(
        "--host", default="127.0.0.1", help="server: address to bind (default 127.0.0.1)"
    )
    p.add_argument("--port", type=int, default=8765, help="server: port (default 8765)")
    _common(p, enable=True)
    p.set_defaults(func=cmd_enable, creates_board=True)
    p = add_verb(
        svc, "disable", "stop a service and remove its unit", DISABLE, "lb service disable server"
    )
    p.add_argument("unit", choices=["supervisor", "server"], help="which unit")
    _common(p)
    p.set_defaults(func=cmd_disable)
    p = add_verb(
        svc,
        "status",
        "the units' state: installed, loaded, running, last exit",
        STATUS,
        "lb service status\nlb service status server --json",
    )
    p.add_argument(
        "unit", nargs="?", choices=["supervisor", "server"], help="which unit (default: both)"
    )
    _common(p)
    p.set_defaults(func=cmd_status)


def cmd_enable(ctx: Context) -> int:
    from laneboard.errors import bad_input
    from laneboard.service import manager

    a = ctx.args
    port = getattr(a, "port", 8765)
    if not 0 < port < 65536:
        raise bad_input(f"port {port} is out of range", "use 1-65535")
    out = manager.enable(
        a.unit,
        a.scheduler,
        store=None if a.print else ctx.store,
        db=a.db,
        host=getattr(a, "host", "127.0.0.1"),
        port=port,
        preview=a.print,
    )
    ctx.out(out.to_dict(), render_outcome(out))
    return 0


def cmd_disable(ctx: Context) -> int:
    from laneboard.service import manager

    outs = manager.disable(ctx.args.unit, ctx.args.scheduler)
    ctx.out([o.to_dict() for o in outs], "\n".join(render_outcome(o) for o in outs))
    return 0


def cmd_status(ctx: Context) -> int:
    from laneboard.service import manager

    units = [ctx.args.unit] if ctx.args.unit else ["supervisor", "server"]
    store = _store_or_none(ctx)
    rows = [row for u in units for row in manager.status(u, ctx.args.scheduler, store=store)]
    ctx.out(rows, "\n".join(render_status(r) for r in rows))
    return 0


def _store_or_none(ctx: Context) -> Any:
    from laneboard.errors import LaneboardError

    try:
        return ctx.store
    except LaneboardError:
        return None  # status still reports the units when the board is unreachable


def render_outcome(out: Any) -> str:
    lines = []
    if out.action == "print":
        for path, text in out.preview.items():
            lines += [f"# would write {path}", text.rstrip("\n"), ""]
        lines += ["# would run: " + " ".join(c) for c in out.commands]
    else:
        lines.append(f"{out.unit}: {out.action} ({out.scheduler})")
        lines += [f"  wrote or removed {f}" for f in out.files]
        lines += ["  ran " + " ".join(c) for c in out.commands]
    lines += [f"warning: {w}" for w in out.warnings]
    return "\n".join(lines)


def render_status(row: dict[str, Any]) -> str:
    def yes(v: Any) -> str:
        return "-" if v is None else ("yes" if v else "no")

    head = f"{row['unit']} ({row['scheduler']})"
    parts = [
        f"installed {yes(row['installed'])}"
        + ("" if row.get("current") in (None, True) else " (changed: enable again)"),
        f"loaded {yes(row['loaded'])}",
        f"running {yes(row['running'])}" + (f" pid {row['pid']}" if row.get("pid") else ""),
    ]
    last = row.get("last_exit")
    parts.append(
        f"last exit {last['code']}" + (f" at {last['at']}" if last.get("at") else "")
        if last
        else "last exit -"
    )
    lines = [f"{head}: " + ", ".join(parts)]
    if row.get("path"):
        lines.append(f"  {row['path']}")
    if row.get("detail"):
        lines.append(f"  {row['detail']}")
    board = row.get("board")
    if board:
        lines.append(
            f"  board: {board['state']}"
            + (f" (pid {board['pid']})" if board.get("pid") else "")
            + f" — {board['detail']}"
        )
    return "\n".join(lines)
