"""``lb status``: the supervisor and pool verdicts, sessions, queue, deferrals, next tick."""

from __future__ import annotations

import importlib
import importlib.util
import json
from typing import Any

from laneboard.config import SupervisorConfig
from laneboard.domain.clock import Clock, iso
from laneboard.store import Store
from laneboard.supervisor import instances, records


def status_report(
    store: Store,
    clock: Clock | None = None,
    config: SupervisorConfig | None = None,
    machine: str | None = None,
) -> dict[str, Any]:
    cfg = config or SupervisorConfig()
    machine = machine or instances.machine_name()
    with store.read() as tx:
        now = clock.now_ms() if clock else tx.now()
        row = instances.latest(tx, machine)
        v = instances.verdict(row, now, cfg.time)
        others = [
            instances.describe(r)
            for r in tx.all(
                "SELECT * FROM supervisors WHERE state IN ('starting', 'running') "
                "ORDER BY started_at"
            )
        ]
        counts = records.queue_counts(tx)
        live_rows = [r.to_dict() for r in records.queue_rows(tx)]
        sess = [s.to_dict() for s in records.sessions(tx, ("open", "running", "idle"))]
        defs = [
            {
                "card_id": d["card_id"],
                "failures": d["failures"],
                "next_at": iso(d["next_at"]),
                "last_error": d["last_error"],
            }
            for d in records.deferrals(tx)
        ]
    info: dict[str, Any] = json.loads(row["info"]) if row else {}
    next_tick = info.get("next_tick_at")
    report: dict[str, Any] = {
        "machine": machine,
        "supervisor": v.to_dict(),
        "pool": {"state": v.state, **(info.get("pool") or {})},
        "instances": others,
        "next_tick_at": iso(int(next_tick)) if next_tick else None,
        "last_tick": info.get("last_tick"),
        "queue": {"counts": counts, "live": live_rows},
        "sessions": sess,
        "deferrals": defs,
        "config": {
            "max_concurrency": cfg.max_concurrency,
            "project_concurrency": cfg.per_project,
            "claim_set": list(cfg.claim_set),
            "claim_unassigned": cfg.claim_unassigned,
        },
    }
    from laneboard.agents.permissions import permission_summary

    report["permissions"] = permission_summary(cfg)
    if importlib.util.find_spec("laneboard.board.schedules") is not None:
        schedules = importlib.import_module("laneboard.board.schedules")
        summary = getattr(schedules, "schedules_summary", None)
        if summary is not None:
            report["schedules"] = summary(store, clock or store.clock)
    return report


def render(report: dict[str, Any]) -> str:
    s = report["supervisor"]
    lines = [
        f"supervisor  {s['state']}  ({s['detail']})"
        + (f"  pid {s['pid']}" if s.get("pid") else ""),
        f"next tick   {report['next_tick_at'] or '-'}",
        "queue       "
        + (", ".join(f"{k} {v}" for k, v in sorted(report["queue"]["counts"].items())) or "empty"),
        f"sessions    {len(report['sessions'])} live",
    ]
    for r in report["queue"]["live"]:
        lines.append(
            f"  row {r['id']} card {r['card_id']} {r['role']} {r['state']} "
            f"attempts {r['attempts']} recoveries {r['recoveries']}"
        )
    if report["deferrals"]:
        lines.append("deferrals")
        for d in report["deferrals"]:
            lines.append(
                f"  card {d['card_id']} failures {d['failures']} next {d['next_at']}: "
                f"{d['last_error']}"
            )
    if "schedules" in report:
        lines.append(f"schedules   {json.dumps(report['schedules'], sort_keys=True)[:300]}")
    return "\n".join(lines)
