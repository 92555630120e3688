"""Every alert reaches ``--notify`` once: a follower of the event log's ``alert`` events.

Holds (``holds.place_hold``), workflow alerts (``rework_bound``, ``review_retries_exhausted``,
``verdict_unreadable``, ``acceptance_blocked`` …), boundary violations and missing agent
kinds are recorded as ``alert`` events in the transaction that decided them. At the end
of every tick the notifier reads the ``alert`` events after its cursor (a patrol mark,
``notify:<machine>``, so a restart neither repeats nor skips one) and pipes each, as one
JSON object, to the notify command. The patrol's own alerts are sent by the patrol
itself (``lb patrol --notify`` works without a supervisor), so they are not sent again.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from laneboard.domain.clock import iso
from laneboard.domain.cursor import EventCursor
from laneboard.domain.model import Event
from laneboard.store.tx import Tx
from laneboard.supervisor.patrol import PATROL_ACTOR, notify, settings_of

if TYPE_CHECKING:
    from laneboard.supervisor.runtime import Runtime

BATCH = 100


def mark_name(machine: str) -> str:
    return f"notify:{machine}"


def _cursor(tx: Tx, machine: str) -> EventCursor | None:
    r = tx.patrol_mark(mark_name(machine))
    if r is None:
        return None
    info = json.loads(r["info"])
    return EventCursor(int(info.get("xid", 0)), int(info.get("id", 0)))


def _save(tx: Tx, machine: str, cursor: EventCursor) -> None:
    tx.set_patrol_mark(mark_name(machine), {"xid": cursor.xid, "id": cursor.id})


def ensure(tx: Tx, machine: str) -> None:
    """Begin following at the head of the log unless this machine already follows."""
    if _cursor(tx, machine) is None:
        _save(tx, machine, tx.event_head())


def start(rt: Runtime) -> None:
    with rt.store.write() as tx:
        ensure(tx, rt.machine)


def command(rt: Runtime) -> str:
    settings = settings_of(rt)
    return str(getattr(settings, "notify_command", "") or "")


def body(event: Event, ref: str | None) -> dict[str, Any]:
    """The JSON object the notify command reads for one alert event."""
    payload = dict(event.payload)
    out: dict[str, Any] = {
        "type": "laneboard.alert",
        "action": "notify",
        "row": payload.get("row") or payload.get("alert"),
        **payload,
        "dedup_key": payload.get("key"),
        "at": iso(event.at),
        "event": event.id,
    }
    if ref is not None:
        out.setdefault("card", ref)
    return out


def flush(rt: Runtime) -> list[dict[str, Any]]:
    """Send the alerts recorded since the last flush; returns what was sent."""
    with rt.store.read() as tx:
        at = _cursor(tx, rt.machine)
    if at is None:
        start(rt)
        return []
    cmd = command(rt)
    sent: list[dict[str, Any]] = []
    while True:
        with rt.store.write() as tx:
            events, nxt = tx.events_after(at, types=("alert",), limit=BATCH)
            if nxt != at:
                _save(tx, rt.machine, nxt)  # taken before sending: each is sent once
            refs = {e.card_id: _ref(tx, e.card_id) for e in events if e.card_id is not None}
        for e in events:
            if e.actor == PATROL_ACTOR.name and e.actor_kind == PATROL_ACTOR.kind.value:
                continue  # the patrol sends its own
            item = body(e, refs.get(e.card_id) if e.card_id is not None else None)
            sent.append(item)
            if cmd:
                err = notify(cmd, item, rt.config.time.subprocess_bound)
                if err:
                    rt.log.error("notify", err, key=item.get("dedup_key"))
        if len(events) < BATCH:
            return sent
        at = nxt


def _ref(tx: Tx, card_id: int) -> str | None:
    card = tx.card(card_id)
    return card.ref if card is not None else None
