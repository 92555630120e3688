"""The pictures page: a run's (an epic's, a project's, the board's) progress over time, its
dependency graph, and what its agent turns used and cost, per card, per agent kind and
per day."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from laneboard.board import access
from laneboard.domain.clock import iso
from laneboard.domain.model import Actor, Card
from laneboard.domain.status import Status
from laneboard.server import charts, graph

if TYPE_CHECKING:
    from laneboard.server.app import Server

CARD_LIMIT = 5000
EVENT_LIMIT = 200_000
TOP_CARDS = 20
STATUSES = frozenset(s.value for s in Status)


def context(srv: Server, actor: Actor, scope: dict[str, Any]) -> dict[str, Any]:
    board = srv.board
    cards = access.list_cards(
        board,
        actor,
        run_id=scope.get("run"),
        parent=scope.get("parent"),
        project=scope.get("project"),
        limit=CARD_LIMIT,
    )
    ids = [c.id for c in cards]
    usage = _usage(srv, cards, by_run=not scope.get("run"))
    return {
        "actor": actor,
        "is_human": actor.is_human,
        "scope": scope,
        "title": _title(srv, scope),
        "runs": board.runs(limit=50) if actor.is_human else [],
        "cards": cards,
        "progress_chart": charts.progress(progress(srv, ids, cards)),
        "graph": graph.svg(
            [graph.Node(c.id, c.ref, c.title, c.status.value) for c in cards],
            [(c.id, d) for c in cards for d in c.depends_on],
        ),
        **usage,
    }


def _title(srv: Server, scope: dict[str, Any]) -> str:
    if scope.get("run"):
        run = srv.board.run(scope["run"])
        return f"run {run['id']}: {str(run.get('goal', ''))[:80]}"
    if scope.get("parent"):
        epic = srv.board.get(scope["parent"])
        return f"epic {epic.ref}: {epic.title}"
    if scope.get("project"):
        return f"project {scope['project']}"
    return "the whole board"


def progress(srv: Server, ids: list[int], cards: list[Card]) -> list[tuple[int, dict[str, int]]]:
    """Counts by status after each change of these cards, replayed from the event log."""
    if not ids:
        return []
    wanted = set(ids)
    status: dict[int, str] = {}
    series: list[tuple[int, dict[str, int]]] = []
    for ev in srv.board.events(0, card_ids=ids, limit=EVENT_LIMIT):
        if ev.card_id not in wanted:
            continue
        to = _status_after(ev.type, ev.payload)
        if to is None or status.get(ev.card_id) == to:
            continue
        status[ev.card_id] = to
        counts: dict[str, int] = defaultdict(int)
        for s in status.values():
            counts[s] += 1
        series.append((ev.at, dict(counts)))
    now = srv.store.clock.now_ms()
    final: dict[str, int] = defaultdict(int)
    for c in cards:  # the board as it stands (events past the limit, or none at all)
        final[c.status.value] += 1
    series.append((max(now, series[-1][0] if series else now), dict(final)))
    return series


def _status_after(kind: str, payload: dict[str, Any]) -> str | None:
    if kind == "card.created":
        got = payload.get("status")
    elif kind == "card.claimed":
        got = payload.get("to") or Status.IN_PROGRESS.value
    elif kind.startswith("card."):
        got = payload.get("to")
    else:
        return None
    return got if isinstance(got, str) and got in STATUSES else None


def _usage(srv: Server, cards: list[Card], by_run: bool) -> dict[str, Any]:
    refs = {c.id: c.ref for c in cards}
    runs = {c.id: c.run_id for c in cards}
    with srv.store.read() as tx:
        rows = tx.turn_usage_rows(list(refs))
    costed = any(r["cost_usd"] is not None for r in rows)
    unit = "USD" if costed else "tokens"

    def amount(r: Any) -> float:
        if costed:
            return float(r["cost_usd"] or 0.0)
        return float((r["input_tokens"] or 0) + (r["output_tokens"] or 0))

    per_card: dict[str, float] = defaultdict(float)
    per_kind: dict[str, float] = defaultdict(float)
    per_run: dict[str, float] = defaultdict(float)
    per_day: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        value = amount(r)
        per_card[refs[r["card_id"]]] += value
        per_kind[r["agent_kind"]] += value
        run = runs[r["card_id"]]
        per_run[f"run {run}" if run else "no run"] += value
        day = (iso(r["started_at"]) or "")[:10]
        per_day[day][r["agent_kind"]] += value
    top = sorted(per_card.items(), key=lambda kv: -kv[1])[:TOP_CARDS]
    kinds = sorted(per_kind.items(), key=lambda kv: -kv[1])
    return {
        "unit": unit,
        "turns": len(rows),
        "total": charts.figure(sum(per_kind.values()), unit),
        "tokens": sum((r["input_tokens"] or 0) + (r["output_tokens"] or 0) for r in rows),
        "per_card_chart": charts.bars([(k, v, "#0052cc") for k, v in top], unit),
        "per_kind_chart": charts.bars(
            [(k, v, charts.PALETTE[i % len(charts.PALETTE)]) for i, (k, v) in enumerate(kinds)],
            unit,
        ),
        "per_run_chart": charts.bars(
            [(k, v, "#00875a") for k, v in sorted(per_run.items(), key=lambda kv: -kv[1])], unit
        )
        if by_run and per_run
        else None,
        "per_day_chart": charts.timeline(
            [(d, dict(by)) for d, by in sorted(per_day.items())], unit
        ),
    }
