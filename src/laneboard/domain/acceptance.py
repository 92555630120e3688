"""Acceptance authority: who may close a card (move it to ``done``)."""

from __future__ import annotations

from laneboard.domain.model import AcceptanceMode, Actor, ActorKind, Card
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError


def _forbid(message: str, fix: str) -> LaneboardError:
    return LaneboardError("ACCEPTANCE_FORBIDDEN", message, fix)


def check_close(card: Card, actor: Actor) -> None:
    """Raise ``ACCEPTANCE_FORBIDDEN`` unless ``actor`` may move ``card`` to done."""
    mode = card.acceptance_mode
    if card.status is Status.IN_PROGRESS and mode is not AcceptanceMode.OFF:
        raise _forbid(
            f"{card.ref} has acceptance mode {mode.value}; in_progress -> done needs mode off",
            "deliver it to in_review with a report first",
        )
    if card.meta.get("review_of") is not None:
        if actor.kind is not ActorKind.HUMAN and actor.name == card.holder:
            raise _forbid(
                f"{actor.name} reviewed {card.ref} and cannot also close it",
                "the workflow pass or a human closes a review card",
            )
        return
    if actor.kind is ActorKind.HUMAN:
        return
    if mode is AcceptanceMode.OFF:
        return
    if mode is AcceptanceMode.HUMAN:
        raise _forbid(
            f"{card.ref} has acceptance mode human: only a person may close it",
            "ask a human to close it (lb card move REF done, from a human session)",
        )
    verdict = card.meta.get("review_verdict")
    verdict_round = card.meta.get("review_verdict_round")
    author = card.meta.get("review_verdict_author")
    if verdict != "APPROVE" or verdict_round != card.delivery_round:
        raise _forbid(
            f"{card.ref} has no APPROVE verdict for round {card.delivery_round}",
            "wait for its review card to approve this round",
        )
    if author == actor.name:
        raise _forbid(
            f"{actor.name} wrote the verdict on {card.ref} and cannot also close it",
            "another actor (the workflow pass or a human) closes it",
        )
