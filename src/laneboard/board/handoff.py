"""Stage handoffs: follow-up work proposed by an accepted card, decided once per round.

A card created with ``meta.stage_handoff = "required"`` is a *producer*: its delivery
report carries a ``## Handoff`` section that proposes the next cards. Once the producer
is accepted (``done``), one decision is owed for its delivery round:

- **consumed** — the proposed cards were created (``follow_up``: each one in the
  producer's project, depending on the producer, marked ``meta.handoff_from`` and
  ``meta.handoff_round``), then ``meta.handoff_consumed_round`` is set to the round;
- **declined** — nothing is to be created, ``meta.handoff_declined_round`` is set to the
  round and ``meta.handoff_reason`` says why.

Both writes are allowed on the ``done`` producer (which ``Board.edit`` refuses), each is
one transaction with its own event (``handoff.follow_up``, ``handoff.decided``), and both
are open to people, the system and the Director's agent credential scoped to the
producer — the only agent that decides a handoff. A decision is recorded once per round;
repeating the same decision is a no-op, a different one is refused.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from laneboard.board import authority, inputs
from laneboard.board.service import Board
from laneboard.domain.model import Actor, ActorKind, Card, CommentKind
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, bad_input, not_found
from laneboard.store.tx import Tx

REQUIRED = "required"
CONSUMED = "handoff_consumed_round"
DECLINED = "handoff_declined_round"
REASON = "handoff_reason"
FOLLOW_UPS = "handoff_follow_ups"
DECIDER = authority.DIRECTOR
DECISIONS = ("consumed", "declined")
SECTION_MAX = 2500
REASON_MAX = 2000

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def required(card: Card) -> bool:
    return card.meta.get("stage_handoff") == REQUIRED


def _round_of(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def decision(card: Card, round_: int) -> str | None:
    """``consumed`` or ``declined`` when a decision for ``round_`` is recorded, else None."""
    if _round_of(card.meta.get(CONSUMED)) == round_:
        return "consumed"
    if _round_of(card.meta.get(DECLINED)) == round_:
        return "declined"
    return None


def owed(card: Card) -> bool:
    """An accepted producer with no decision for its current delivery round."""
    return (
        card.status is Status.DONE
        and required(card)
        and decision(card, card.delivery_round) is None
    )


def section(body: str, limit: int = SECTION_MAX) -> str | None:
    """The text under a report's ``## Handoff`` heading, up to the next heading of the same
    or a higher level, bounded to ``limit`` characters; None when there is no such section."""
    lines = body.splitlines()
    start = level = None
    for i, line in enumerate(lines):
        m = _HEADING.match(line)
        if m and m.group(2).strip().lower() == "handoff":
            start, level = i + 1, len(m.group(1))
            break
    if start is None or level is None:
        return None
    out = []
    for line in lines[start:]:
        m = _HEADING.match(line)
        if m and len(m.group(1)) <= level:
            break
        out.append(line)
    text = "\n".join(out).strip()
    if len(text) > limit:
        text = text[: limit - 12].rstrip() + " …[clipped]"
    return text


def round_section(tx: Tx, card: Card, limit: int = SECTION_MAX) -> str | None:
    """The ``## Handoff`` section of the producer's report for its current round."""
    for rep in tx.reports(card.id):
        if rep.round == card.delivery_round:
            return section(rep.body, limit)
    return None


def follow_up_refs(tx: Tx, card: Card, round_: int) -> list[str]:
    """The follow-up cards created from ``card``'s handoff of ``round_``, oldest first."""
    ids = tx.dependents(card.id)
    found = tx.list_cards(ids=ids, limit=1000) if ids else []
    return [
        c.ref
        for c in found
        if c.meta.get("handoff_from") == card.ref
        and _round_of(c.meta.get("handoff_round")) == round_
    ]


# -- writes ---------------------------------------------------------------------------------
def _may_decide(actor: Actor, card: Card) -> None:
    if actor.kind is not ActorKind.AGENT:
        return
    authority.may_write(actor, card)
    if actor.name != DECIDER:
        raise LaneboardError(
            "FORBIDDEN",
            f"a stage handoff is the {DECIDER}'s decision, not {actor.name}'s",
            "propose the follow-up work in the report's ## Handoff section instead",
        )


