"""The workflow pass: epics, review outcomes, auto-acceptance and review dispatch.

It runs in every tick after patrol, as the ``system`` actor ``Orchestrator``. It reads
one bounded snapshot of the board (``board_limit`` cards), computes a plan from it
(pure: ``plan``), then applies the plan (``workflow_apply``), where each action
re-reads and re-checks its cards inside its own write transaction — so a plan made
from a stale snapshot, or by a second pass racing this one, writes nothing twice.

The plan has four parts, in this order:

1. reconcile — an epic whose children are all terminal with at least one done is
   delivered (a roll-up report, then ``in_review``); empty epics wait out a grace
   period; epics that cannot close are notified.
2. outcomes — the verdict on each review card in ``in_review`` is applied to the card
   it reviews; the review card is closed last.
3. auto-accept — ``off`` cards in ``in_review`` are closed.
4. dispatch — one review card per (card, delivery round) for ``auto``/``human`` cards.

At most ``workflow_max_actions`` actions are applied per pass; a truncated read
dispatches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from laneboard.domain import verdict as vd
from laneboard.domain.clock import MINUTE_MS
from laneboard.domain.model import AcceptanceMode, Card, CardKind, Evidence
from laneboard.domain.status import Status
from laneboard.store.tx import Tx
from laneboard.supervisor.runtime import Runtime

REVIEW_LABEL = "review"
EMPTY_EPIC_GRACE_MS = 30 * MINUTE_MS
REVIEW_RETRY_MAX = 2
ALERT_PREFIX = "workflow|"
CHAIN_ROUNDS = 3  # plan/apply rounds in one pass (later rounds act on earlier outcomes)
REVIEW_KEY_RANGE = ("loop-review|", "loop-review}")  # every review_key sorts inside
ROLLUP_FROM = (Status.TODO, Status.IN_PROGRESS, Status.BLOCKED)


def review_key(ref: str, round_: int) -> str:
    return f"loop-review|{ref}|r{round_}"


def fix_key(ref: str, round_: int) -> str:
    return f"loop-fix|{ref}|r{round_}"


def review_of(card: Card) -> int | None:
    """The id of the card a review card reviews (None for any other card)."""
    value = card.meta.get("review_of")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return default


def approve_is_current(card: Card) -> bool:
    """A recorded APPROVE for this round, given after the card last entered review."""
    m = card.meta
    return (
        m.get("review_verdict") == vd.APPROVE
        and m.get("review_verdict_round") == card.delivery_round
        and _int(m.get("review_verdict_at"), -1) >= card.status_since
    )


def acceptance_blocked(card: Card) -> bool:
    """This round's acceptance was refused (e.g. landing): left for a human, not retried."""
    mark = card.meta.get("acceptance_blocked")
    return (
        isinstance(mark, dict)
        and mark.get("round") == card.delivery_round
        and _int(mark.get("at"), -1) >= card.status_since
    )


def rework_count(card: Card) -> int:
    """Which rejection of the current run a REJECT on this round would be (1-based).

    A hold starts a new run: ``meta.rework_base_round`` is the round it was held at.
    """
    base = _int(card.meta.get("rework_base_round"), 1) or 1
    return card.delivery_round - base + 1


def currently_held(card: Card) -> bool:
    return card.status is Status.BLOCKED and _int(card.meta.get("hold_at"), -1) >= card.status_since


@dataclass(frozen=True)
class ReviewReport:
    body: str
    evidence: tuple[Evidence, ...]
    author: str
    declared: str | None


@dataclass
class Snapshot:
    now: int
    cards: dict[int, Card]
    truncated: bool
    children: dict[int, list[Card]] = field(default_factory=dict)
    children_truncated: bool = False
    reported: set[int] = field(default_factory=set)  # card ids with at least one report
    reports: dict[int, ReviewReport] = field(default_factory=dict)  # review card id -> report
    reviewer: str | None = None
    read: int = 0

    def open_review(self, original: Card, round_: int) -> Card | None:
        for c in self.cards.values():
            if (
                review_of(c) == original.id
                and _int(c.meta.get("review_round")) == round_
                and not c.terminal
            ):
                return c
        return None


@dataclass(frozen=True)
class Action:
    kind: str
    card_id: int
    ref: str
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.kind, "card": self.ref, "reason": self.reason, **self.data}


@dataclass(frozen=True)
class Notice:
    """An alert for the ledger: sent once per (key, state)."""

    name: str
    card_id: int | None
    project_id: int | None
    state: str
    severity: str
    payload: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{ALERT_PREFIX}{self.name}|{self.card_id or 0}"

    def to_dict(self) -> dict[str, Any]:
        return {"alert": self.name, "state": self.state, "severity": self.severity, **self.payload}


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    capped: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "actions": [a.to_dict() for a in self.actions],
            "alerts": [n.to_dict() for n in self.notices],
            "skipped": self.skipped,
            "truncated": self.truncated,
            "capped": self.capped,
        }


