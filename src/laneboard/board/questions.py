"""Questions: a worker asks on its ``in_progress`` card and holds its turn until the
question is settled on the board.

``ask`` writes a ``question`` comment and leaves the card where it is. ``wait`` reads
the card every 2 s and pulses the claim heartbeat every 240 s; it returns after at most
110 s by default (540 s at most) with one outcome:

- ``answered`` — the card was released to ``todo`` (the settle is the release, not a
  note); the answer is the trail of comments written after the question (≤ 2,000 chars);
- ``escalated`` — the card went to ``awaiting`` (a human decides; the worker parks);
- ``moved`` — any other move (or another holder took the claim);
- ``timeout`` — nothing settled in time (notes so far are shown, the hold goes on);
- ``error`` — the board could not be read.

The clock and the sleep function are injectable, so the waiting is testable without
sleeping for real.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laneboard.board import access, inputs
from laneboard.board.service import Board
from laneboard.domain.clock import Clock
from laneboard.domain.model import Actor, ActorKind, Card, Comment, CommentKind, system
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError, bad_input, not_found
from laneboard.store import Store

POLL_S = 2.0
PULSE_S = 240.0
DEFAULT_TIMEOUT_S = 110
MAX_TIMEOUT_S = 540
TRAIL_MAX = 2000
OUTCOMES = ("answered", "escalated", "moved", "timeout", "error")


@dataclass
class WaitResult:
    outcome: str
    card: str
    question: int
    status: str | None = None
    answer: str = ""
    reason: str | None = None
    waited_s: float = 0.0
    pulses: int = 0
    comments: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "answer": self.answer,
            "card": self.card,
            "question": self.question,
            "status": self.status,
            "reason": self.reason,
            "waited_s": round(self.waited_s, 3),
            "pulses": self.pulses,
            "comments": self.comments,
            "error": self.error,
        }

    def text(self) -> str:
        head = f"{self.outcome}: {self.card} is {self.status or '?'}"
        if self.reason:
            head += f" ({self.reason})"
        if self.error:
            head += f" — {self.error}"
        return head + (f"\n{self.answer}" if self.answer else "")


class MonotonicClock:
    """Elapsed milliseconds from the monotonic clock (what a wait's bound is measured in)."""

    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)


def ask(board: Board, actor: Actor, ref: str | int, text: str) -> Comment:
    """Write a ``question`` comment on an ``in_progress`` card; the card stays put."""
    if not text or not text.strip():
        raise bad_input("the question is empty", 'pass the question text: lb card ask CARD "…"')
    card = access.get(board, actor, ref)
    if card.status is not Status.IN_PROGRESS:
        raise LaneboardError(
            "ILLEGAL_TRANSITION",
            f"{card.ref} is {card.status.value}; questions are asked on in_progress cards",
            "claim the card first, or comment with --kind question for the record",
        )
    if actor.kind is ActorKind.AGENT and card.holder not in (None, actor.name):
        raise LaneboardError(
            "STALE_CLAIM",
            f"{card.ref} is held by {card.holder}, not {actor.name}",
            "only the card's worker asks and waits on it",
        )
    return board.comment(actor, card.id, text, CommentKind.QUESTION.value)


def check_timeout(timeout_s: float) -> float:
    if timeout_s <= 0 or timeout_s > MAX_TIMEOUT_S:
        raise bad_input(
            f"--timeout {timeout_s:g} is out of range",
            f"use 1 to {MAX_TIMEOUT_S} seconds (default {DEFAULT_TIMEOUT_S}); "
            "re-invoke the wait once if it times out",
        )
    return timeout_s


def trail(comments: list[Comment], limit: int = TRAIL_MAX) -> str:
    """The comments after the question, oldest first, bounded to ``limit`` characters."""
    lines = [f"[{c.kind.value}] {c.author}: {c.body}" for c in comments]
    text = "\n".join(lines)
    if len(text) > limit:
        text = text[: limit - 12].rstrip() + " …[clipped]"
    return text


def _question(board: Board, card: Card, question_id: int) -> Comment:
    with board.store.read() as tx:
        c = tx.comment(question_id)
    if c is None or c.card_id != card.id or c.kind is not CommentKind.QUESTION:
        raise not_found(
            "question",
            question_id,
            f"pass the id printed by: lb card ask {card.ref} (a question comment of this card)",
        )
    return c


def wait(
    board: Board,
    actor: Actor,
    ref: str | int,
    question_id: int,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = POLL_S,
    pulse_s: float = PULSE_S,
) -> WaitResult:
    """Hold until the question settles on the board, or the bound passes."""
    check_timeout(timeout_s)
    clk = clock or MonotonicClock()  # the bound is elapsed time, even under a pinned board clock
    card = access.get(board, actor, ref)
    _question(board, card, inputs.row_id(question_id, "question"))
    res = WaitResult("timeout", card.ref, question_id, card.status.value)
    start = clk.now_ms()
    last_pulse = start
    epoch = card.claim_epoch
    holder = card.holder
    while True:
        now = clk.now_ms()
        res.waited_s = (now - start) / 1000
        try:
            card = board.get(card.id)
            after = board.comments(card.id, after=question_id)
        except LaneboardError as err:
            res.outcome, res.error = "error", err.line()
            return res
        except Exception as exc:  # the store is unreachable: report, never hang
            res.outcome, res.error = "error", f"{type(exc).__name__}: {exc}"
            return res
        res.status = card.status.value
        res.comments = [c.to_dict() for c in after]
        res.answer = trail(after)
        if card.status is Status.TODO:
            res.outcome = "answered"
            return res
        if card.status is Status.AWAITING:
            res.outcome = "escalated"
            aw = card.meta.get("awaiting") or {}
            res.reason = str(aw.get("reason") or "") or None
            return res
        if card.status is not Status.IN_PROGRESS:
            res.outcome = "moved"
            return res
        if card.claim_epoch != epoch or card.holder != holder:
            res.outcome = "moved"
            res.reason = f"claimed by {card.holder} (epoch {card.claim_epoch})"
            return res
        if now - start >= timeout_s * 1000:
            res.outcome = "timeout"
            return res
        if now - last_pulse >= pulse_s * 1000:
            last_pulse = now
            try:
                card = board.heartbeat(actor, card.id)
                res.pulses += 1
            except LaneboardError:
                continue  # the card moved under us: the next read says how
        remaining = timeout_s - (clk.now_ms() - start) / 1000
        sleep(max(0.0, min(poll_s, remaining)))


# -- credentials across a re-claim ---------------------------------------------------
TOKEN_TTL_MS = 3 * 60 * 60 * 1000


def renewed_token(store: Store, actor: Actor, card: Card) -> str | None:
    """After a card-scoped agent re-claims its own card, a credential for the new claim
    epoch, so its next writes carry the current epoch (``None`` when none is due).

    The claim itself (a compare-and-swap) proved the agent is the card's holder; the old
    credential stays fenced to the old epoch. The caller keeps it where the agent reads
    its credential (``LANEBOARD_TOKEN_FILE``).
    """
    if (
        actor.kind is not ActorKind.AGENT
        or actor.card_id != card.id
        or card.status is not Status.IN_PROGRESS
        or card.holder != actor.name
        or actor.epoch == card.claim_epoch
    ):
        return None
    from laneboard.board.tokens import Tokens

    token, _ = Tokens(store).create(
        system("Orchestrator"),
        actor.name,
        "agent",
        card_id=card.id,
        epoch=card.claim_epoch,
        expires_at=store.clock.now_ms() + TOKEN_TTL_MS,
    )
    return token
