"""``lb logs``: read the supervisor's and the server's log files."""

from __future__ import annotations

import json
import sys
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.verb import add_verb, json_flag


def register(sub: Any) -> None:
    p = add_verb(
        sub,
        "logs",
        "read the supervisor's and the server's logs",
        "Each process writes one logfmt file in the state directory, rotated by size "
        "(supervisor.log for lb start and the lb loop passes, server.log for lb serve "
        "run as a service; .1 … .N are the older ones). Lines of both are merged by "
        "time. --card keeps the lines about one card and names its agent sessions' own "
        "output files.",
        "lb logs --lines 50\nlb logs --card WEB-12 --follow",
    )
    p.add_argument("--card", metavar="REF", help="only lines about this card, e.g. WEB-12")
    p.add_argument(
        "--process",
        choices=["supervisor", "server", "all"],
        default="all",
        help="which process's log (default: all)",
    )
    p.add_argument(
        "--lines", type=int, default=200, help="show the last N lines (default 200, 0 = all)"
    )
    p.add_argument(
        "--follow", "-f", action="store_true", help="keep printing lines as they are written"
    )
    p.add_argument("--state-dir", help="the state directory (default: the configured one)")
    json_flag(p)
    p.set_defaults(func=cmd_logs)


def _state_dir(ctx: Context) -> str:
    from laneboard.config import load_supervisor_config

    if ctx.args.state_dir:
        return str(ctx.args.state_dir)
    return load_supervisor_config().state_path()


def _print(line: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(line.to_dict(), sort_keys=True) + "\n")
    else:
        prefix = "" if line.process == "supervisor" else f"[{line.process}] "
        sys.stdout.write(prefix + line.text + "\n")
    sys.stdout.flush()


def cmd_logs(ctx: Context) -> int:
    from laneboard.errors import bad_input
    from laneboard.supervisor import logs_read
    from laneboard.supervisor.logs import PROCESSES

    a = ctx.args
    if a.lines < 0:
        raise bad_input(f"--lines {a.lines} is negative", "give a count, or 0 for every line")
    state = _state_dir(ctx)
    processes = PROCESSES if a.process == "all" else (a.process,)
    # followers first: the initial read stops where they begin, so no line is lost
    tails = logs_read.followers(state, processes) if a.follow else []
    upto = {f.process: f.start for f in tails}
    lines = logs_read.read(state, processes, card=a.card, upto=upto if a.follow else None)
    if a.lines:
        lines = lines[-a.lines :]
    for line in lines:
        _print(line, ctx.json)
    if a.card and not a.follow:
        for path in logs_read.agent_logs(state, a.card):
            if ctx.json:
                sys.stdout.write(json.dumps({"agent_log": path}) + "\n")
            else:
                sys.stdout.write(f"# agent output: {path}\n")
    if not lines and not a.follow and not ctx.json:
        files = ", ".join(f"{state}/{p}.log" for p in processes)
        sys.stderr.write(f"no log lines yet ({files})\n")
    if a.follow:
        import threading

        done = threading.Event()
        try:
            logs_read.follow(
                tails,
                lambda line: _print(line, ctx.json),
                card=a.card,
                stop=done.is_set,
                wait=done.wait,
            )
        except KeyboardInterrupt:
            return 0
    return 0
