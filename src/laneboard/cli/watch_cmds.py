"""``lb watch``: the board live in the terminal (or one card: its claim, comments and
events), redrawn as it changes. Drawn with rich, imported by this command only.

It reads through the same operations as every other command, so it watches the local
database or, with ``LANEBOARD_URL`` set, a remote board."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.verb import add_verb
from laneboard.errors import LaneboardError

COLUMNS = ("backlog", "todo", "in_progress", "awaiting", "blocked", "in_review", "done")
STYLE = {
    "backlog": "grey50",
    "todo": "blue",
    "in_progress": "yellow",
    "awaiting": "red",
    "blocked": "bright_red",
    "in_review": "magenta",
    "done": "green",
}
DONE_SHOWN = 8  # the most recent done cards in their column
EVENTS_SHOWN = 12
TRANSCRIPT_SHOWN = 20
ENTRY_STYLE = {"message": "default", "tool_call": "cyan", "tool_result": "dim",
               "check": "magenta", "error": "red", "lb": "blue", "file_edit": "yellow"}  # fmt: skip


def register(sub: Any) -> None:
    p = add_verb(
        sub,
        "watch",
        "watch the board (or one card) live in the terminal",
        "Draws the board's columns, one per status, and redraws them as cards move; with "
        "a card reference, that card: its status and claim, acceptance, the latest "
        "comments (questions and answers stand out), its latest events and the agent's "
        "transcript as it grows (messages, tool calls, checks). Works on the "
        "local board or, with LANEBOARD_URL, a remote one. Ctrl-C stops. --once draws a "
        "single frame and exits (for scripts).",
        "lb watch\nlb watch --project WEB --run 3\nlb watch WEB-12",
    )
    p.add_argument("ref", nargs="?", metavar="REF", help="watch this card, e.g. WEB-12")
    p.add_argument("--project", help="only this project's cards")
    p.add_argument("--run", type=int, help="only this run's cards")
    p.add_argument("--label", help="only cards with this label")
    p.add_argument(
        "--interval", type=float, default=1.0, help="seconds between redraws (default 1)"
    )
    p.add_argument("--once", action="store_true", help="draw one frame and exit")
    p.set_defaults(func=cmd_watch)


def _need_rich() -> None:
    try:
        import rich.console  # noqa: F401
    except ImportError:
        raise LaneboardError(
            "CONFIG_INVALID",
            "lb watch needs the rich library, which is not installed",
            "install it with: pip install 'laneboard[watch]'",
        ) from None


def cmd_watch(ctx: Context) -> int:
    a = ctx.args
    if not 0.1 <= a.interval <= 3600:
        raise LaneboardError("BAD_INPUT", f"--interval {a.interval} is out of range",
                             "use 0.1 to 3600 seconds")  # fmt: skip
    _need_rich()
    from rich.console import Console
    from rich.live import Live

    from laneboard.cli.main import make_runner

    runner = make_runner(a)

    follow = Transcript(runner, a.ref) if a.ref else None

    def frame() -> Any:
        return card_frame(runner, a.ref, follow) if follow else board_frame(runner, a)

    console = Console()
    if a.once or not console.is_terminal:
        console.print(frame())
        return 0
    with Live(frame(), console=console, screen=False, auto_refresh=False) as live:
        while True:
            time.sleep(a.interval)
            live.update(frame(), refresh=True)


def _call(runner: Any, name: str, params: dict[str, Any]) -> Any:
    from laneboard.ops.table import by_name

    data, _notes = runner.call(by_name()[name], params)
    return data


def board_frame(runner: Any, a: Any) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    params: dict[str, Any] = {"limit": 5000}
    for key in ("project", "run", "label"):
        if getattr(a, key, None) is not None:
            params[key] = getattr(a, key)
    cards = _call(runner, "card.list", params)
    by: dict[str, list[dict[str, Any]]] = {s: [] for s in COLUMNS}
    for c in cards:
        if c["status"] in by:
            by[c["status"]].append(c)
    by["done"] = by["done"][-DONE_SHOWN:]
    table = Table(expand=True, show_lines=False, pad_edge=False)
    for s in COLUMNS:
        count = sum(1 for c in cards if c["status"] == s)
        table.add_column(f"{s} {count}", style=STYLE[s], overflow="fold", ratio=1)
    rows = max((len(v) for v in by.values()), default=0)
    for i in range(rows):
        table.add_row(*[_cell(by[s][i]) if i < len(by[s]) else "" for s in COLUMNS])
    stamp = Text(time.strftime("%H:%M:%S") + f" · {len(cards)} cards · Ctrl-C stops", style="dim")
    return Group(table, stamp)


def _cell(c: dict[str, Any]) -> Any:
    from rich.text import Text

    t = Text()
    t.append(c["ref"], style="bold")
    t.append(f" p{c['priority']} ", style="dim")
    t.append(c["title"][:60], style="default")
    who = c["claim"]["holder"] or c.get("assignee")
    if who:
        t.append(f"\n  {'held by' if c['claim']['holder'] else 'for'} {who}", style="dim")
    return t


class Transcript:
    """A card's latest transcript entries, read incrementally from the last cursor."""

    def __init__(self, runner: Any, ref: str) -> None:
        self.runner, self.ref = runner, ref
        self.cursor = 0
        self.lines: deque[tuple[str, str]] = deque(maxlen=TRANSCRIPT_SHOWN)
        self.running: int | None = None

    def poll(self) -> None:
        from laneboard.ops.turns import entry_line

        while True:
            params = {"ref": self.ref, "after": self.cursor, "limit": 500}
            d = _call(self.runner, "card.transcript", params)
            for e in d["entries"]:
                self.lines.append((e["type"], entry_line(e)[:300]))
            self.running = d.get("running")
            self.cursor = d["cursor"]
            if len(d["entries"]) < 500:
                return


