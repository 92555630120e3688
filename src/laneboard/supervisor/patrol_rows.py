"""The SLA patrol's rows: what each measures, and the alerts due now. Read-only.

Rows (each alert is one record with a stable ``dedup_key``):

===================  =======================================  ==========================
row                  measured from                            tiers (minutes)
===================  =======================================  ==========================
heartbeat_stale      the claim heartbeat (epics excluded)     30 overdue, 360 escalate
heartbeat_unreadable the claim, when no usable heartbeat      10 none, at once future
question_waiting     the newest open question                 60 overdue, 1440 escalate
blocked_waiting      the move to blocked                      120 overdue, 1440 escalate
review_aging         a review card's creation (not in review) 60 overdue
review_missing       the delivery (in_review, no review card) 30 overdue
leader_stalled       the leader's last action, when owed work 240 overdue
inspector_liveness   the peer inspector's marker              3 peer periods (warning)
===================  =======================================  ==========================

Human-waiting rows count working hours when a window is configured (timezone + window);
the default is the wall clock. The pass that sends the alerts is ``patrol``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from laneboard.domain.clock import MINUTE_MS, iso
from laneboard.domain.model import Card, CardKind, CommentKind
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError
from laneboard.store.tx import Tx
from laneboard.supervisor.workflow import REVIEW_KEY_RANGE, approve_is_current, review_key

ROWS = (
    "heartbeat_stale",
    "heartbeat_unreadable",
    "question_waiting",
    "blocked_waiting",
    "review_aging",
    "review_missing",
    "leader_stalled",
    "inspector_liveness",
)
LEADER_COMMENT_KINDS = ("confirm", "decision", "change", "answer")


@dataclass(frozen=True)
class PatrolSettings:
    notify_command: str = ""
    timezone: str = ""  # working-hours zone; "" = wall clock
    window: str = ""  # "09:00-18:00"; "" = wall clock
    leader: str = ""  # the leader's board name; "" = any human author
    peer_marker: str = ""  # a mark name (patrol:<machine>) or an absolute file path
    peer_period_s: int = 900
    stale_min: int = 30
    stale_escalate_min: int = 360
    question_min: int = 60
    question_escalate_min: int = 1440
    blocked_min: int = 120
    blocked_escalate_min: int = 1440
    review_aging_min: int = 60
    review_missing_min: int = 30
    leader_min: int = 240
    unreadable_after_min: int = 10

    def validate(self) -> PatrolSettings:
        if bool(self.timezone) != bool(self.window):
            raise LaneboardError(
                "CONFIG_INVALID",
                "patrol working hours need both timezone and window",
                'set both, e.g. timezone = "Europe/Berlin" and window = "09:00-18:00"',
            )
        if self.window:
            _window(self.window)
            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise LaneboardError(
                    "CONFIG_INVALID",
                    f"unknown time zone {self.timezone!r}",
                    "use an IANA name such as Europe/Berlin",
                ) from None
        return self


def _window(text: str) -> tuple[time, time]:
    try:
        a, b = text.split("-")
        start, end = time.fromisoformat(a.strip()), time.fromisoformat(b.strip())
    except ValueError:
        raise LaneboardError(
            "CONFIG_INVALID",
            f"patrol window {text!r} is not HH:MM-HH:MM",
            'write it like "09:00-18:00"',
        ) from None
    if not start < end:
        raise LaneboardError(
            "CONFIG_INVALID", f"patrol window {text!r} ends before it starts", "use start < end"
        )
    return start, end


# -- working hours ------------------------------------------------------------------
def elapsed_ms(start: int, now: int, settings: PatrolSettings) -> int:
    """Milliseconds from ``start`` to ``now``, inside the working window if one is set."""
    if now <= start:
        return 0
    if not settings.window:
        return now - start
    zone = ZoneInfo(settings.timezone)
    open_t, close_t = _window(settings.window)
    a = datetime.fromtimestamp(start / 1000, zone)
    b = datetime.fromtimestamp(now / 1000, zone)
    total = 0.0
    day = a.date()
    for _ in range(800):  # bounded: a wait older than two years is counted up to then
        if day > b.date():
            break
        lo = datetime.combine(day, open_t, zone)
        hi = datetime.combine(day, close_t, zone)
        s, e = max(lo, a), min(hi, b)
        if e > s:
            total += (e - s).total_seconds()
        day += timedelta(days=1)
    return int(total * 1000)


def due_ms(start: int, minutes: int, settings: PatrolSettings, now: int) -> int:
    """When ``minutes`` of counted time after ``start`` run out (estimated for windows)."""
    if not settings.window:
        return start + minutes * MINUTE_MS
    left = minutes * MINUTE_MS - elapsed_ms(start, now, settings)
    return now + max(left, 0)


# -- the plan -------------------------------------------------------------------------
@dataclass
class Alert:
    row: str
    tier: str  # overdue | escalate | warn
    severity: str  # warning | critical
    target: str
    measure_start: int | None
    threshold_min: int | None
    due_at: int | None
    evidence: dict[str, Any]
    card_id: int | None = None
    card: str | None = None
    confidence: str = "high"

    @property
    def dedup_key(self) -> str:
        subject = self.card or self.target
        return f"{self.row}|{subject}|{self.measure_start if self.measure_start else 'none'}"

    def to_dict(self, now: int) -> dict[str, Any]:
        return {
            "type": "laneboard.alert",
            "dedup_key": self.dedup_key,
            "row": self.row,
            "tier": self.tier,
            "severity": self.severity,
            "card": self.card,
            "target": self.target,
            "measure_start_at": iso(self.measure_start),
            "threshold_min": self.threshold_min,
            "due_at": iso(self.due_at),
            "at": iso(now),
            "action": "notify",
            "confidence": self.confidence,
            "evidence": self.evidence,
        }


def _tiered(
    row: str,
    card: Card,
    start: int,
    now: int,
    s: PatrolSettings,
    limits: tuple[int, int | None],
    *,
    working: bool,
    evidence: dict[str, Any],
) -> Alert | None:
    counted = elapsed_ms(start, now, s) if working else now - start
    first, second = limits
    if second is not None and counted > second * MINUTE_MS:
        tier, sev, lim = "escalate", "critical", second
    elif counted > first * MINUTE_MS:
        tier, sev, lim = "overdue", "warning", first
    else:
        return None
    due = due_ms(start, lim, s, now) if working else start + lim * MINUTE_MS
    ev = {**evidence, "counted_min": round(counted / MINUTE_MS, 1), "working_hours": working}
    ev["counting"] = "working hours" if (working and s.window) else "wall clock"
    return Alert(row, tier, sev, "leader", start, lim, due, ev, card.id, card.ref)


def _open_question(tx: Tx, card: Card) -> Any:
    got = tx.newest_comment_of_kind(card.id, CommentKind.QUESTION.value)
    if got is None or int(got["created_at"]) < card.status_since:
        return None
    return got


def card_alerts(tx: Tx, card: Card, now: int, s: PatrolSettings) -> list[Alert]:
    """Every card-scoped row for one card (also the re-check before a send)."""
    out: list[Alert] = []
    review_of = card.meta.get("review_of")
    if card.status is Status.IN_PROGRESS and card.kind is not CardKind.EPIC:
        hb = card.heartbeat_at
        if hb is None or hb > now + MINUTE_MS:
            absent_for = now - card.status_since
            if hb is not None or absent_for >= s.unreadable_after_min * MINUTE_MS:
                # measured from the claim: a later claim that loses its heartbeat again
                # is a new wait with a new key, not a repeat of the first one
                absent = hb is None
                out.append(
                    Alert(
                        "heartbeat_unreadable",
                        "warn",
                        "critical",
                        "leader",
                        card.status_since,
                        s.unreadable_after_min if absent else None,
                        card.status_since + s.unreadable_after_min * MINUTE_MS if absent else None,
                        {
                            "heartbeat_at": hb,
                            "holder": card.holder,
                            "status_since": iso(card.status_since),
                        },
                        card.id,
                        card.ref,
                        "low",
                    )
                )
        else:
            a = _tiered(
                "heartbeat_stale",
                card,
                hb,
                now,
                s,
                (s.stale_min, s.stale_escalate_min),
                working=False,
                evidence={
                    "holder": card.holder,
                    "heartbeat_at": iso(hb),
                    "epoch": card.claim_epoch,
                },
            )
            if a:
                out.append(a)
    if card.status in (Status.IN_PROGRESS, Status.AWAITING):
        q = _open_question(tx, card)
        if q is not None:
            a = _tiered(
                "question_waiting",
                card,
                int(q["created_at"]),
                now,
                s,
                (s.question_min, s.question_escalate_min),
                working=True,
                evidence={
                    "question": int(q["id"]),
                    "asked_by": q["author"],
                    "status": card.status.value,
                    "text": str(q["body"])[:300],
                },
            )
            if a:
                out.append(a)
    if card.status is Status.BLOCKED:
        # hold_* and blocked meta outlive their episode: name only the current one's
        hold_at = card.meta.get("hold_at")
        held = isinstance(hold_at, int) and hold_at >= card.status_since
        a = _tiered(
            "blocked_waiting",
            card,
            card.status_since,
            now,
            s,
            (s.blocked_min, s.blocked_escalate_min),
            working=True,
            evidence={
                "hold_cycle": card.meta.get("hold_cycle") if held else None,
                "blocked": None if held else card.meta.get("blocked"),
            },
        )
        if a:
            out.append(a)
    if review_of and card.status in (Status.TODO, Status.IN_PROGRESS):
        a = _tiered(
            "review_aging",
            card,
            card.created_at,
            now,
            s,
            (s.review_aging_min, None),
            working=True,
            evidence={
                "review_of": review_of,
                "round": card.meta.get("review_round"),
                "status": card.status.value,
            },
        )
        if a:
            out.append(a)
    if (
        not review_of
        and card.status is Status.IN_REVIEW
        and card.acceptance_mode.value != "off"
        and not _has_review(tx, card)
    ):
        a = _tiered(
            "review_missing",
            card,
            card.status_since,
            now,
            s,
            (s.review_missing_min, None),
            working=True,
            evidence={"round": card.delivery_round, "mode": card.acceptance_mode.value},
        )
        if a:
            out.append(a)
    return out


def _has_review(tx: Tx, card: Card) -> bool:
    """An open review card for the card's current round, or an APPROVE already recorded."""
    if approve_is_current(card):
        return True
    return tx.card_by_key(review_key(card.ref, card.delivery_round)) is not None


