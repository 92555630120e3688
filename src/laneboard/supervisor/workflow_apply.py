"""Applying a workflow plan. Each action re-reads and re-checks its cards inside its own
write transaction and does nothing when the board moved on since the snapshot (another
pass applied it, a human acted). One failing action never stops the others.

Acceptance (``-> done``) always goes through ``Board.move``, so the landing gate runs
inside it; a refused acceptance leaves the card in ``in_review`` and raises an
``acceptance_blocked`` alert. A review card is closed after its outcome is written.
"""

from __future__ import annotations

from typing import Any

from laneboard.domain import verdict as vd
from laneboard.domain.model import AcceptanceMode, Card, CardKind, CommentKind
from laneboard.domain.status import Status
from laneboard.errors import LaneboardError
from laneboard.store import IntegrityError
from laneboard.store.cas_sql import save_with_event
from laneboard.store.tx import Tx
from laneboard.supervisor import alerts
from laneboard.supervisor.holds import place_hold
from laneboard.supervisor.runtime import Runtime
from laneboard.supervisor.workflow import (
    REVIEW_LABEL,
    REVIEW_RETRY_MAX,
    ROLLUP_FROM,
    Action,
    Notice,
    Plan,
    _int,
    _review_report,
    acceptance_blocked,
    approve_is_current,
    currently_held,
    fix_key,
    review_key,
    review_of,
    rework_count,
)

SKIPPED = "skipped"
CONFLICT_ATTEMPTS = 2  # rounds a worker gets to resolve a landing conflict


class Skip(Exception):
    """The board moved on since the snapshot: the action no longer applies."""


def apply(rt: Runtime, p: Plan) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for n in p.notices:
        try:
            with rt.store.write() as tx:
                sent = send(tx, rt, n)
            results.append({"alert": n.name, "card": n.payload.get("card"), "sent": sent})
        except Exception as exc:  # an alert failing never stops the pass
            rt.log.error("workflow", f"alert failed: {type(exc).__name__}: {exc}")
    for a in p.actions:
        entry = a.to_dict()
        entry.pop("findings", None)
        try:
            entry["outcome"] = HANDLERS[a.kind](rt, a)
        except Skip as why:
            entry["outcome"] = SKIPPED
            entry["why"] = str(why)
        except LaneboardError as err:
            entry["outcome"] = "failed"
            entry["error"] = err.line()
            rt.log.warn("workflow", f"{a.kind} failed: {err.line()}", card=a.ref)
        except Exception as exc:
            entry["outcome"] = "failed"
            entry["error"] = f"{type(exc).__name__}: {exc}"
            rt.log.error("workflow", f"{a.kind} failed: {entry['error']}", card=a.ref)
        if entry["outcome"] not in (SKIPPED, "failed"):
            rt.log.info("workflow", f"{a.kind}: {entry['outcome']}", card=a.ref)
        results.append(entry)
    return results


def send(tx: Tx, rt: Runtime, n: Notice) -> bool:
    return alerts.raise_alert(
        tx,
        n.key,
        n.state,
        n.severity,
        {"alert": n.name, **n.payload},
        actor=rt.actor,
        card_id=n.card_id,
        project_id=n.project_id,
    )


# -- helpers -----------------------------------------------------------------------------
def _locked(tx: Tx, card_id: int) -> Card:
    card = tx.card(card_id, lock=True)
    if card is None:
        raise Skip(f"card {card_id} is gone")
    return card


def _edited(fields: dict[str, Any]) -> dict[str, Any]:
    """The payload of the ``card.edited`` event of a workflow write of ``fields``."""
    return {"fields": sorted(fields), "by": "workflow"}


def _save(tx: Tx, rt: Runtime, card: Card, fields: dict[str, Any]) -> Card:
    """Write ``fields`` on the card's version read before, with its event; the card as
    written."""
    if not tx.update_card(card.id, card.version, fields):
        raise Skip(f"{card.ref} changed while it was being written")
    fresh = tx.card(card.id)
    assert fresh is not None
    tx.append_event(  # after the read: an event appended last is written with the commit
        "card.edited",
        rt.actor,
        card_id=card.id,
        project_id=card.project_id,
        run_id=card.run_id,
        payload=_edited(fields),
    )
    return fresh