def _producer(tx: Tx, ref: str | int, actor: Actor, round_: int) -> Card:
    """The producer, locked, checked to owe a decision for ``round_``."""
    r = inputs.card_ref(ref)
    cid = r if isinstance(r, int) else tx.card_id_by_ref(r)
    card = tx.card(cid, lock=True) if cid is not None else None
    if card is None:
        raise not_found("card", ref, "list cards with: lb card list")
    _may_decide(actor, card)
    if not required(card):
        raise bad_input(
            f"{card.ref} asks for no stage handoff",
            "only a card with meta.stage_handoff=required takes a handoff decision",
        )
    if card.status is not Status.DONE:
        raise LaneboardError(
            "ILLEGAL_TRANSITION",
            f"{card.ref} is {card.status.value}; a handoff is decided once it is accepted (done)",
            "wait until the card is done",
        )
    if round_ != card.delivery_round:
        raise bad_input(
            f"round {round_} is not {card.ref}'s delivery round ({card.delivery_round})",
            f"decide the current round: --round {card.delivery_round}",
        )
    return card


def _decided_refusal(card: Card, round_: int, made: str) -> LaneboardError:
    return LaneboardError(
        "CONFLICT",
        f"{card.ref}'s handoff for round {round_} is already {made}",
        "a handoff is decided once per delivery round; see: lb card get " + card.ref,
    )


def _title_key(card: Card, round_: int, title: str) -> str:
    digest = hashlib.sha256(title.strip().lower().encode()).hexdigest()[:16]
    return f"handoff:{card.id}:r{round_}:{digest}"


def follow_up(
    board: Board,
    actor: Actor,
    ref: str | int,
    title: str,
    *,
    round_: int,
    description: str = "",
    assignee: str | None = None,
    priority: int = 2,
    labels: Iterable[str] = (),
) -> Card:
    """Create one follow-up card proposed by ``ref``'s handoff for ``round_``.

    The card lands in the producer's project as ``todo``, depends on the producer and is
    marked with where it came from. Repeating the same title for the same round returns
    the card created the first time (a retried turn creates nothing twice).
    """
    title = inputs.text(title, "title", limit=500)
    with board.store.write() as tx:
        card = _producer(tx, ref, actor, round_)
        made = decision(card, round_)
        if made is not None:
            raise _decided_refusal(card, round_, made)
        key = _title_key(card, round_, title)
        existing = tx.card_by_key(key)
        if existing is not None:
            return existing  # a retried turn: the card exists already
        # the producer's own credential may create its follow-ups (checked just above)
        creator = replace(actor, card_id=None, epoch=None) if actor.card_id else actor
        new = board.create_card(
            creator,
            card.project_id,
            title,
            description=description,
            assignee=assignee,
            priority=priority,
            labels=labels,
            depends_on=[card.id],
            runtime_meta={"handoff_from": card.ref, "handoff_round": round_},
            idempotency_key=key,
            tx=tx,
        )
        tx.append_event(
            "handoff.follow_up",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={"ref": card.ref, "round": round_, "follow_up": new.ref},
        )
        return new


def decide(
    board: Board,
    actor: Actor,
    ref: str | int,
    outcome: str,
    *,
    round_: int,
    reason: str | None = None,
) -> Card:
    """Record ``consumed`` or ``declined`` for the producer's ``round_`` (one decision a round).

    ``declined`` needs a reason; it is kept in ``meta.handoff_reason`` and written as a
    ``note`` comment. ``consumed`` records the follow-up cards created for the round.
    """
    if outcome not in DECISIONS:
        raise bad_input(f"unknown handoff decision {outcome!r}", "use consumed or declined")
    why = None
    if reason is not None and reason.strip():
        why = inputs.text(reason, "reason", limit=REASON_MAX, multiline=True).strip()
    if outcome == "declined" and why is None:
        raise bad_input("a declined handoff needs a reason", 'add --reason "why nothing follows"')
    with board.store.write() as tx:
        card = _producer(tx, ref, actor, round_)
        made = decision(card, round_)
        if made == outcome:
            return card  # already recorded: a repeat changes nothing
        if made is not None:
            raise _decided_refusal(card, round_, made)
        refs = follow_up_refs(tx, card, round_)
        meta: dict[str, Any] = {CONSUMED if outcome == "consumed" else DECLINED: round_}
        if outcome == "consumed":
            meta[FOLLOW_UPS] = refs
        if why is not None:
            meta[REASON] = why
        new = board.annotate_in(tx, actor, card, meta)
        note = f"Handoff for round {round_} {outcome}"
        note += f": follow-ups {', '.join(refs)}" if refs else ""
        note += f". {why}" if why else "."
        c = tx.insert_comment(card.id, CommentKind.NOTE.value, note, actor)
        tx.append_event(
            "comment.added",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={"comment": c.id, "kind": CommentKind.NOTE.value},
        )
        tx.append_event(
            "handoff.decided",
            actor,
            card_id=card.id,
            project_id=card.project_id,
            run_id=card.run_id,
            payload={
                "ref": card.ref,
                "round": round_,
                "decision": outcome,
                "follow_ups": refs,
                "reason": why,
            },
        )
        return new
