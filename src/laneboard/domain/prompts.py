"""Prompts the pool sends: the handoff, the resume and the replay. All bounded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from laneboard.domain.model import Card
from laneboard.domain.roles import Role

HANDOFF_MAX = 3600
RESUME_MAX = 2000
REPLAY_MAX = 8000
REPLAY_TURNS = 12


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 15)].rstrip() + " …[truncated]"


def handoff(card: Card, role: Role, brief_path: str) -> str:
    """The first prompt of a new session: who you are, what the card is, how to finish."""
    head = [
        f"You are the {role.title or role.id} for card {card.ref} and its only worker.",
        "The supervisor holds the claim for you; your working directory is this card's lane.",
    ]
    if role.responsibilities:
        head.append("Responsibilities: " + "; ".join(role.responsibilities))
    if role.boundaries:
        head.append("Boundaries: " + "; ".join(role.boundaries))
    tail = [
        f"The full brief is in {brief_path}.",
        f"Heartbeat at least every 4 minutes: lb card heartbeat {card.ref}.",
        f'Ask a blocking question with: lb card ask {card.ref} "…" then '
        f"lb card wait {card.ref} --question ID.",
        f'When done: commit, lb card report {card.ref} --body "…" --evidence "0:<check>", '
        f"then lb card move {card.ref} in_review.",
    ]
    fixed = "\n".join(head) + "\n\n" + "\n".join(tail)
    body_parts = [f"Card {card.ref} (round {card.delivery_round}): {card.title}"]
    if card.acceptance:
        body_parts.append(
            "Acceptance:\n" + "\n".join(f"- {c.id}: {c.text}" for c in card.acceptance)
        )
    if card.checks:
        body_parts.append("Checks that must pass: " + "; ".join(card.checks))
    if card.allowed_paths:
        body_parts.append("Change only: " + ", ".join(card.allowed_paths))
    if card.description:
        body_parts.append("Description:\n" + card.description)
    room = HANDOFF_MAX - len(fixed) - 4
    body = _clip("\n".join(body_parts), max(room, 200))
    return _clip(fixed.replace("\n\n", "\n\n" + body + "\n\n", 1), HANDOFF_MAX)


def resume(card: Card, reason: str, detail: str = "") -> str:
    """Sent to the same native session when a card comes back in the same round."""
    text = (
        f"Card {card.ref} continues (round {card.delivery_round}). What changed: {reason}."
        + (f"\n{detail}" if detail else "")
        + f"\nThe card is {card.status.value}; carry on and deliver as before."
    )
    return _clip(text, RESUME_MAX)


@dataclass(frozen=True)
class TranscriptTurn:
    prompt: str
    reply: str


def replay(card: Card, role: Role, turns: Sequence[TranscriptTurn], reason: str) -> str:
    """A fresh session's first prompt when the native session is gone."""
    head = (
        f"Your previous session for card {card.ref} could not be restored ({reason}). "
        f"Here is the supervisor's transcript of it; continue from where it ended.\n"
    )
    lines: list[str] = []
    for t in list(turns)[-REPLAY_TURNS:]:
        lines.append(f"> {t.prompt}\n< {t.reply}")
    body = "\n".join(lines)
    room = REPLAY_MAX - len(head)
    if len(body) > room:
        body = "…" + body[-(room - 1) :]
    return head + body


def steered_followups(messages: Sequence[tuple[str, str]]) -> str:
    """Follow-ups steered into a running turn, oldest first."""
    lines = [f"- from {author}: {_clip(body, 4000)}" for author, body in messages]
    return "Messages sent to you while you work (act on them now):\n" + "\n".join(lines)


def with_followups(prompt: str, messages: Sequence[tuple[str, str]]) -> str:
    """A turn's prompt with the follow-ups people sent since the last turn, oldest first."""
    if not messages:
        return prompt
    lines = [f"- from {author}: {_clip(body, 4000)}" for author, body in messages]
    return (
        prompt.rstrip("\n")
        + "\n\nMessages sent to you since your last turn (act on them in this turn):\n"
        + "\n".join(lines)
        + "\n"
    )