def _review_pair(tx: Tx, a: Action) -> tuple[Card, Card]:
    """The original and its review card, locked, both as the plan saw them."""
    orig = _locked(tx, int(a.data["original"]))
    rev = _locked(tx, a.card_id)
    rnd = int(a.data["review_round"])
    if rev.status is not Status.IN_REVIEW:
        raise Skip(f"{rev.ref} is {rev.status.value}")
    if orig.status is not Status.IN_REVIEW:
        raise Skip(f"{orig.ref} is {orig.status.value}")
    if orig.delivery_round != rnd or _int(rev.meta.get("review_round")) != rnd:
        raise Skip(f"{orig.ref} is on round {orig.delivery_round}, not {rnd}")
    return orig, rev


def _fresh_verdict(tx: Tx, rev: Card, expect: str | None) -> vd.Verdict:
    rep = _review_report(tx, rev)
    if rep is None or rep.author != rev.assignee:
        raise Skip(f"the report on {rev.ref} changed")
    v = vd.parse_verdict(rep.body, vd.anchor_commands(rep.evidence), rep.declared)
    if v.decision != expect:
        raise Skip(f"the verdict on {rev.ref} changed")
    return v


def _close_review(rt: Runtime, rev_id: int, reason: str) -> str:
    card = rt.board.get(rev_id)
    if card.status is not Status.IN_REVIEW:
        return f"review already {card.status.value}"
    rt.board.move(rt.actor, rev_id, "done", reason=reason)
    return "review closed"


def _accept(rt: Runtime, card: Card, reason: str) -> str:
    """``in_review -> done`` through the board's move (landing runs inside it)."""
    try:
        rt.board.move(rt.actor, card.id, "done", reason=reason)
    except LaneboardError as err:
        if err.code in ("ILLEGAL_TRANSITION", "NOT_FOUND"):
            raise Skip(err.message) from None
        with rt.store.write() as tx:
            fresh = tx.card(card.id, lock=True)
            if (
                err.code == "LANDING_BLOCKED"
                and fresh is not None
                and _back_to_worker(tx, rt, fresh)
            ):
                return "landing conflict: sent back to its worker"
            if fresh is not None and fresh.status is Status.IN_REVIEW:
                mark = {"round": fresh.delivery_round, "code": err.code, "at": tx.now()}
                _save(tx, rt, fresh, {"meta": {**fresh.meta, "acceptance_blocked": mark}})
            alerts.raise_alert(
                tx,
                f"workflow|acceptance_blocked|{card.id}",
                f"round={card.delivery_round};code={err.code}",
                "warning",
                {
                    "alert": "acceptance_blocked",
                    "card": card.ref,
                    "code": err.code,
                    "reason": err.message,
                    "fix": err.fix,
                },
                actor=rt.actor,
                card_id=card.id,
                project_id=card.project_id,
            )
        return f"blocked: {err.code}"
    return "accepted"