def leader_alert(tx: Tx, now: int, s: PatrolSettings) -> Alert | None:
    """Only when leader-owed work exists; the leader is recognised by author, not kind."""
    owed = tx.leader_owed_cards()
    if not owed:
        return None
    last = 0
    for e in tx.leader_actions(s.leader):
        p = json.loads(e["payload"])
        if e["type"] == "comment.added" and p.get("kind") not in LEADER_COMMENT_KINDS:
            continue
        if e["type"] == "card.moved" and p.get("to") != "done" and p.get("from") != "awaiting":
            continue
        last = int(e["at"])
        break
    earliest = min(int(r["status_since"]) for r in owed)
    start = max(last, earliest)
    counted = elapsed_ms(start, now, s)
    if counted <= s.leader_min * MINUTE_MS:
        return None
    return Alert(
        "leader_stalled",
        "overdue",
        "warning",
        s.leader or "leader",
        start,
        s.leader_min,
        due_ms(start, s.leader_min, s, now),
        {
            "owed": [f"{r['ref']} ({r['status']})" for r in owed[:20]],
            "owed_count": len(owed),
            "last_leader_action_at": iso(last) if last else None,
            "counted_min": round(counted / MINUTE_MS, 1),
        },
    )


def peer_marker_at(tx: Tx, marker: str) -> int | None:
    if os.path.isabs(marker):
        try:
            with open(marker, encoding="utf-8") as fh:
                raw = fh.read().strip()
            data = json.loads(raw) if raw.startswith("{") else {}
            if isinstance(data.get("at"), int):
                return int(data["at"])
            return int(os.path.getmtime(marker) * 1000)
        except (OSError, ValueError):
            return None
    r = tx.patrol_mark(marker)
    return int(r["at"]) if r else None


