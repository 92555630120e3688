"""What needs a person now, each item with the one action that settles it.

The inbox lists open questions (an agent's question on its ``in_progress`` card, or a
card ``awaiting`` a human), cards waiting for human acceptance, landings that were
refused, held cards (a loop bound, a stopped turn) and schedules whose last firing
failed. Each action is a REST call of the operation table (method, path, body; ``input``
names the body field a person fills in), so the dashboard, ``lb inbox`` and any client
act the same way.
"""

from __future__ import annotations

import json
from typing import Any

from laneboard.board.service import Board
from laneboard.domain.clock import iso
from laneboard.domain.model import Card, CommentKind
from laneboard.store.tx import Tx

KINDS = ("question", "acceptance", "landing", "hold", "schedule")
LIMIT = 500


def _action(label: str, method: str, path: str, body: dict[str, Any] | None = None,
            input_: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {"label": label, "method": method, "path": "/api/v1" + path, "body": body or {},
            "input": input_}  # fmt: skip


def _item(kind: str, card: Card | None, title: str, detail: str, since: int | None,
          actions: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    return {
        "kind": kind,
        "card": card.ref if card else None,
        "card_title": card.title if card else None,
        "title": title,
        "detail": detail[:2000],
        "since": iso(since),
        "actions": actions,
    }


def _answer(card: Card) -> dict[str, Any]:
    return _action("answer", "POST", f"/cards/{card.ref}/answer", {}, "body")


def _questions(tx: Tx, cards: list[Card]) -> list[dict[str, Any]]:
    out = []
    for card in cards:
        if card.status.value == "awaiting":
            q = tx.newest_agent_question(card.id, CommentKind.QUESTION.value, "")
            text = q["body"] if q else str(card.meta.get("awaiting_reason") or "")
            out.append(_item("question", card, f"{card.ref} awaits your answer", text,
                             card.status_since, [_answer(card)]))  # fmt: skip
        elif card.status.value == "in_progress":
            q = tx.newest_agent_question(card.id, CommentKind.QUESTION.value, "")
            if q is None or int(q["created_at"]) < card.status_since:
                continue
            out.append(_item("question", card, f"{q['author']} asks on {card.ref}", q["body"],
                             int(q["created_at"]), [_answer(card)]))  # fmt: skip
    return out


def _acceptance(cards: list[Card]) -> list[dict[str, Any]]:
    return [
        _item("acceptance", c, f"{c.ref} waits for your acceptance", c.title, c.status_since,
              [_action("approve", "POST", f"/cards/{c.ref}/move", {"to": "done"}),
               _action("reject", "POST", f"/cards/{c.ref}/reject", {}, "must_fix")])
        for c in cards
        if c.status.value == "in_review" and c.acceptance_mode.value == "human"
    ]  # fmt: skip


def _hold_body(c: Card) -> str:
    """The hold's reason, and the fix a configuration hold names."""
    reason = str(c.meta.get("hold_reason") or "")
    fix = c.meta.get("hold_fix")
    return f"{reason}: fix: {fix} (then lb holds release --reason {reason})" if fix else reason


def _holds(cards: list[Card]) -> list[dict[str, Any]]:
    return [
        _item("hold", c, f"{c.ref} is held ({c.meta.get('hold_cycle')})",
              _hold_body(c), c.meta.get("hold_at") or c.status_since,
              [_action("release", "POST", f"/cards/{c.ref}/move",
                       {"to": "todo", "note": "hold released"})])
        for c in cards
        if c.status.value == "blocked" and c.meta.get("hold_cycle")
    ]  # fmt: skip


def _landings(tx: Tx) -> list[dict[str, Any]]:
    out = []
    for cid in tx.done_cards_with_active_lanes(LIMIT):
        r = tx.last_landing_event(cid)
        card = tx.card(cid)
        if r is None or r["type"] != "lane.land_blocked" or card is None:
            continue
        reason = str(json.loads(r["payload"]).get("reason") or "")
        out.append(_item("landing", card, f"{card.ref} was not landed", reason,
                         card.status_since, [_action("retry landing", "POST",
                                                     f"/cards/{card.ref}/land")]))  # fmt: skip
    return out


def _schedules(tx: Tx) -> list[dict[str, Any]]:
    from laneboard.board.schedule_model import FAILED, Schedule

    out = []
    for r in tx.schedule_rows():
        s = Schedule.from_row(r)
        if s.last_outcome != FAILED or not s.enabled:
            continue
        out.append(_item("schedule", None, f"schedule {s.name} failed to fire",
                         s.last_detail or "", s.last_outcome_at,
                         [_action("disable", "POST", f"/schedules/{s.name}/disable")]))  # fmt: skip
    return out


def inbox(board: Board, kinds: tuple[str, ...] = KINDS) -> list[dict[str, Any]]:
    """Every item that needs a person, oldest first within each kind."""
    with board.store.read() as tx:
        cards = tx.list_cards(statuses=["awaiting", "in_progress", "in_review", "blocked"],
                              limit=5000)  # fmt: skip
        items: list[dict[str, Any]] = []
        if "question" in kinds:
            items += _questions(tx, cards)
        if "acceptance" in kinds:
            items += _acceptance(cards)
        if "landing" in kinds:
            items += _landings(tx)
        if "hold" in kinds:
            items += _holds(cards)
        if "schedule" in kinds:
            items += _schedules(tx)
    return items
