"""Triage rows: the director lane's post-acceptance handoff decision.

A producer card (``meta.stage_handoff = "required"``) that was accepted (``done``) within
the archive window and has no decision for its delivery round gets one ``triage`` row
per round (and per acceptance). The director reads the ``## Handoff`` section of the
round's report and either creates the proposed cards and records the round as consumed,
or records it as declined with a reason (see ``laneboard.board.handoff``).

Triage is enqueued after question and route rows and runs after them: it never keeps a
held worker waiting. The row is judged from the board — the decision marker on the
producer for the row's round — not from the turn's exit. A producer that is no longer
``done`` (or moved to another round) makes the row stale: it completes without a turn.
After 2 turns without a decision the row fails, a ``note`` on the producer says what is
left to do (the card stays ``done``), and ``lb doctor`` lists it as ``handoff_unconsumed``.
"""

from __future__ import annotations

from typing import Any

from laneboard.board import handoff
from laneboard.domain.clock import MINUTE_MS
from laneboard.domain.model import Card, CardKind
from laneboard.domain.status import Status
from laneboard.store.tx import Tx
from laneboard.supervisor import records
from laneboard.supervisor.records import QueueRow

KIND = "triage"
ATTEMPTS = 2
DAY_MS = 24 * 60 * MINUTE_MS
WINDOW_MS = 7 * DAY_MS  # the archive window: older accepted handoffs are not offered
SCAN_LIMIT = 500
PROMPT_MAX = 6000


def producers(tx: Tx, now: int, limit: int = SCAN_LIMIT) -> list[Card]:
    """Accepted producers inside the archive window that owe a decision, oldest first."""
    got = tx.handoff_producer_ids(now - WINDOW_MS, limit)
    if not got:
        return []
    cards = tx.list_cards(ids=got, limit=limit)
    return sorted(
        (c for c in cards if c.kind is not CardKind.EPIC and handoff.owed(c)),
        key=lambda c: (c.status_since, c.id),
    )


def already_offered(rows: list[QueueRow], card: Card) -> bool:
    """One triage row per round and acceptance (a failed one is not offered again)."""
    return any(
        r.kind == KIND
        and int(r.payload.get("round") or 0) == card.delivery_round
        and r.created_at >= card.status_since
        for r in rows
    )


def enqueue(tx: Tx, card: Card, machine: str, target_dir: str) -> QueueRow | None:
    return records.enqueue(
        tx, KIND, card.id, "director", card.project_id, machine, target_dir,
        card.delivery_round, card.claim_epoch,
        {"round": card.delivery_round, "not_before": 0},
    )  # fmt: skip


def stale(card: Card, row: QueueRow) -> str | None:
    """Why the row no longer stands (completed without a turn), or None."""
    rnd = int(row.payload.get("round") or row.round)
    if card.status is not Status.DONE:
        return f"stale: the producer is {card.status.value}, no longer done"
    if card.delivery_round != rnd:
        return f"stale: the producer is in round {card.delivery_round}, not {rnd}"
    if not handoff.required(card):
        return "stale: the producer no longer asks for a stage handoff"
    return None


def verdict(card: Card, row: QueueRow) -> tuple[bool, str]:
    """(settled, what the board says) for the row's round."""
    rnd = int(row.payload.get("round") or row.round)
    made = handoff.decision(card, rnd)
    if made is not None:
        return True, f"handoff for round {rnd} {made}"
    why = stale(card, row)
    if why is not None:
        return True, why
    return False, f"no decision recorded for round {rnd}"


def prompt(card: Card, section: str | None, table: list[dict[str, Any]]) -> str:
    rnd = card.delivery_round
    body = section if section else "(the report for this round has no ## Handoff section)"
    roles = ", ".join(r["role"] for r in table) or "none"
    text = (
        f"Director row: triage\nCard: {card.ref}\nTitle: {card.title}\nRound: {rnd}\n"
        f"{card.ref} was accepted (done) and asks for a stage handoff. The ## Handoff "
        f"section of its round {rnd} report:\n{body}\n\n"
        f"Re-read the card first (lb card get {card.ref}); if it is no longer done, or "
        f"meta.handoff_consumed_round or meta.handoff_declined_round is already {rnd}, do "
        "nothing. Otherwise decide once for this round:\n"
        "- consume: create each proposed card (it lands in the same project as todo and "
        "depends on the producer; a repeated title returns the card made before):\n"
        f'  lb card follow-up {card.ref} "<title>" --round {rnd} --description "<what and '
        'why>" --assignee <role>\n'
        f"  then record the decision: lb card handoff {card.ref} consumed --round {rnd}\n"
        "- decline when nothing should follow (already covered, not worth doing):\n"
        f'  lb card handoff {card.ref} declined --round {rnd} --reason "<why>"\n'
        f"Roles to assign: {roles}.\n"
        "Never claim, implement, reopen or move a card."
    )
    return text[:PROMPT_MAX]


def exhausted_note(card: Card, rnd: int, bound: int, why: str) -> str:
    return (
        f"Handoff triage for round {rnd} was not decided in {bound} director turns ({why}). "
        f"The card stays done. Decide it: create the proposed cards with lb card follow-up "
        f'{card.ref} "<title>" --round {rnd} and run lb card handoff {card.ref} consumed '
        f'--round {rnd}, or lb card handoff {card.ref} declined --round {rnd} --reason "<why>".'
    )


def unconsumed(tx: Tx, now: int) -> list[dict[str, Any]]:
    """Exhausted triage rows whose producer (accepted inside the archive window) still has
    no decision for the row's round: ``lb doctor``'s ``handoff_unconsumed`` finding."""
    got = tx.failed_queue_rows(KIND, now - WINDOW_MS)
    out: dict[int, dict[str, Any]] = {}
    for r in got:
        card = tx.card(int(r["card_id"]))
        rnd = int(r["round"])
        if (
            card is None
            or card.status is not Status.DONE
            or card.delivery_round != rnd
            or now - card.status_since > WINDOW_MS
            or handoff.decision(card, rnd) is not None
        ):
            continue
        out[card.id] = {
            "card": card.ref,
            "finding": "handoff_unconsumed",
            "round": rnd,
            "attempts": int(r["attempts"]),
            "last_error": r["last_error"],
            "accepted_age_min": round((now - card.status_since) / MINUTE_MS, 1),
            "attention": True,
        }
    return list(out.values())