# -- the snapshot ------------------------------------------------------------------------
def read_snapshot(rt: Runtime) -> Snapshot:
    limit = rt.config.board_limit
    reviewer = rt.config.reviewer_roles[0] if rt.config.reviewer_roles else None
    with rt.store.autocommit() as tx:  # most passes find nothing: one statement, no BEGIN
        if not tx.has_review_work(REVIEW_KEY_RANGE):
            return Snapshot(tx.now(), {}, False, reviewer=reviewer)
    with rt.store.read() as tx:
        main = _work_cards(tx, limit + 1)
        snap = Snapshot(tx.now(), {}, len(main) > limit, reviewer=reviewer)
        main = main[:limit]
        snap.cards = {c.id: c for c in main}
        snap.read = len(main)
        wanted = {oid for c in main if (oid := review_of(c)) is not None} - set(snap.cards)
        if wanted:
            for c in tx.list_cards(ids=sorted(wanted), limit=len(wanted)):
                snap.cards[c.id] = c
            snap.read += len(wanted)
        for c in main:
            if review_of(c) is not None and c.status is Status.IN_REVIEW:
                rep = _review_report(tx, c)
                if rep is not None:
                    snap.reports[c.id] = rep
        epics = [c.id for c in main if c.kind is CardKind.EPIC and c.status in ROLLUP_FROM]
        if epics:
            _read_children(tx, snap, epics, limit)
    return snap


def _work_cards(tx: Tx, limit: int) -> list[Card]:
    """The cards the pass can act on (``Tx.review_work_cards``): each an indexed read."""
    return tx.review_work_cards(REVIEW_KEY_RANGE, limit)


def _review_report(tx: Tx, card: Card) -> ReviewReport | None:
    r = tx.report_row(card.id, card.delivery_round)
    if r is None:
        return None
    import json

    try:
        raw = json.loads(r["evidence"] or "[]")
        evidence = tuple(Evidence.from_dict(e) for e in raw if isinstance(e, dict))
    except (ValueError, KeyError, TypeError):
        evidence = ()
    return ReviewReport(str(r["body"]), evidence, str(r["author"]), r["verdict"])


def _read_children(tx: Tx, snap: Snapshot, epic_ids: list[int], limit: int) -> None:
    got = tx.children_of(epic_ids, limit + 1)
    snap.children_truncated = len(got) > limit
    kids = got[:limit]
    snap.read += len(kids)
    for k in kids:
        assert k.parent_id is not None
        snap.children.setdefault(k.parent_id, []).append(k)
    done = [k.id for k in kids if k.status is Status.DONE]
    if done:
        snap.reported = tx.cards_with_reports(done)


# -- the plan ----------------------------------------------------------------------------
def plan(snap: Snapshot, *, max_actions: int, rework_max: int) -> Plan:
    p = Plan(truncated=snap.truncated)
    reconcile: list[Action] = []
    outcomes: list[Action] = []
    accept: list[Action] = []
    dispatch: list[Action] = []
    rolled: list[Card] = []
    for card in sorted(snap.cards.values(), key=lambda c: c.id):
        if card.kind is CardKind.EPIC and card.status in ROLLUP_FROM:
            act = _plan_epic(snap, card, p)
            if act is not None:
                reconcile.append(act)
                rolled.append(card)
    for card in sorted(snap.cards.values(), key=lambda c: c.id):
        if review_of(card) is not None and card.status is Status.IN_REVIEW:
            act = _plan_review(snap, card, p, rework_max)
            if act is not None:
                outcomes.append(act)
    in_review = [
        c
        for c in sorted(snap.cards.values(), key=lambda c: c.id)
        if c.status is Status.IN_REVIEW and review_of(c) is None
    ]
    waiting: dict[str, list[str]] = {}
    for card in in_review + rolled:
        rnd = card.delivery_round
        if acceptance_blocked(card):
            p.skipped.append({"card": card.ref, "reason": "acceptance_blocked"})
            continue
        if card.acceptance_mode is AcceptanceMode.OFF:
            if snap.open_review(card, rnd) is None:
                accept.append(Action("auto_accept", card.id, card.ref, "acceptance off"))
            continue
        if snap.open_review(card, rnd) is not None:
            continue
        if card not in rolled and approve_is_current(card):
            if card.acceptance_mode is AcceptanceMode.AUTO:
                outcomes.append(Action("accept", card.id, card.ref, "approved", {"round": rnd}))
            continue
        if snap.reviewer is None:
            waiting.setdefault(str(card.project_id), []).append(card.ref)
            continue
        if snap.truncated:
            p.skipped.append({"card": card.ref, "reason": "board_truncated"})
            continue
        dispatch.append(
            Action(
                "dispatch",
                card.id,
                card.ref,
                "needs review",
                {"round": rnd, "reviewer": snap.reviewer},
            )
        )
    if waiting:
        p.skipped.append({"dispatch_skipped": "reviewer_not_configured", "projects": waiting})
    everything = reconcile + outcomes + accept + dispatch
    p.actions = everything[:max_actions]
    if len(everything) > max_actions:
        p.capped = {
            "cap": max_actions,
            "dropped": len(everything) - max_actions,
            "outcomes": len(outcomes),
            "dispatch": len(dispatch),
        }
    return p


