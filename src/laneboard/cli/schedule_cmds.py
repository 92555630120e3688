"""``lb scheduler run``: schedule passes on this machine (the schedules themselves are
operations in ``laneboard.ops.schedules``)."""

from __future__ import annotations

import argparse
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.generated import command

POLL_MS = 30_000  # the seed's scheduler poll interval


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document")


def register(sub: Any) -> None:
    run = sub.add_parser(
        "scheduler",
        help="run schedule passes",
        description="The schedule pass on this machine, outside lb start.",
    ).add_subparsers(dest="scheduler_cmd", metavar="ACTION", required=True)
    p = command(
        run,
        "run",
        "run one pass (--once) or a pass every --poll-ms (default 30000)",
        "Create the cards of the schedules due this minute, after reconciling the last "
        "pass. Only one pass runs at a time on a board: a pass that finds the tick lock "
        "held creates nothing and exits 3.",
        ("lb scheduler run --once", "lb scheduler run --poll-ms 30000"),
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--once", action="store_true", help="run one pass; exit 3 if locked")
    g.add_argument(
        "--poll-ms",
        type=int,
        default=POLL_MS,
        help=f"run a pass every N milliseconds (default {POLL_MS})",
    )
    p.add_argument("--max-passes", type=int, default=0, help="with --poll-ms: stop after N")
    _json_flag(p)
    p.set_defaults(func=cmd_run)


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
        raise bad_input(
            f"--poll-ms {a.poll_ms} is too short", f"use at least 1000 (default {POLL_MS})"
        )
    passes = 0
    while True:
        res = run_schedule_pass(ctx.store, ctx.clock, holder)
        ctx.out(res.to_dict(), _render(res.to_dict()))
        sys.stdout.flush()
        passes += 1
        if a.max_passes and passes >= a.max_passes:
            return 0
        time.sleep(a.poll_ms / 1000)
