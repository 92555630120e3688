"""``lb events``: the event log."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from laneboard.cli.common import Context
from laneboard.errors import LaneboardError, bad_input


def register(sub: Any) -> None:
    ev = sub.add_parser("events", help="the event log").add_subparsers(
        dest="events_cmd", metavar="ACTION", required=True
    )
    p = ev.add_parser("tail", help="print recent events (and follow new ones)")
    p.add_argument("-n", type=int, default=20, help="how many recent events (default 20)")
    p.add_argument("--after", type=int, default=None, help="start after this event id")
    p.add_argument("--card", help="only this card")
    p.add_argument("--project", help="only this project")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    p.add_argument("--interval", type=float, default=0.5, help="follow poll interval, seconds")
    p.add_argument("--max-events", type=int, default=0, help="stop after this many (0 = never)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_events_tail)


def _print_event(ctx: Context, e: Any) -> None:
    if ctx.json:
        sys.stdout.write(json.dumps(e.to_dict(), sort_keys=True) + "\n")
    else:
        sys.stdout.write(
            f"{e.id:>6} {e.to_dict()['at']} {e.type:<16} {e.actor_kind}:{e.actor} "
            f"{json.dumps(e.payload, sort_keys=True)}\n"
        )
    sys.stdout.flush()


def cmd_events_tail(ctx: Context) -> int:
    a = ctx.args
    if a.n < 0 or a.interval <= 0:
        raise bad_input("-n and --interval must be positive", "e.g. -n 20 --interval 0.5")
    board = ctx.board
    if a.after is not None:
        events = board.events(a.after, card=a.card, project=a.project, limit=max(a.n, 1000))
    else:
        recent = (
            board.events(0, card=a.card, project=a.project, limit=10**9)
            if (a.card or a.project)
            else board.last_events(a.n)
        )
        events = recent[-a.n :] if a.n else []
    cursor = a.after or 0
    count = 0
    for e in events:
        _print_event(ctx, e)
        count += 1
        if a.max_events and count >= a.max_events:
            return 0
    if events:
        cursor = events[-1].id
    elif a.after is None:
        with ctx.store.read() as tx:
            cursor = tx.max_event_id()
    while a.follow:
        time.sleep(a.interval)
        try:
            new = board.events(cursor, card=a.card, project=a.project, limit=500)
        except LaneboardError:
            raise
        for e in new:
            _print_event(ctx, e)
            cursor = e.id
            count += 1
            if a.max_events and count >= a.max_events:
                return 0
    return 0
