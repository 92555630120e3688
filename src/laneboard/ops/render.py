"""Text renderings of operation results: functions of the JSON data only, so local and
remote mode print the same thing. Stdlib only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def table(rows: list[list[str]], headers: list[str]) -> str:
    if not rows:
        return "(none)"
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def cards_table(cards: list[Mapping[str, Any]]) -> str:
    """One line per card; columns are as wide as their longest value."""
    rows = [
        [
            c["ref"],
            c["status"],
            f"p{c['priority']}",
            c["claim"]["holder"] or c["assignee"] or "-",
            c["title"],
        ]
        for c in cards
    ]
    return table(rows, ["CARD", "STATUS", "PRI", "WHO", "TITLE"])


def card_text(d: Mapping[str, Any]) -> str:
    """``lb card get``: the card, its criteria, checks, comments, turns and reports."""
    lines = [
        f"{d['ref']}  {d['title']}",
        f"  status {d['status']}  kind {d['kind']}  priority {d['priority']}  "
        f"round {d['delivery_round']}  acceptance {d['acceptance_mode']}",
        f"  assignee {d['assignee'] or '-'}  holder {d['claim']['holder'] or '-'}  "
        f"epoch {d['claim']['epoch']}  heartbeat {d['claim']['heartbeat_at'] or '-'}",
    ]
    if d.get("labels"):
        lines.append("  labels " + ", ".join(d["labels"]))
    if d.get("run_id") is not None:
        lines.append(f"  run {d['run_id']}")
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
        first = c["body"].splitlines()[0] if c["body"] else ""
        lines.append(
            f"  [{c['kind']}] {c['author']} ({c['author_kind']}) {c['created_at']}: {first}"
        )
    for t in d.get("turns", []):
        cost = f" ${t['cost_usd']:.4f}" if t.get("cost_usd") is not None else ""
        lines.append(
            f"  turn r{t['round']} {t['agent_kind']} {t['outcome']}: "
            f"{t['input_tokens']} in / {t['output_tokens']} out tokens{cost}, "
            f"{(t['duration_ms'] or 0) / 1000:.1f}s"
        )
    for r in d.get("reports", []):
        lines.append(f"  report r{r['round']} by {r['author']}: {len(r['evidence'])} evidence")
    return "\n".join(lines)


def event_line(e: Mapping[str, Any]) -> str:
    return (
        f"{e['id']:>6} {e['at']} {e['type']:<16} {e['actor_kind']}:{e['actor']} "
        f"{json.dumps(e['payload'], sort_keys=True)}"
    )


def comment_line(c: Mapping[str, Any]) -> str:
    first = c["body"].splitlines()[0] if c["body"] else ""
    return (
        f"{c['id']:>5} [{c['kind']}] {c['author']} ({c['author_kind']}) {c['created_at']}: {first}"
    )


def pairs(d: Mapping[str, Any]) -> str:
    return "\n".join(f"{k} = {json.dumps(v)}" for k, v in sorted(d.items()))
