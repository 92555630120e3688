"""``lb patrol``: one SLA patrol pass (``lb doctor`` is an operation in ``laneboard.ops``)."""

from __future__ import annotations

from typing import Any

from laneboard.cli.common import Context
from laneboard.cli.generated import command


def register(sub: Any) -> None:
    p = command(
        sub,
        "patrol",
        "run one SLA patrol pass (notify-only)",
        "Check every SLA row (stuck cards, stale heartbeats, blocked acceptances, a wedged "
        "pool, ...) and send the alerts that are due, each once per its repeat window. "
        "It changes no card.",
        ("lb patrol --dry-run", "lb patrol --notify 'notify-send laneboard'"),
    )
    p.add_argument("--notify", metavar="CMD", help="send each alert as JSON on stdin to CMD")
    p.add_argument("--dry-run", action="store_true", help="print the alerts due, send nothing")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_patrol)


def cmd_patrol(ctx: Context) -> int:
    from laneboard.config import load_supervisor_config
    from laneboard.supervisor.instances import machine_name
    from laneboard.supervisor.patrol import load_settings, run_patrol

    cfg = load_supervisor_config()
    settings = load_settings(notify_command=ctx.args.notify)
    res = run_patrol(
        ctx.store,
        settings,
        machine_name(),
        dry_run=ctx.args.dry_run,
        subprocess_bound=cfg.time.subprocess_bound,
    )
    d = res.to_dict()
    alerts = d["plan"] if res.dry_run else d["sent"]
    text = [
        f"patrol: {res.planned} due, {len(res.sent)} sent, {len(res.suppressed)} suppressed, "
        f"{len(res.dropped)} dropped by the re-check" + (" (dry run)" if res.dry_run else "")
    ]
    text += [f"  {a['row']} {a['tier']} {a['card'] or a['target']}" for a in alerts]
    text += [f"  {e}" for e in res.notify_errors]
    ctx.out(d, "\n".join(text))
    return 0
