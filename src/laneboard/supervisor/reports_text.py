"""Text renderings of the supervisor's reports (``lb status``, ``lb doctor``): functions of
the report documents only, so a remote ``lb`` prints them without the store."""

from __future__ import annotations

from typing import Any


def boundary_lines(b: dict[str, Any] | None) -> list[str]:
    """The sandbox and the agent kind of each role (the one precedence)."""
    if not b:
        return []
    lines = [f"sandbox     {b['sandbox']['line']}"]
    if b.get("checks"):
        lines.append(f"checks      {b['checks']['line']}")
    if b.get("force_agent"):
        lines.append(f"agents      every role forced onto {b['force_agent']} (--agent)")
    for c in b["agents"]:
        kind = c["kind"] or "NONE — this machine claims none of its cards"
        lines.append(f"  role {c['role']}: {kind} ({c['detail']})")
    lines.append(f"unassigned  claimed for {b.get('unassigned_role') or 'no role'}")
    return lines


def lease_lines(held: list[dict[str, Any]]) -> list[str]:
    """One line per held lease: its holder and whether that holder is dead."""
    out = []
    for x in held:
        state = (
            f"holder DEAD ({x['holder_dead']}): blocks every pass until the next tick breaks it"
            if x["blocking"]
            else "expired"
            if x["expired"]
            else f"until {x['expires_at']}"
        )
        out.append(f"lease       {x['name']} held by {x['holder']} for {x['held_s']}s, {state}")
    return out


def cluster_lines(report: dict[str, Any]) -> list[str]:
    """The supervisors of every machine, and which one runs each once-per-cluster pass."""
    out = []
    for i in report.get("instances") or []:
        out.append(
            f"  instance {i['id']} on {i['machine']}: {i['state']}, beat {i['heartbeat_at']}"
            + _skew((i.get("info") or {}).get("clock_offset_ms"))
        )
    cl = report.get("cluster") or {}
    running = {x["pass"]: x for x in cl.get("leases") or []}
    for r in cl.get("last_runs") or []:
        now = running.pop(r["pass"], None)
        where = (
            f"running on {now['holder']}" if now else f"last on {r['machine']} at {r['started_at']}"
        )
        out.append(f"  pass {r['pass']}: {where}")
    for name, now in sorted(running.items()):
        out.append(f"  pass {name}: running on {now['holder']}")
    return ["cluster", *out] if out else []


SKEW_SAID_MS = 5_000  # a machine's clock this far from the database's is named


def _skew(offset: Any) -> str:
    """A machine's clock, when it is far from the database server's."""
    if not isinstance(offset, int) or abs(offset) < SKEW_SAID_MS:
        return ""
    way = "ahead of" if offset > 0 else "behind"
    return f", clock {abs(offset) / 1000:.0f}s {way} the database's (fix its time sync)"


def render_status(report: dict[str, Any]) -> str:
    s = report["supervisor"]
    lines = [
        f"supervisor  {s['state']}  ({s['detail']})"
        + (f"  pid {s['pid']}" if s.get("pid") else ""),
        f"next tick   {report['next_tick_at'] or '-'}",
        "queue       "
        + (", ".join(f"{k} {v}" for k, v in sorted(report["queue"]["counts"].items())) or "empty"),
        f"sessions    {len(report['sessions'])} live",
        *boundary_lines(report.get("boundary")),
    ]
    for r in report["queue"]["live"]:
        lines.append(
            f"  row {r['id']} card {r.get('card') or r['card_id']} {r['role']} {r['state']} "
            f"attempts {r['attempts']} recoveries {r['recoveries']}"
        )
    lines += lease_lines(report.get("leases") or [])
    if report["deferrals"]:
        lines.append("deferrals")
        for d in report["deferrals"]:
            lines.append(
                f"  card {d.get('card') or d['card_id']} on {d.get('machine') or '?'} "
                f"failures {d['failures']} next {d['next_at']}: "
                f"{d['last_error']}"
            )
    lines.extend(cluster_lines(report))
    health = report.get("health")
    if health is not None:
        lines.append(f"health      {health['state']}")
        lines += [f"  {reason}" for reason in health["reasons"]]
    runs = report.get("runs")
    if runs is not None:
        lines.append(f"runs        {runs['ticked']} driven, {len(runs['degraded'])} degraded")
    if "schedules" in report:
        lines += schedule_lines(report["schedules"])
    return "\n".join(lines)


