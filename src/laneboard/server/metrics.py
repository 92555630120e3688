"""``/metrics``: Prometheus text format, computed from the store on each scrape."""

from __future__ import annotations

import json
from typing import Any

from laneboard.board.authority import Caller, require
from laneboard.domain.model import Actor
from laneboard.domain.runs import RunStatus
from laneboard.domain.status import Status
from laneboard.store import Store
from laneboard.store.tx import Tx


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str) -> None:
        if kind == "counter":
            name += "_total"
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, **labels: str) -> None:
        lab = ",".join(f'{k}="{_esc(str(v))}"' for k, v in sorted(labels.items()))
        num = repr(float(value)) if isinstance(value, float) else str(int(value))
        self.lines.append(f"{name}{{{lab}}} {num}" if lab else f"{name} {num}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _tick(tx: Tx) -> tuple[float, int]:
    """The last tick's duration (seconds) and tick count of the newest live supervisor."""
    row = tx.newest_live_supervisor_info()
    if row is None:
        return 0.0, 0
    try:
        info: dict[str, Any] = json.loads(row["info"] or "{}")
    except ValueError:
        return 0.0, 0
    last = info.get("last_tick") or {}
    return float(last.get("duration_ms") or 0) / 1000, int(info.get("ticks") or 0)


def render(store: Store, actor: Actor) -> str:
    """The board-wide counts: a person's (or the runtime's) read, never an agent's."""
    require(actor, Caller.PERSON, "read the metrics")
    w = Writer()
    with store.read() as tx:
        m = tx.metric_counts()
        cards, claimed, claims, turns = m["cards"], m["claimed"], m["claims"], m["turns"]
        tokens, queue, sessions, alerts = m["tokens"], m["queue"], m["sessions"], m["alerts"]
        events = tx.max_event_id()
        tick_s, ticks = _tick(tx)
        runs = tx.run_totals()

    w.family("laneboard_cards", "gauge", "Cards on the board by project and status.")
    seen = set()
    for r in cards:
        w.sample("laneboard_cards", int(r["n"]), project=r["project"], status=r["status"])
        seen.add(r["status"])
    for s in Status:
        if s.value not in seen:
            w.sample("laneboard_cards", 0, project="", status=s.value)
    w.family("laneboard_claims_active", "gauge", "Cards in progress under a claim.")
    w.sample("laneboard_claims_active", int(claimed or 0))
    w.family("laneboard_claims", "counter", "Successful claims (card.claimed events).")
    w.sample("laneboard_claims_total", int(claims or 0))
    w.family("laneboard_turns", "counter", "Agent turns recorded by the session pool, by outcome.")
    for r in turns:
        w.sample("laneboard_turns_total", int(r["n"]), outcome=r["outcome"])
    if not turns:
        w.sample("laneboard_turns_total", 0, outcome="none")
    w.family("laneboard_turn_duration_seconds", "counter", "Summed wall time of agent turns.")
    w.sample(
        "laneboard_turn_duration_seconds_total",
        sum(float(r["ms"] or 0) for r in turns) / 1000,
    )
    w.family("laneboard_turn_tokens", "counter", "Model tokens used by agent turns.")
    w.sample("laneboard_turn_tokens_total", int(tokens["i"] if tokens else 0), direction="input")
    w.sample("laneboard_turn_tokens_total", int(tokens["o"] if tokens else 0), direction="output")
    w.family("laneboard_queue_depth", "gauge", "Dispatch queue rows pending or processing.")
    for r in queue:
        w.sample("laneboard_queue_depth", int(r["n"]), kind=r["kind"], state=r["state"])
    if not queue:
        w.sample("laneboard_queue_depth", 0, kind="handoff", state="pending")
    w.family("laneboard_sessions", "gauge", "Agent session records by state.")
    for r in sessions:
        w.sample("laneboard_sessions", int(r["n"]), state=r["state"])
    if not sessions:
        w.sample("laneboard_sessions", 0, state="open")
    w.family(
        "laneboard_alerts",
        "counter",
        "Patrol alerts (alert.* and patrol.alert* events in the event log).",
    )
    w.sample("laneboard_alerts_total", int(alerts or 0))
    w.family("laneboard_events", "counter", "Events appended to the event log.")
    w.sample("laneboard_events_total", int(events))
    w.family(
        "laneboard_tick_duration_seconds",
        "gauge",
        "Duration of the live supervisor's last tick (0 when no supervisor runs).",
    )
    w.sample("laneboard_tick_duration_seconds", tick_s)
    w.family("laneboard_ticks", "counter", "Ticks the live supervisor has run.")
    w.sample("laneboard_ticks_total", ticks)
    w.family("laneboard_runs", "gauge", "Runs by status (degraded: its ticks are failing).")
    counted = {str(r["status"]): int(r["n"]) for r in runs}
    for st in RunStatus:
        w.sample("laneboard_runs", counted.get(st.value, 0), status=st.value)
    w.family("laneboard_run_errors", "counter", "Failed iterations and ticks of runs.")
    w.sample("laneboard_run_errors_total", sum(int(r["errors"] or 0) for r in runs))
    return w.text()
