"""``lb doctor``: one read-only inspection of the supervisor, the queue and the board.

It claims, dispatches and writes nothing. ``attention`` is true when something needs a
person: a wedged or unresponsive pool, a stale patrol, stuck cards, blocked acceptances,
looping cards, orphaned rows, stale or unlanded lanes, overdue schedules, or accepted
handoffs the director could not decide (``handoff_unconsumed``, looking back 7 days).
Facts that are normal waiting (``in_review`` cards waiting on a human) are listed but do
not set it.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

from laneboard.agents.procs import pid_alive
from laneboard.agents.sandbox import SLIRP_HINT
from laneboard.config import SupervisorConfig
from laneboard.domain.clock import MINUTE_MS, Clock, iso
from laneboard.domain.model import Card, CardKind
from laneboard.store import Store
from laneboard.supervisor import instances
from laneboard.supervisor.reports_text import render_doctor as render  # noqa: F401
from laneboard.supervisor.triage import unconsumed

HOUR_MS = 60 * MINUTE_MS
DAY = 24 * HOUR_MS
REWORK_ROUNDS = 4
REVIEW_REOPENS = 2
HANDOFFS = 5
EXHAUSTED_HANDOFFS = 2
FAILED_TURNS = 3
DEFERRALS = 3
ROUTE_WINDOW_MS = 30 * MINUTE_MS
BOARD_LIMIT = 5000


def _age_min(now: int, at: int | None) -> float | None:
    return None if at is None else round((now - at) / MINUTE_MS, 1)


def _card_line(c: Card, now: int, **extra: Any) -> dict[str, Any]:
    return {
        "card": c.ref,
        "status": c.status.value,
        "title": c.title[:120],
        "age_min": _age_min(now, c.status_since),
        **extra,
    }


def _accepted_unlanded(card: Card | None, round_: int) -> bool:
    """An accepted (done) card whose lane for that round is still active, not landed."""
    return (
        card is not None
        and card.status.value == "done"
        and bool(card.meta.get("accepted_by"))
        and round_ == card.delivery_round
    )


def _has_lanes(store: Store) -> bool:
    with store.read() as tx:
        return tx.has_migration(30)


def doctor_report(
    store: Store,
    clock: Clock | None = None,
    config: SupervisorConfig | None = None,
    machine: str | None = None,
) -> dict[str, Any]:
    from laneboard.supervisor.status import status_report

    cfg = config or SupervisorConfig()
    t = cfg.time
    status = status_report(store, clock, cfg, machine)
    with store.read() as tx:
        now = clock.now_ms() if clock else tx.now()
        cards = tx.list_cards(
            statuses=["todo", "in_progress", "awaiting", "blocked", "in_review", "done"],
            limit=BOARD_LIMIT,
        )
        here = machine or instances.machine_name()
        marks = [  # only this machine's patrol vouches for this machine's supervisor
            {"name": r["name"], "at": int(r["at"]), "info": json.loads(r["info"])}
            for r in [tx.patrol_mark(f"patrol:{here}")]
            if r is not None
        ]
        sup_row = instances.current(tx, here)
        sup_started = int(sup_row["started_at"]) if sup_row is not None else None
        handoffs = tx.handoffs_since(now - DAY)
        director_rows = tx.failed_director_rows(now - 7 * DAY)
        failed_turns = tx.failed_turn_counts(now - 7 * DAY)
        deferrals = tx.deferrals_failing(DEFERRALS)
        processing = tx.processing_handoffs_with_pid()
        handoff_unconsumed = unconsumed(tx, now)
    truncated = len(cards) >= BOARD_LIMIT
    by_id = {c.id: c for c in cards}
    terminal = {c.id for c in cards if c.terminal}

    def ref(card_id: int) -> str:
        c = by_id.get(card_id)
        return c.ref if c else str(card_id)

    stuck = []
    waiting_human = []
    blocked_acceptance = []
    for c in cards:
        if c.status.value == "in_progress" and c.kind is not CardKind.EPIC:
            hb = c.heartbeat_at
            if hb is None or hb > now + MINUTE_MS:
                stuck.append(_card_line(c, now, reason="heartbeat unreadable", holder=c.holder))
            elif now - hb > t.stale_same_holder * 1000:
                stuck.append(
                    _card_line(
                        c,
                        now,
                        reason="heartbeat stale",
                        holder=c.holder,
                        heartbeat_age_min=_age_min(now, hb),
                    )
                )
        if c.status.value == "in_review":
            if c.acceptance_mode.value == "human":
                waiting_human.append(_card_line(c, now, round=c.delivery_round))
            acc = c.meta.get("accepted_by")
            acc_round = c.meta.get("accepted_round", c.delivery_round)
            if acc and str(acc_round) == str(c.delivery_round):
                blocked_acceptance.append(
                    _card_line(c, now, accepted_by=acc, round=c.delivery_round)
                )

    looping: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in cards:
        if c.terminal:
            continue
        base = int(c.meta.get("hold_round") or 0) if c.meta.get("hold_cycle") == "rework" else 0
        if c.delivery_round - base >= REWORK_ROUNDS:
            looping["rework_rounds"].append(_card_line(c, now, round=c.delivery_round))
        retry = int(c.meta.get("review_retry") or 0)
        own_round = int(c.meta.get("review_round") or 0)
        if c.meta.get("review_of") and (retry >= REVIEW_REOPENS or own_round >= 3):
            looping["review_reopens"].append(
                _card_line(c, now, review_retry=retry, review_of=c.meta.get("review_of"))
            )
        if (
            c.status.value == "blocked"
            and c.meta.get("hold_cycle")
            and int(c.meta.get("hold_at") or 0) >= c.status_since  # this block is the hold
        ):
            looping["held"].append(
                _card_line(
                    c,
                    now,
                    cycle=c.meta.get("hold_cycle"),
                    bound=c.meta.get("hold_bound"),
                    reason=c.meta.get("hold_reason"),
                    held_round=c.meta.get("hold_round"),
                    held_age_min=_age_min(now, c.meta.get("hold_at")),
                    fix=c.meta.get("hold_fix") or None,
                )
            )
    per_card: dict[int, list[str]] = defaultdict(list)
    for h in handoffs:
        per_card[int(h["card_id"])].append(str(h["state"]))
    for cid, states in per_card.items():
        if cid in terminal:
            continue
        exhausted = states.count("failed")
        if len(states) >= HANDOFFS or exhausted >= EXHAUSTED_HANDOFFS:
            looping["dispatch_retries"].append(
                {"card": ref(cid), "handoffs": len(states), "failed": exhausted}
            )
    for r in failed_turns:
        cid = int(r["card_id"])
        if cid not in terminal and int(r["n"]) >= FAILED_TURNS:
            looping["failures"].append({"card": ref(cid), "failed_turns": int(r["n"])})
    for d in deferrals:
        cid = int(d["card_id"])
        if cid not in terminal:
            looping["deferrals"].append(
                {
                    "card": ref(cid),
                    "machine": d["machine"],
                    "failures": int(d["failures"]),
                    "last_error": d["last_error"],
                }
            )
    looping_total = len({item["card"] for items in looping.values() for item in items})

    awaiting = [
        _card_line(c, now, reason=(c.meta.get("awaiting") or {}).get("reason"))
        for c in cards
        if c.status.value == "awaiting"
    ]
    question_lane = [
        {
            "card": ref(int(r["card_id"])),
            "kind": r["kind"],
            "attempts": int(r["attempts"]),
            "last_error": r["last_error"],
            "lane": r["target_dir"],
        }
        for r in director_rows
        if int(r["card_id"]) not in terminal
    ]
    unowned = [
        _card_line(c, now)
        for c in cards
        if c.status.value == "todo"
        and c.assignee is None
        and c.kind is not CardKind.EPIC
        and now - c.status_since > ROUTE_WINDOW_MS
    ]
    orphaned = [
        {
            "queue": int(r["id"]),
            "card": ref(int(r["card_id"])),
            "pid": int(r["pid"]),
            "running_min": _age_min(now, r["started_at"]),
        }
        for r in processing
        if r["started_at"] is not None
        and now - int(r["started_at"]) > 2 * t.turn_timeout * 1000
        and pid_alive(int(r["pid"]))
    ]

    last_patrol = marks[0] if marks else None
    patrol_stale = False
    sup_state = status["supervisor"]["state"]
    if sup_state in ("running", "starting"):
        # three tick intervals from the last patrol, or from the start when none ran yet
        since = last_patrol["at"] if last_patrol else sup_started
        patrol_stale = since is None or now - since > 3 * t.tick_interval * 1000
    patrol = {
        "last_ok_at": iso(last_patrol["at"]) if last_patrol else None,
        "age_min": _age_min(now, last_patrol["at"]) if last_patrol else None,
        "marker": last_patrol["name"] if last_patrol else None,
        "stale": patrol_stale,
    }

    lanes: dict[str, Any]
    if _has_lanes(store):
        with store.read() as tx:
            lane_rows = tx.lane_rows(("active",))
        stale_lanes = [
            {"card": ref(int(r["card_id"])), "round": int(r["round"]), "path": r["path"]}
            for r in lane_rows
            if int(r["card_id"]) not in terminal and not os.path.isdir(str(r["path"]))
        ]
        unlanded = [
            {"card": ref(int(r["card_id"])), "round": int(r["round"]), "branch": r["branch"]}
            for r in lane_rows
            if _accepted_unlanded(by_id.get(int(r["card_id"])), int(r["round"]))
        ]
        lanes = {"checked": True, "stale": stale_lanes, "unlanded": unlanded}
    else:
        lanes = {"checked": False, "note": "no lanes table on this board; lanes not checked"}

    schedules = status.get("schedules") or {}
    overdue_schedules = list(schedules.get("overdue") or [])
    reasons = []
    if sup_state in ("wedged", "unresponsive"):
        reasons.append(f"supervisor {sup_state}")
    if patrol_stale:
        reasons.append("patrol has not completed recently")
    # the agent kinds this machine lacks matter where it runs agents, or where nothing
    # does yet (a setup checked before its first start); not on a machine that only
    # looks at a board other machines' supervisors run
    connections = connection_budget(store, status.get("instances") or [])
    if connections is not None and connections["need"] > connections["allowed"]:
        reasons.append(
            f"database connections: the running supervisors may open {connections['need']}, "
            f"the database allows {connections['allowed']} (lower LANEBOARD_DB_CONNECTIONS "
            "or raise the server's max_connections: docs/cluster.md)"
        )
    elsewhere = sorted({i["machine"] for i in status.get("instances") or []} - {here})
    judged = sup_state not in ("absent", "stopped") or not elsewhere
    if judged:
        reasons += boundary_reasons(status.get("boundary"))
    for lease in status.get("leases") or []:
        if lease["blocking"]:
            reasons.append(
                f"the {lease['name']} lease is held by {lease['holder']}, which is dead "
                f"({lease['holder_dead']}): it blocks every pass until the next tick breaks it"
            )
    for name, items in (
        ("stuck cards", stuck),
        ("blocked acceptances", blocked_acceptance),
        ("looping cards", sorted({x["card"] for v in looping.values() for x in v})),
        ("awaiting cards", awaiting),
        ("exhausted question or route rows", question_lane),
        ("unconsumed handoffs", handoff_unconsumed),
        ("unowned todo cards", unowned),
        ("orphaned rows", orphaned),
        ("stale lanes", lanes.get("stale") or []),
        ("unlanded accepted cards", lanes.get("unlanded") or []),
        ("overdue schedules", overdue_schedules),
        ("broken schedules", list(schedules.get("broken") or [])),
    ):
        if items:
            reasons.append(f"{len(items)} {name}")
    return {
        "attention": bool(reasons),
        "reasons": reasons,
        "at": iso(now),
        "supervisor": status["supervisor"],
        "pool": status["pool"],
        "patrol": patrol,
        "queue": status["queue"],
        "sessions": status["sessions"],
        "board": {"cards_read": len(cards), "truncated": truncated},
        "stuck": stuck,
        "in_review_waiting_human": waiting_human,
        "blocked_acceptance": blocked_acceptance,
        "looping": {**{k: v for k, v in looping.items()}, "total": looping_total},
        "awaiting": awaiting,
        "question_lane": question_lane,
        "handoff_unconsumed": handoff_unconsumed,
        "unowned": unowned,
        "orphaned": orphaned,
        "lanes": lanes,
        "schedules": schedules,
        "boundary": status.get("boundary"),
        "agents_judged": judged,
        "supervisors_elsewhere": elsewhere,
        "leases": status.get("leases") or [],
        "connections": connections,
    }


def connection_budget(store: Store, running: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the running supervisors may hold at once (each its pooled connections and its
    listener's) against what the database server allows this board's role; None on a
    board that is a file. ``lb serve`` and ``lb`` commands need some more."""
    allowed = store.connection_limit()
    if allowed is None:
        return None
    need = 0
    for inst in running:
        budget = (inst.get("info") or {}).get("db_connections")
        need += (budget if isinstance(budget, int) else 0) + 1
    return {"need": need, "allowed": allowed, "supervisors": len(running)}


def boundary_reasons(b: dict[str, Any] | None) -> list[str]:
    """No sandbox or a role no kind can run needs a human; an explained ``off`` is shown."""
    if not b:
        return []
    out = []
    if not b["sandbox"]["ok"]:
        out.append(f"sandbox unavailable ({b['sandbox']['problem']})")
    elif b["sandbox"].get("network") == "shared":
        out.append(
            "agents share this machine's network, loopback included (lb serve trusts "
            f"loopback): {SLIRP_HINT}"
        )
    for role in b.get("unrunnable") or []:
        out.append(f"role {role} has no available agent kind")
    return out