def card_frame(runner: Any, ref: str, follow: Transcript | None = None) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    d = _call(runner, "card.get", {"ref": ref})
    head = Text()
    head.append(f"{d['ref']} ", style="bold")
    head.append(d["title"])
    head.append(f"\n{d['status']}", style=STYLE.get(d["status"], "default") + " bold")
    head.append(f" · round {d['delivery_round']} · acceptance {d['acceptance_mode']}")
    claim = d.get("claim") or {}
    if claim.get("holder"):
        head.append(f" · held by {claim['holder']} (heartbeat {claim.get('heartbeat_at') or '-'})")
    parts: list[Any] = [Panel(head, expand=True)]
    if d.get("acceptance"):
        crit = Text("\n".join(f"{c['id']} {c['text']}" for c in d["acceptance"]))
        parts.append(Panel(crit, title="acceptance", expand=True))
    comments = Text()
    for c in (d.get("comments") or [])[-8:]:
        style = {"question": "bold red", "answer": "bold green"}.get(c["kind"], "dim")
        comments.append(f"{c['kind']} {c['author']}: ", style=style)
        comments.append(c["body"][:400] + "\n")
    comments.rstrip()
    parts.append(Panel(comments or Text("no comments", style="dim"), title="comments"))
    events = _call(runner, "events.tail", {"card": ref, "last": EVENTS_SHOWN})
    lines = Text()
    for e in events[-EVENTS_SHOWN:]:
        lines.append(f"{e['at']} ", style="dim")
        lines.append(f"{e['type']} ", style="bold")
        lines.append(f"{e['actor_kind']}:{e['actor']}\n")
    lines.rstrip()
    parts.append(Panel(lines or Text("no events", style="dim"), title="events"))
    if follow is not None:
        follow.poll()
        said = Text()
        for kind, line in follow.lines:
            said.append(line + "\n", style=ENTRY_STYLE.get(kind, "default"))
        said.rstrip()
        title = f"transcript (turn {follow.running} running)" if follow.running else "transcript"
        parts.append(Panel(said or Text("no transcript yet", style="dim"), title=title))
    parts.append(Text(time.strftime("%H:%M:%S") + " · Ctrl-C stops", style="dim"))
    return Group(*parts)