def _back_to_worker(tx: Tx, rt: Runtime, card: Card) -> bool:
    """A round whose landing conflicts with the current branch goes back to its worker, in a
    new round whose lane starts from that branch with the round merged in (the conflicts
    named in its brief), up to ``CONFLICT_ATTEMPTS`` times; then it waits for a person."""
    from laneboard.workspace.land import last_conflict

    info = last_conflict(tx, card.id)
    if (
        card.status is not Status.IN_REVIEW
        or not isinstance(info, dict)
        or info.get("round") != card.delivery_round
    ):
        return False
    tries = _int(card.meta.get("conflict_attempts"))
    if tries >= CONFLICT_ATTEMPTS:
        return False
    rnd = card.delivery_round
    files = ", ".join(str(f) for f in info.get("files") or [])
    detail = (
        f"Merging your round {rnd} ({info.get('branch')}) into {info.get('onto')} conflicts in "
        f"{files}. Your new lane starts from {info.get('onto')} with round {rnd} merged in: "
        "resolve the conflict markers keeping both sides' intent, then deliver."
    )
    meta = {
        **card.meta,
        "conflict_attempts": tries + 1,
        "landing_conflict": info,
        "conflict_resolve": {**info, "round": rnd + 1, "from_round": rnd},
        "loop_resume": {
            "round": rnd + 1,
            "from_round": rnd,
            "at": tx.now(),
            "reason": f"landing round {rnd} conflicts with {info.get('onto')}",
            "detail": detail,
        },
    }
    tx.insert_comment(card.id, CommentKind.NOTE.value, detail, rt.actor)
    rt.board.move_in(
        tx, rt.actor, card, Status.TODO, reason="landing conflict", new_round=True,
        fields={"meta": meta},
    )  # fmt: skip
    return True


def _finding(tx: Tx, rt: Runtime, orig: Card, rev: Card, rnd: int, findings: str) -> None:
    body = f"Review {rev.ref} rejected round {rnd} of {orig.ref}.\n\n{vd.clean(findings)}".strip()
    tx.insert_comment(orig.id, CommentKind.FINDING.value, body[:20_000], rt.actor)
    tx.append_event(
        "comment.added",
        rt.actor,
        card_id=orig.id,
        project_id=orig.project_id,
        run_id=orig.run_id,
        payload={"kind": CommentKind.FINDING.value, "review": rev.ref},
    )


def _verdict_meta(rev: Card, rnd: int, decision: str, now: int) -> dict[str, Any]:
    return {
        "review_verdict": decision,
        "review_verdict_round": rnd,
        "review_verdict_author": rev.assignee,
        "review_verdict_at": now,
        "review_card": rev.ref,
    }


# -- handlers ----------------------------------------------------------------------------
def _approve(rt: Runtime, a: Action) -> str:
    with rt.store.write() as tx:
        orig, rev = _review_pair(tx, a)
        _fresh_verdict(tx, rev, vd.APPROVE)
        rnd = orig.delivery_round
        auto = orig.acceptance_mode is AcceptanceMode.AUTO
        m = orig.meta
        if not (approve_is_current(orig) and m.get("review_verdict_author") == rev.assignee):
            meta = {**m, **_verdict_meta(rev, rnd, vd.APPROVE, tx.now())}
            if auto:
                meta["accepted_by"] = "loop-review"
            orig = _save(tx, rt, orig, {"meta": meta})
    outcome = "verdict recorded"
    if auto:
        try:
            outcome = _accept(rt, orig, f"approved by {rev.ref}")
        except Skip as why:
            outcome = f"accept skipped: {why}"
    return f"{outcome}; {_close_review(rt, rev.id, 'approved')}"


def _reject(rt: Runtime, a: Action) -> str:
    with rt.store.write() as tx:
        orig, rev = _review_pair(tx, a)
        v = _fresh_verdict(tx, rev, vd.REJECT)
        rnd = orig.delivery_round
        n = rework_count(orig)
        if n != int(a.data["rework_round"]):
            raise Skip(f"{orig.ref} rework count changed")
        _finding(tx, rt, orig, rev, rnd, v.findings)
        crit = vd.must_fix_criteria(orig.acceptance, v.must_fix, rnd, rev.ref)
        added = crit[len(orig.acceptance) :]
        detail = "Must fix (now on the acceptance list):\n" + "\n".join(
            f"{c.id}: {c.text}" for c in added
        )
        meta = {
            **orig.meta,
            **_verdict_meta(rev, rnd, vd.REJECT, tx.now()),
            "rework_round": n,
            "loop_resume": {
                "round": rnd + 1,
                "from_round": rnd,
                "at": tx.now(),
                "reason": f"review {rev.ref} rejected round {rnd}; fix the must-fix items",
                "detail": detail,
            },
        }
        if orig.kind is CardKind.EPIC:
            _fix_child(tx, rt, orig, rnd, added, v.findings)
        rt.board.move_in(
            tx,
            rt.actor,
            orig,
            Status.IN_PROGRESS,
            reason="rework",
            new_round=True,
            fields={"meta": meta, "acceptance": [c.to_dict() for c in crit]},
        )
    return f"rework round {rnd + 1}; {_close_review(rt, rev.id, 'rejected')}"