SHOWN = 10  # schedule problems listed per kind; the rest are counted


def schedule_lines(s: dict[str, Any]) -> list[str]:
    """The schedules' summary (``schedules_summary``): counts and the next fire, then a
    line per schedule that needs attention."""
    if not s["total"]:
        return ["schedules   none"]
    nxt = s.get("next")
    head = f"schedules   {s['total']} ({s['enabled']} enabled)" + (
        f", next {nxt['name']} at {nxt['at']}" if nxt else ", none due"
    )
    out = [head]
    kinds: list[tuple[str, list[str]]] = [
        ("overdue", [f"{x['name']} ({x['expression']}): missed {x['missed']}"
                     for x in s["overdue"]]),
        ("failed", [f"{x['name']}: {x['reason']}" for x in s["failed"]]),
        ("broken", [f"{x['name']}: {x['reason']}" for x in s["broken"]]),
    ]  # fmt: skip
    for kind, items in kinds:
        out += [f"  {kind} {item}" for item in items[:SHOWN]]
        if len(items) > SHOWN:
            out.append(f"  … and {len(items) - SHOWN} more {kind}: lb schedule list")
    if s["never_run"]:
        names = s["never_run"]
        out.append(
            "  never run: " + ", ".join(names[:SHOWN])
            + (f" … and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
        )  # fmt: skip
    return out


def render_doctor(r: dict[str, Any]) -> str:
    lines = [
        f"attention   {'YES' if r['attention'] else 'no'}"
        + (f" ({'; '.join(r['reasons'])})" if r["reasons"] else ""),
        f"supervisor  {r['supervisor']['state']} ({r['supervisor']['detail']})",
        f"patrol      last ok {r['patrol']['last_ok_at'] or 'never'}"
        + (" STALE" if r["patrol"]["stale"] else ""),
        "queue       "
        + (", ".join(f"{k} {v}" for k, v in sorted(r["queue"]["counts"].items())) or "empty"),
        f"sessions    {len(r['sessions'])} live",
        *lease_lines(r.get("leases") or []),
        f"sandbox     {(r.get('boundary') or {}).get('sandbox', {}).get('line', '-')}",
        f"checks      {(r.get('boundary') or {}).get('checks', {}).get('line', '-')}",
        *(
            []
            if r.get("agents_judged", True)
            else [
                "agents      not judged: no supervisor runs on this machine (the cluster's "
                f"run on {', '.join(r.get('supervisors_elsewhere') or [])})"
            ]
        ),
        f"board       {r['board']['cards_read']} cards read"
        + (" TRUNCATED" if r["board"]["truncated"] else ""),
    ]

    def section(title: str, items: list[dict[str, Any]]) -> None:
        if items:
            lines.append(f"{title} ({len(items)})")
            for item in items:
                lines.append("  " + " ".join(f"{k}={v}" for k, v in item.items() if v is not None))

    section("stuck", r["stuck"])
    section("in_review waiting on a human", r["in_review_waiting_human"])
    section("blocked acceptance", r["blocked_acceptance"])
    for kind, items in r["looping"].items():
        if kind != "total":
            section(f"looping: {kind}", items)
    section("awaiting", r["awaiting"])
    section("question lane", r["question_lane"])
    section("handoff unconsumed", r.get("handoff_unconsumed") or [])
    section("unowned", r["unowned"])
    section("orphaned", r["orphaned"])
    if r["lanes"]["checked"]:
        section("stale lanes", r["lanes"]["stale"])
        section("unlanded", r["lanes"]["unlanded"])
    else:
        lines.append(r["lanes"]["note"])
    if r["schedules"].get("overdue"):
        section("overdue schedules", r["schedules"]["overdue"])
    return "\n".join(lines)