def _notice(p: Plan, name: str, card: Card, state: str, severity: str, **payload: Any) -> None:
    p.notices.append(
        Notice(name, card.id, card.project_id, state, severity, {"card": card.ref, **payload})
    )


def _plan_epic(snap: Snapshot, epic: Card, p: Plan) -> Action | None:
    if currently_held(epic) or snap.children_truncated:
        return None
    kids = snap.children.get(epic.id, [])
    if not kids:
        if snap.now - epic.created_at >= EMPTY_EPIC_GRACE_MS:
            _notice(p, "empty_epic", epic, "empty", "notice", reason="the epic has no children")
        return None
    if any(not k.terminal for k in kids):
        return None  # children_unfinished: silent, patrol watches stuck children
    done = [k for k in kids if k.status is Status.DONE]
    if not done:
        _notice(
            p,
            "no_child_done",
            epic,
            "canceled:" + ",".join(k.ref for k in kids),
            "warning",
            reason="every child was canceled; nothing was delivered",
            children=[k.ref for k in kids],
        )
        return None
    evidenced = [k for k in done if k.id in snap.reported]
    if not evidenced:
        _notice(
            p,
            "no_delivery_evidence",
            epic,
            "unreported:" + ",".join(k.ref for k in done),
            "warning",
            reason="no done child has a delivery report; a human decides whether to close it",
            children=[k.ref for k in done],
        )
        return None
    return Action(
        "rollup_epic",
        epic.id,
        epic.ref,
        "every child is terminal",
        {"round": epic.delivery_round, "children": [k.ref for k in kids]},
    )


def _plan_review(snap: Snapshot, rev: Card, p: Plan, rework_max: int) -> Action | None:
    oid = review_of(rev)
    assert oid is not None
    rround = _int(rev.meta.get("review_round"))
    orig = snap.cards.get(oid)
    base = {"review": rev.ref, "review_round": rround}
    if orig is None:
        _notice(
            p,
            "original_unseen",
            rev,
            f"original={oid}",
            "warning",
            reason="the reviewed card cannot be read",
            undecidable=snap.truncated,
        )
        return None
    data = {**base, "original": orig.id, "original_ref": orig.ref}
    if rround != orig.delivery_round:
        return Action("close_review", rev.id, rev.ref, "round_mismatch", data)
    rep = snap.reports.get(rev.id)
    if rep is None:
        verdict = vd.Verdict(None, vd.UNREADABLE, "the review card has no report for its round")
    else:
        if rep.author != rev.assignee:
            _notice(
                p,
                "review_report_not_by_reviewer",
                rev,
                f"round={rround};author={rep.author}",
                "warning",
                reason=f"the report is by {rep.author}, not the assigned reviewer {rev.assignee}",
                original=orig.ref,
            )
            return None
        verdict = vd.parse_verdict(rep.body, vd.anchor_commands(rep.evidence), rep.declared)
    if orig.status is Status.DONE:
        if verdict.decision == vd.REJECT:
            _notice(
                p,
                "conflicting_verdict",
                rev,
                f"done+REJECT;round={rround}",
                "warning",
                reason=f"{orig.ref} is done but its review rejects it",
                original=orig.ref,
            )
            return None
        return Action("close_review", rev.id, rev.ref, "original_done", data)
    if orig.status is not Status.IN_REVIEW:
        return Action("close_review", rev.id, rev.ref, f"original_{orig.status.value}", data)
    if not verdict.ok:
        retry = _int(rev.meta.get("review_retry"))
        problem = verdict.problem or vd.UNREADABLE
        if retry >= REVIEW_RETRY_MAX:
            _notice(
                p,
                "review_retries_exhausted",
                orig,
                f"round={rround};review={rev.id}",
                "warning",
                reason=f"the review verdict could not be used after {retry} reopens",
                review=rev.ref,
            )
            return Action(
                "hold_review",
                rev.id,
                rev.ref,
                problem,
                {**data, "detail": verdict.detail, "retry": retry},
            )
        _notice(
            p,
            problem,
            rev,
            f"round={rround};retry={retry}",
            "notice",
            reason=verdict.detail,
            original=orig.ref,
        )
        return Action(
            "reopen_review",
            rev.id,
            rev.ref,
            problem,
            {**data, "detail": verdict.detail, "retry": retry + 1},
        )
    assert rep is not None
    data.update(author=rep.author, mode=orig.acceptance_mode.value)
    if verdict.decision == vd.APPROVE:
        return Action("approve", rev.id, rev.ref, "APPROVE", data)
    n = rework_count(orig)
    data.update(
        findings=verdict.findings,
        must_fix=list(verdict.must_fix),
        rework_round=n,
        epic=orig.kind is CardKind.EPIC,
    )
    if n > rework_max:
        _notice(
            p,
            "rework_bound",
            orig,
            f"round={orig.delivery_round}",
            "warning",
            reason=f"rejected {n} times in a row; held for a human",
            review=rev.ref,
        )
        return Action("hold_rework", rev.id, rev.ref, "rework_bound", {**data, "bound": rework_max})
    return Action("reject", rev.id, rev.ref, "REJECT", data)


