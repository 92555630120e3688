"""The alert ledger: notices de-duplicated by state.

An alert has a de-duplication key (what it is about, e.g. ``workflow|not_by_reviewer|42``),
a state (what is true about it now, e.g. ``round=2;author=mallory``) and a severity
tier. ``raise_alert`` sends — records the state and appends an ``alert`` event in the
caller's transaction — only when the key is new, its state changed, or its severity
went up a tier; a repeat of the same state (or a lower tier) is suppressed and writes
nothing. A promotion is never suppressed. ``clear_alert`` forgets a key, so the same
state later is news again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from laneboard.domain.model import Actor, system
from laneboard.store.tx import Tx

SEVERITIES = ("info", "notice", "warning", "critical")
KEY_MAX = 300
STATE_MAX = 500


# a project whose cards a machine cannot prepare (``admission_alerts``); ``lb status`` shows
# them while they last
PROJECT_ADMISSION = "project_admission"


@dataclass(frozen=True)
class AlertRecord:
    dedup_key: str
    state: str
    severity: str
    payload: dict[str, Any]
    card_id: int | None
    first_at: int
    sent_at: int
    sends: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.dedup_key,
            "state": self.state,
            "severity": self.severity,
            "payload": self.payload,
            "card_id": self.card_id,
            "first_at": self.first_at,
            "sent_at": self.sent_at,
            "sends": self.sends,
        }


def rank(severity: str) -> int:
    if severity not in SEVERITIES:
        raise ValueError(f"unknown severity {severity!r}; use one of {', '.join(SEVERITIES)}")
    return SEVERITIES.index(severity)


def _record(r: dict[str, Any]) -> AlertRecord:
    return AlertRecord(
        r["dedup_key"],
        r["state"],
        r["severity"],
        json.loads(r["payload"]),
        r["card_id"],
        r["first_at"],
        r["sent_at"],
        r["sends"],
    )


def _redacted(payload: dict[str, Any]) -> dict[str, Any]:
    from laneboard.supervisor.logs import redact

    out: dict[str, Any] = {}
    for k, v in payload.items():
        out[k] = redact(v)[:4000] if isinstance(v, str) else v
    return out


def alert(tx: Tx, dedup_key: str) -> AlertRecord | None:
    r = tx.alert_row(dedup_key)
    return _record(r) if r else None


def alerts(tx: Tx, *, prefix: str = "", card_id: int | None = None) -> list[AlertRecord]:
    return [_record(r) for r in tx.alert_rows(prefix, card_id)]


def raise_alert(
    tx: Tx,
    dedup_key: str,
    state: str,
    severity: str,
    payload: dict[str, Any],
    *,
    actor: Actor | None = None,
    card_id: int | None = None,
    project_id: int | None = None,
) -> bool:
    """Send the alert unless the ledger already holds this state at this tier or above.

    Returns True when it was sent (ledger row written and ``alert`` event appended).
    """
    level = rank(severity)
    key, st = dedup_key[:KEY_MAX], state[:STATE_MAX]
    body = _redacted(payload)
    now = tx.now()
    prev = alert(tx, key)
    promoted = False
    if prev is None:
        inserted = tx.insert_alert(key, st, severity, body, card_id, now)
        if not inserted:  # another pass recorded it first: judge against its row
            prev = alert(tx, key)
    if prev is not None:
        same_state = prev.state == st
        if same_state and level <= rank(prev.severity):
            return False
        promoted = same_state
        sent = tx.resend_alert(key, st, severity, body, card_id, now, (prev.state, prev.severity))
        if not sent:
            return False  # changed under us by a concurrent sender: it notified
    tx.append_event(
        "alert",
        actor or system("Orchestrator"),
        card_id=card_id,
        project_id=project_id,
        payload={**body, "key": key, "state": st, "severity": severity, "promoted": promoted},
    )
    return True


def clear_alert(tx: Tx, dedup_key: str) -> bool:
    """Forget a key (its condition is over); the next occurrence is sent again."""
    return tx.delete_alert(dedup_key[:KEY_MAX])


def clear_absent(tx: Tx, prefix: str, present: set[str]) -> list[str]:
    """Forget every key under ``prefix`` that is not in ``present``; returns them."""
    gone = [a.dedup_key for a in alerts(tx, prefix=prefix) if a.dedup_key not in present]
    for key in gone:
        clear_alert(tx, key)
    return gone