def _fix_child(tx: Tx, rt: Runtime, epic: Card, rnd: int, items: list[Any], findings: str) -> None:
    """Create and link the epic's fix child before the epic is reopened."""
    template = epic.meta.get("fix_child_meta")
    meta: dict[str, Any] = dict(template) if isinstance(template, dict) else {}
    meta.update(fix_of=epic.id, fix_round=rnd)
    first = items[0].text if items else "the review findings"
    title = f"Fix {epic.ref} (round {rnd}): {first}"[:400]
    rt.board.create_card(
        rt.actor,
        epic.project_id,
        title,
        description=vd.clean(findings)[:20_000],
        kind="task",
        parent=epic.id,
        assignee=epic.meta.get("fix_assignee") or None,
        priority=epic.priority,
        acceptance=[c.text for c in items],
        acceptance_mode=epic.acceptance_mode.value,
        meta=meta,
        idempotency_key=fix_key(epic.ref, rnd),
        run_id=epic.run_id,
        tx=tx,
    )


def _hold_rework(rt: Runtime, a: Action) -> str:
    with rt.store.write() as tx:
        orig, rev = _review_pair(tx, a)
        v = _fresh_verdict(tx, rev, vd.REJECT)
        rnd = orig.delivery_round
        n = rework_count(orig)
        _finding(tx, rt, orig, rev, rnd, v.findings)
        crit = vd.must_fix_criteria(orig.acceptance, v.must_fix, rnd, rev.ref)
        meta = {
            **orig.meta,
            **_verdict_meta(rev, rnd, vd.REJECT, tx.now()),
            "rework_round": n,
            "rework_base_round": rnd,  # the next run counts from here: a hold is an epoch
        }
        orig = _save(tx, rt, orig, {"meta": meta, "acceptance": [c.to_dict() for c in crit]})
        place_hold(
            rt,
            tx,
            orig,
            "rework",
            int(a.data["bound"]),
            f"its review rejected it {n} times in a row (last: {rev.ref}); the must-fix "
            f"items are on its acceptance list.",
            reason="decision",
        )
    return f"held; {_close_review(rt, rev.id, 'rework bound')}"


def _reopen_review(rt: Runtime, a: Action) -> str:
    with rt.store.write() as tx:
        orig, rev = _review_pair(tx, a)
        retry = int(a.data["retry"])
        if _int(rev.meta.get("review_retry")) != retry - 1:
            raise Skip(f"{rev.ref} was already reopened")
        rep = _review_report(tx, rev)
        v = vd.parse_verdict(
            rep.body if rep else "", vd.anchor_commands(rep.evidence) if rep else [], None
        )
        if v.ok and rep is not None and rep.declared in (None, v.decision):
            raise Skip(f"the report on {rev.ref} became readable")
        detail = str(a.data.get("detail") or v.detail)
        note = (
            f"Your report could not be used ({a.reason}): {detail}. Report again: the first "
            f"line must be exactly 'VERDICT: APPROVE' or 'VERDICT: REJECT'; an APPROVE needs "
            f"a command anchor (report evidence, or a '$ command' line); number the must-fix "
            f"items of a REJECT (1. …). Attempt {retry} of {REVIEW_RETRY_MAX}."
        )
        tx.insert_comment(rev.id, CommentKind.NOTE.value, note, rt.actor)
        meta = {
            **rev.meta,
            "review_retry": retry,
            "review_problem": a.reason,
            "loop_resume": {
                "round": rev.delivery_round,
                "from_round": rev.delivery_round,
                "at": tx.now(),
                "reason": f"your verdict on {orig.ref} could not be used ({a.reason})",
                "detail": note,
            },
        }
        rt.board.move_in(
            tx, rt.actor, rev, Status.IN_PROGRESS, reason=a.reason, fields={"meta": meta}
        )
    return f"review reopened ({retry}/{REVIEW_RETRY_MAX})"