# -- the pass ----------------------------------------------------------------------------
def idle(rt: Runtime) -> dict[str, Any] | None:
    """Before a tick takes the pass's lease: the pass's result when no card is there for it
    to act on (one statement, as the pass itself would read first), else None — the pass
    then runs under its lease and reads again."""
    reviewer = rt.config.reviewer_roles[0] if rt.config.reviewer_roles else None
    with rt.store.autocommit() as tx:
        if tx.has_review_work(REVIEW_KEY_RANGE):
            return None
        empty = Snapshot(tx.now(), {}, False, reviewer=reviewer)
    return run(rt, first=empty)


def run(rt: Runtime, *, dry_run: bool = False, first: Snapshot | None = None) -> dict[str, Any]:
    """One pass: plan and apply, then plan again on the new state while actions still
    apply (a child accepted lets its epic roll up, a rolled-up epic gets its review) —
    at most ``CHAIN_ROUNDS`` times and ``workflow_max_actions`` actions in all.
    ``first``: the snapshot of the first round, when the caller read it."""
    from laneboard.supervisor import workflow_apply

    cfg = rt.config
    budget = cfg.workflow_max_actions
    out: dict[str, Any] = {"read": 0, "actions": [], "alerts": [], "results": []}
    seen_alerts: set[str] = set()
    tried: set[tuple[str, int]] = set()  # an action is tried once per pass
    for _ in range(CHAIN_ROUNDS):
        snap, first = first or read_snapshot(rt), None
        p = plan(snap, max_actions=budget, rework_max=cfg.rework_max_rounds)
        p.actions = [a for a in p.actions if (a.kind, a.card_id) not in tried]
        tried.update((a.kind, a.card_id) for a in p.actions)
        out["read"] += snap.read
        out["actions"] += [a.to_dict() for a in p.actions]
        for n in p.notices:
            if n.key not in seen_alerts:
                seen_alerts.add(n.key)
                out["alerts"].append(n.to_dict())
        out.update(skipped=p.skipped, truncated=p.truncated, capped=p.capped)
        if p.capped:
            rt.log.warn("workflow", "actions capped", **p.capped)
        if dry_run:
            out["dry_run"] = True
            del out["results"]
            return out
        results = workflow_apply.apply(rt, p)
        out["results"] += results
        budget -= len(p.actions)
        applied = [
            r for r in results if "action" in r and r["outcome"] not in ("skipped", "failed")
        ]
        if not applied or budget <= 0:
            break
    return out


def render(out: dict[str, Any]) -> str:
    """The pass result as plain lines (``lb loop workflow``)."""
    head = "workflow plan (dry run)" if out.get("dry_run") else "workflow pass"
    lines = [
        f"{head}: read {out.get('read', 0)} cards"
        + (" (truncated)" if out.get("truncated") else "")
    ]
    results = out.get("results")
    for item in results if results is not None else out.get("actions", []):
        if "alert" in item and "action" not in item:
            continue
        outcome = f" -> {item['outcome']}" if "outcome" in item else ""
        why = (
            f" ({item.get('why') or item.get('error')})"
            if item.get("why") or item.get("error")
            else ""
        )
        lines.append(f"  {item['action']} {item['card']}: {item.get('reason', '')}{outcome}{why}")
    for n in out.get("alerts", []):
        lines.append(f"  alert {n['alert']} {n.get('card', '')}: {n.get('reason', n['state'])}")
    for sk in out.get("skipped", []):
        lines.append(f"  skipped: {sk}")
    if out.get("capped"):
        lines.append(f"  capped: {out['capped']}")
    if len(lines) == 1:
        lines.append("  nothing to do")
    return "\n".join(lines)


def workflow_pass(rt: Runtime, dry_run: bool) -> dict[str, Any]:
    return run(rt, dry_run=dry_run)