def inspector_alert(tx: Tx, now: int, s: PatrolSettings) -> Alert | None:
    if not s.peer_marker:
        return None  # an unconfigured peer is a registered dependency, not an alarm
    at = peer_marker_at(tx, s.peer_marker)
    limit_ms = 3 * s.peer_period_s * 1000
    if at is not None and now - at <= limit_ms:
        return None
    return Alert(
        "inspector_liveness",
        "warn",
        "warning",
        s.peer_marker,
        at,
        limit_ms // MINUTE_MS,
        (at + limit_ms) if at is not None else None,
        {"marker": s.peer_marker, "marker_at": iso(at), "periods": 3, "period_s": s.peer_period_s},
        confidence="high" if at is not None else "low",
    )


PLAN_CARD_LIMIT = 1000  # cards examined per pass; the oldest due ones first


def due_card_ids(tx: Tx, now: int, s: PatrolSettings) -> list[int]:
    """Cards some row may fire for, found by indexed reads at wall-clock thresholds.

    Counted working time never exceeds wall time, so a card outside every wall-clock
    threshold cannot be due; the rows' own rules then decide on this superset.
    """
    m = MINUTE_MS
    lo, hi = REVIEW_KEY_RANGE
    return tx.patrol_due_card_ids(
        stale_before=now - s.stale_min * m,
        future_after=now + m,
        unreadable_before=now - s.unreadable_after_min * m,
        question_before=now - s.question_min * m,
        blocked_before=now - s.blocked_min * m,
        review_keys=(lo, hi),
        review_aging_before=now - s.review_aging_min * m,
        review_missing_before=now - s.review_missing_min * m,
    )


def plan(
    tx: Tx, now: int, s: PatrolSettings, *, card_ids: Iterable[int] | None = None
) -> list[Alert]:
    """Every alert due now (read-only)."""
    ids = list(card_ids) if card_ids is not None else due_card_ids(tx, now, s)[:PLAN_CARD_LIMIT]
    cards = tx.list_cards(ids=ids, limit=len(ids)) if ids else []
    out: list[Alert] = []
    for card in cards:
        out.extend(card_alerts(tx, card, now, s))
    if card_ids is None:
        for a in (leader_alert(tx, now, s), inspector_alert(tx, now, s)):
            if a is not None:
                out.append(a)
    return out


def _recheck(tx: Tx, alert: Alert, now: int, s: PatrolSettings) -> bool:
    if alert.card_id is not None:
        fresh = plan(tx, now, s, card_ids=[alert.card_id])
    elif alert.row == "leader_stalled":
        fresh = [a for a in [leader_alert(tx, now, s)] if a]
    else:
        fresh = [a for a in [inspector_alert(tx, now, s)] if a]
    return any(a.dedup_key == alert.dedup_key and a.tier == alert.tier for a in fresh)
