"""``lb status``: the supervisor and pool verdicts, sessions, queue, deferrals, next tick."""

from __future__ import annotations

import importlib
import importlib.util
import json
from typing import Any

from laneboard.config import SupervisorConfig
from laneboard.domain.clock import Clock, iso
from laneboard.store import Store
from laneboard.supervisor import cluster, instances, leases, records
from laneboard.supervisor.reports_text import render_status as render  # noqa: F401


def run_summary(tx: Any) -> dict[str, Any]:
    """The runs the supervisor drives, and those marked degraded with their reasons."""
    from laneboard.domain.runs import TICKED

    rows = tx.run_rows(statuses=[s.value for s in TICKED], limit=1000)
    degraded = [
        {"run": int(r["id"]), "reason": r["last_error"]} for r in rows if r["status"] == "degraded"
    ]
    return {"ticked": len(rows), "degraded": degraded}


STUCK = frozenset({"wedged", "unresponsive"})
# a project's directory missing on a machine: no health reason while another machine's
# supervisor runs (only a machine with the checkout admits a path project's cards)
HOSTED_ELSEWHERE = "PROJECT_DIR_MISSING"


def _projects_failing(tx: Any) -> list[dict[str, Any]]:
    """The projects whose cards a machine cannot prepare now (``admission_alerts``)."""
    from laneboard.supervisor.alerts import PROJECT_ADMISSION, alerts

    return [
        {
            "project": a.payload.get("project"),
            "machine": a.payload.get("machine"),
            "since": iso(a.first_at),
            "code": a.payload.get("code"),
            "detail": a.payload.get("detail"),
            "fix": a.payload.get("fix"),
        }
        for a in alerts(tx, prefix=PROJECT_ADMISSION + "|")
    ]


def health_of(report: dict[str, Any]) -> dict[str, Any]:
    """ok, or degraded with the reasons: a wedged or unresponsive supervisor, a pass that
    failed in the last tick, a project whose cards a machine cannot prepare, a run marked
    degraded or failing its ticks."""
    reasons: list[str] = []
    sup = report.get("supervisor") or {}
    if sup.get("state") in STUCK:
        reasons.append(f"supervisor {sup.get('state')}: {sup.get('detail')}")
    last = report.get("last_tick") or {}
    if sup.get("state") in ("running", "starting"):
        for name, out in sorted((last.get("passes") or {}).items()):
            if isinstance(out, dict) and out.get("error"):
                reasons.append(f"the {name} pass failed: {out['error']}")
    elsewhere = {str(i.get("machine")) for i in report.get("instances") or []}
    for item in report.get("projects_failing") or []:
        if item.get("code") == HOSTED_ELSEWHERE and elsewhere - {str(item.get("machine"))}:
            continue  # a cluster: the project's checkout may live on one of the others
        reasons.append(f"{item['detail']} (since {item['since']})")
    runs = report.get("runs") or {}
    seen: set[int] = set()
    for item in runs.get("failing", []):
        seen.add(int(item["run"]))
        reasons.append(f"run {item['run']}: {item['failures']} failed ticks: {item['reason']}")
    for item in runs.get("degraded", []):
        if int(item["run"]) not in seen:
            reasons.append(f"run {item['run']} is degraded: {item['reason']}")
    return {"state": "degraded" if reasons else "ok", "reasons": reasons}


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
        others = [instances.describe(r) for r in tx.live_supervisors_everywhere()]
        held = leases.describe(tx, now if clock else tx.lease_now(), machine)
        passes = cluster.summary(tx)
        counts = records.queue_counts(tx)
        live_rows = [r.to_dict() for r in records.queue_rows(tx)]
        deferred = records.deferrals(tx)
        refs = tx.card_refs([r["card_id"] for r in live_rows] + [d["card_id"] for d in deferred])
        for r in live_rows:
            r["card"] = refs.get(r["card_id"])
        # a live session has a process; an idle record without one can only be resumed
        sess = [s.to_dict() for s in records.live_sessions(tx) if s.pid]
        defs = [
            {
                "card_id": d["card_id"],
                "card": refs.get(d["card_id"]),
                "machine": d["machine"],
                "failures": d["failures"],
                "next_at": iso(d["next_at"]),
                "last_error": d["last_error"],
            }
            for d in deferred
        ]
        runs = run_summary(tx)
        failing = _projects_failing(tx)
    info: dict[str, Any] = json.loads(row["info"]) if row else {}
    next_tick = info.get("next_tick_at")
    report: dict[str, Any] = {
        "machine": machine,
        "supervisor": v.to_dict(),
        "pool": {"state": v.state, **(info.get("pool") or {})},
        "instances": others,
        "leases": held,
        "cluster": passes,
        "next_tick_at": iso(int(next_tick)) if next_tick else None,
        "last_tick": info.get("last_tick"),
        "queue": {"counts": counts, "live": live_rows},
        "sessions": sess,
        "deferrals": defs,
        "projects_failing": failing,
        "config": {
            "max_concurrency": cfg.max_concurrency,
            "project_concurrency": cfg.per_project,
            "claim_set": list(cfg.claim_set),
            "claim_unassigned": cfg.claim_unassigned,
        },
    }
    live = v.state in ("running", "starting", "wedged", "unresponsive")
    runs["failing"] = (info.get("runs") or {}).get("failing", []) if live else []
    report["runs"] = runs
    report["health"] = health_of(report)
    from laneboard.agents.permissions import permission_summary

    report["permissions"] = permission_summary(cfg)
    from laneboard.supervisor.preflight import boundary_summary

    forced = info.get("force_agent") if live else None
    if forced and not cfg.force_agent:  # the running supervisor was started with --agent
        from dataclasses import replace

        cfg = replace(cfg, force_agent=str(forced))
    report["boundary"] = boundary_summary(cfg)
    if importlib.util.find_spec("laneboard.board.schedules") is not None:
        schedules = importlib.import_module("laneboard.board.schedules")
        summary = getattr(schedules, "schedules_summary", None)
        if summary is not None:
            report["schedules"] = summary(store, clock or store.clock)
    return report
