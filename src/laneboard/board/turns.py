"""A card's agent turns as people see and steer them: the transcript of each turn, a
request to stop the running turn, and follow-ups queued for the worker's next turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from laneboard.board import inputs
from laneboard.board.authority import Caller, require
from laneboard.board.base import BoardBase
from laneboard.domain.clock import iso
from laneboard.domain.model import Actor, Card, Evidence, system
from laneboard.domain.transcript import entry
from laneboard.errors import LaneboardError, bad_input

if TYPE_CHECKING:
    from laneboard.store import Store

TRANSCRIPT_LIMIT = 1000
FOLLOWUP_CHARS = 20_000


def turn_dict(r: Any) -> dict[str, Any]:
    return {
        "id": int(r["id"]),
        "round": int(r["round"]),
        "agent_kind": r["agent_kind"],
        "role": r["role"],
        "session": r["native_id"],
        "outcome": r["outcome"],
        "error": r["error"],
        "input_tokens": int(r["input_tokens"] or 0),
        "output_tokens": int(r["output_tokens"] or 0),
        "cost_usd": r["cost_usd"],
        "duration_ms": int(r["duration_ms"] or 0),
        "started_at": iso(r["started_at"]),
        "finished_at": iso(r["finished_at"]),
        "stop_requested_by": r["stop_requested_by"],
    }


def followup_dict(r: Any) -> dict[str, Any]:
    return {
        "id": int(r["id"]),
        "body": r["body"],
        "author": r["author"],
        "author_kind": r["author_kind"],
        "created_at": iso(r["created_at"]),
        "turn": r["turn_id"],
        "steered_at": iso(r["steered_at"]),
    }


class TurnsMixin(BoardBase):
    def transcript(
        self, ref: str | int, *, after: int = 0, turn: int | None = None, limit: int = 500
    ) -> dict[str, Any]:
        """A card's turns and their transcript entries after entry ``after``."""
        inputs.cursor(after)
        if turn is not None:
            inputs.row_id(turn, "turn")
        if not 1 <= limit <= TRANSCRIPT_LIMIT:
            raise bad_input(f"limit {limit} is out of range", f"use 1 to {TRANSCRIPT_LIMIT}")
        with self.store.read() as tx:
            card = self._card(tx, ref)
            entries = tx.transcript(card.id, after=after, turn_id=turn, limit=limit)
            turns = [turn_dict(r) for r in tx.transcript_turns(card.id)]
            followups = [followup_dict(r) for r in tx.followups(card.id)]
        for e in entries:
            e["at"] = iso(e["at"])
        running = next((t["id"] for t in reversed(turns) if t["outcome"] == "running"), None)
        return {
            "card": card.ref,
            "turns": turns,
            "running": running,
            "entries": entries,
            "cursor": entries[-1]["id"] if entries else after,
            "followups": followups,
        }

    def stop_turn(self, actor: Actor, ref: str | int) -> dict[str, Any]:
        """Ask the supervisor running the card's turn to stop it (a person only)."""
        require(actor, Caller.PERSON, "stop a turn")
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            running = tx.running_turn(card.id)
            if running is None:
                raise LaneboardError(
                    "CONFLICT",
                    f"no turn is running on {card.ref}",
                    "stop a turn while the card's agent works (lb card transcript shows it)",
                )
            turn_id = int(running["id"])
            if tx.request_stop(turn_id, actor.name):
                tx.append_event(
                    "turn.stop_requested",
                    actor,
                    card_id=card.id,
                    project_id=card.project_id,
                    run_id=card.run_id,
                    payload={"turn": turn_id},
                )
        return {"card": card.ref, "turn": turn_id, "requested_by": actor.name}

    def tell(self, actor: Actor, ref: str | int, body: str) -> dict[str, Any]:
        """Queue a person's message for the worker's next turn on the card."""
        require(actor, Caller.PERSON, "send follow-ups to a worker")
        body = inputs.text(body, "follow-up", limit=FOLLOWUP_CHARS, multiline=True)
        with self.store.write() as tx:
            card = self._card(tx, ref, lock=True)
            if card.status.value in ("done", "canceled"):
                raise LaneboardError(
                    "CONFLICT",
                    f"{card.ref} is {card.status.value}: no worker will read a follow-up",
                    "comment on the card instead, or reopen it first",
                )
            row = tx.insert_followup(card.id, body, actor)
            tx.append_event(
                "followup.queued",
                actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"followup": int(row["id"])},
            )
        return {"card": card.ref, **followup_dict(row)}


def record_checks(store: Store, card: Card, evidence: Sequence[Evidence]) -> None:
    """The runtime's check runs of a delivery, on the transcript of the card's running
    turn (an entry each: the command, its exit code, the tail of its log and the log's
    path). Written with ``seq`` 0: they are the runtime's, not the agent's stream."""
    checks = [e for e in evidence if e.log_path]
    if not checks:
        return
    with store.write() as tx:
        running = tx.running_turn(card.id)
        if running is None:
            return
        now = tx.now()
        items = [(0, now, entry("check", e.command, exit_code=e.exit_code, output=e.summary,
                                is_error=e.exit_code != 0, paths=[e.log_path]))
                 for e in checks]  # fmt: skip
        last = tx.append_transcript(int(running["id"]), card.id, items)
        tx.append_event("turn.output", system("runtime"), card_id=card.id,
                        project_id=card.project_id, run_id=card.run_id,
                        payload={"turn": int(running["id"]), "entries": len(items),
                                 "last": last})  # fmt: skip