def _hold_review(rt: Runtime, a: Action) -> str:
    with rt.store.write() as tx:
        orig, rev = _review_pair(tx, a)
        if _int(rev.meta.get("review_retry")) < REVIEW_RETRY_MAX:
            raise Skip(f"{rev.ref} has reopens left")
        place_hold(
            rt,
            tx,
            orig,
            "review verdict",
            REVIEW_RETRY_MAX,
            f"the verdict of {rev.ref} could not be used after {REVIEW_RETRY_MAX} reopens "
            f"({a.reason}: {a.data.get('detail', '')}).",
            reason="decision",
        )
        rt.board.move_in(tx, rt.actor, rev, Status.CANCELED, reason="review retries exhausted")
    return "original held; review canceled"


def _close(rt: Runtime, a: Action) -> str:
    return _close_review(rt, a.card_id, a.reason)


def _accept_approved(rt: Runtime, a: Action) -> str:
    card = rt.board.get(a.card_id)
    if card.status is not Status.IN_REVIEW or not approve_is_current(card):
        raise Skip(f"{card.ref} is no longer an approved card in review")
    if acceptance_blocked(card):
        raise Skip(f"{card.ref}'s acceptance was refused on this round; a human lands it")
    if card.acceptance_mode is not AcceptanceMode.AUTO:
        raise Skip(f"{card.ref} is not in acceptance mode auto")
    return _accept(rt, card, "approved")


def _auto_accept(rt: Runtime, a: Action) -> str:
    """Mark the card accepted by the loop, then accept it. The checks run on a read
    outside any transaction and the mark is written on the version read, with its event,
    in one statement (``save_with_event``): a card that changed since is skipped, and
    the next pass looks at it again."""
    with rt.store.autocommit() as tx:
        card = tx.card(a.card_id)
        if card is None:
            raise Skip(f"card {a.card_id} is gone")
        if card.status is not Status.IN_REVIEW or card.acceptance_mode is not AcceptanceMode.OFF:
            raise Skip(f"{card.ref} is {card.status.value}, mode {card.acceptance_mode.value}")
        if tx.card_by_key(review_key(card.ref, card.delivery_round)) is not None:
            raise Skip(f"{card.ref} has an open review card")
    if acceptance_blocked(card):
        raise Skip(f"{card.ref}'s acceptance was refused on this round; a human lands it")
    if card.meta.get("accepted_by") != "loop-auto":
        # the move that follows reads the card itself: only its id is needed here
        fields = {"meta": {**card.meta, "accepted_by": "loop-auto"}}
        event = ("card.edited", rt.actor, _edited(fields))
        row = save_with_event(rt.store, card.id, card.version, fields, event)
        if row is None:
            raise Skip(f"{card.ref} changed while it was being written")
    return _accept(rt, card, "acceptance off")


def _review_script(orig: Card) -> Any:
    script = orig.meta.get("review_script")
    if isinstance(script, dict) and any(k.startswith("r") for k in script):
        return script.get(f"r{orig.delivery_round}", script.get("default"))
    return script


