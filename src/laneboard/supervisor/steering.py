"""Steering a running turn: a person's follow-up (``lb card tell``) reaches the agent
while it works, where its kind supports it.

The turn's watchdog looks for follow-ups queued on the card (``followup.queued`` events
write them to ``followups``) at the same 0.3 s pace as stop requests. When the session
can steer (``Steerable``: Codex ``turn/steer``) and the agent accepts the text, the
follow-ups are marked carried by the running turn, ``steered_at`` set, with a
``followup.steered`` event, so the next turn's prompt does not repeat them. Other kinds,
or a steer the agent refuses (its turn was just ending), leave them queued for the next
turn's prompt (``prompts.with_followups``).
"""

from __future__ import annotations

from typing import Any

from laneboard.agents.base import Steerable
from laneboard.domain import prompts
from laneboard.domain.model import Card
from laneboard.domain.transcript import entry
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.transcript_sink import TranscriptSink


def steer_followups(rt: Runtime, card: Card, session: Any, sink: TranscriptSink) -> int:
    """Steer the card's queued follow-ups into the running turn; how many were sent."""
    if not isinstance(session, Steerable):
        return 0
    try:
        with rt.store.autocommit() as tx:
            if not tx.pending_followups(card.id):
                return 0
        with rt.store.write() as tx:  # held while steering: no turn start takes them twice
            pending = tx.pending_followups(card.id)
            if not pending:
                return 0
            text = prompts.steered_followups([(f["author"], f["body"]) for f in pending])
            if not session.steer(text):
                return 0
            ids = [int(f["id"]) for f in pending]
            tx.deliver_followups(ids, sink.turn_id, steered=True)
            tx.append_event(
                "followup.steered",
                rt.actor,
                card_id=card.id,
                project_id=card.project_id,
                run_id=card.run_id,
                payload={"turn": sink.turn_id, "followups": ids},
            )
    except Exception as exc:  # a failed read or write must not end the watchdog
        rt.log.warn("pool", f"could not steer the turn's follow-ups: {exc}", card=card.ref)
        return 0
    sink.add(entry("info", text))
    rt.log.info("pool", f"steered {len(ids)} follow-up(s) into the turn", card=card.ref)
    return len(ids)