def _dispatch(rt: Runtime, a: Action) -> str:
    rnd, reviewer = int(a.data["round"]), str(a.data["reviewer"])
    try:
        with rt.store.write() as tx:
            orig = _locked(tx, a.card_id)
            if orig.status is not Status.IN_REVIEW or orig.delivery_round != rnd:
                raise Skip(f"{orig.ref} is {orig.status.value} on round {orig.delivery_round}")
            if orig.acceptance_mode is AcceptanceMode.OFF or review_of(orig) is not None:
                raise Skip(f"{orig.ref} is not reviewed")
            if approve_is_current(orig):
                raise Skip(f"{orig.ref} already has this round's verdict")
            key = review_key(orig.ref, rnd)
            if tx.card_by_key(key) is not None:
                raise Skip(f"{orig.ref} already has a review card for round {rnd}")
            meta: dict[str, Any] = {
                "review_of": orig.id,
                "review_of_ref": orig.ref,
                "review_round": rnd,
                "flow": "B",
            }
            script = _review_script(orig)
            if script is not None:
                meta["script"] = script
            rev = rt.board.create_card(
                rt.actor,
                orig.project_id,
                f"Review {orig.ref} (round {rnd}): {orig.title}"[:500],
                description=_review_brief(orig, rnd),
                assignee=reviewer,
                priority=orig.priority,
                labels=[REVIEW_LABEL],
                acceptance_mode="auto",  # a review card never takes the project's default
                allowed_paths=(),
                meta=meta,
                idempotency_key=key,
                run_id=orig.run_id,
                tx=tx,
            )
    except IntegrityError:
        raise Skip("another pass created the review card first") from None
    return f"review card {rev.ref}"


def _review_brief(orig: Card, rnd: int) -> str:
    return (
        f"Review the delivery of {orig.ref} (round {rnd}): {orig.title}\n\n"
        f"Read it with: lb card get {orig.ref} --json (acceptance list, report, comments).\n"
        f"Verify each acceptance item at the report's commit; re-run the checks yourself.\n"
        f"Report on THIS card (you move nothing else):\n"
        f"- the first line is exactly 'VERDICT: APPROVE' or 'VERDICT: REJECT';\n"
        f"- an APPROVE names the commands you ran (--evidence 'EXIT:COMMAND', or a line "
        f"'$ command');\n"
        f"- a REJECT numbers each must-fix item on its own line ('1. …').\n"
        f"Then move this card to in_review. The workflow applies the verdict."
    )


def _rollup(rt: Runtime, a: Action) -> str:
    with rt.store.write() as tx:
        epic = _locked(tx, a.card_id)
        if epic.status not in ROLLUP_FROM or currently_held(epic):
            raise Skip(f"{epic.ref} is {epic.status.value}")
        if epic.delivery_round != int(a.data["round"]):
            raise Skip(f"{epic.ref} moved to round {epic.delivery_round}")
        kids = tx.children_of_epic(epic.id)
        if not kids or any(not k.terminal for k in kids):
            raise Skip(f"{epic.ref} has unfinished children")
        done = [k for k in kids if k.status is Status.DONE]
        if not done:
            raise Skip(f"{epic.ref} has no done child")
        if epic.status is Status.BLOCKED:
            epic = rt.board.move_in(tx, rt.actor, epic, Status.TODO, reason="rollup")
        if epic.status is Status.TODO:
            epic = rt.board.move_in(tx, rt.actor, epic, Status.IN_PROGRESS, reason="rollup")
        rnd = epic.delivery_round
        if tx.report(epic.id, rnd) is None:
            lines = [f"Roll-up of {epic.ref} (round {rnd}): every child is terminal."]
            lines += [f"- {k.ref} {k.status.value}: {k.title}" for k in kids]
            tx.upsert_report(epic.id, rnd, "\n".join(lines)[:200_000], None, [], None, rt.actor)
            tx.append_event(
                "report.added",
                rt.actor,
                card_id=epic.id,
                project_id=epic.project_id,
                run_id=epic.run_id,
                payload={"round": rnd, "evidence": 0, "verdict": None, "rollup": True},
            )
        rt.board.move_in(tx, rt.actor, epic, Status.IN_REVIEW, reason="rollup")
    return f"in_review on round {rnd}"


HANDLERS = {
    "rollup_epic": _rollup,
    "approve": _approve,
    "reject": _reject,
    "hold_rework": _hold_rework,
    "reopen_review": _reopen_review,
    "hold_review": _hold_review,
    "close_review": _close,
    "accept": _accept_approved,
    "auto_accept": _auto_accept,
    "dispatch": _dispatch,
}
